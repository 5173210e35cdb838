"""Run-directory analyses beyond the held-out test: head attribute scores of the model
(``head_attributes.json``, :class:`HeadAttributesDocument`) and the comparison with a circuit
(``compare-<circuit>.json``, :class:`CompareDocument`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from celtk.boundary import annotation_names, public
from celtk.circuits import (
    check_probe,
    compare_with_circuit,
    critical_and_enhancing,
    head_attribute_scores,
    load_circuit,
)
from celtk.errors import ConfigError, RunStoreError
from celtk.heads import Head, HeadSet
from celtk.run.directory import RunDirectory
from celtk.run.documents import (
    HEAD,
    SCHEMA_VERSION,
    Document,
    Record,
    ScreenDocument,
    SelectionDocument,
    coded,
    optional_record,
    rows,
)
from celtk.runstore import locked, write_json
from celtk.search.scores import rank

if TYPE_CHECKING:
    from celtk.models import Model  # not at import time: the report reads these documents without torch

__getattr__ = annotation_names({"Model": "celtk.models"})  # for the boundary's type check

def _unwritten_version() -> Any:
    """Both files were written before documents carried schema_version: it is not written (layout 1, as
    Document.from_json reads a file without one), so they stay byte for byte what they were; a new
    layout writes it."""
    return field(default=SCHEMA_VERSION, metadata={"stored": False})


def _record(kind: type) -> Any:
    """A field holding one ``kind`` record (decoded by ``from_json``)."""
    return field(metadata={"record": kind})


# ---------------------------------------------------------------------------------------------
# head_attributes.json


@dataclass(frozen=True, kw_only=True)
class AttributeProbe(Record):
    """The probe sequences: ``batch`` sequences of ``length`` random tokens repeated once."""

    sequence: str
    length: int
    batch: int
    seed: int


@dataclass(frozen=True, kw_only=True)
class HeadAttributesDocument(Document):
    """Previous-token, duplicate-token and induction scores (mean attention weights) of every head."""

    DIGESTED: ClassVar[bool] = False  # written without a digest (celtk.run.documents.check_digest)
    FILE: ClassVar[str] = "head_attributes.json"
    schema_version: int = _unwritten_version()
    model: str
    n_layers: int
    n_heads: int
    probe: AttributeProbe = _record(AttributeProbe)
    scores: dict[str, list[list[float]]]  # detector -> [layer][head]
    selected: dict[str, dict[str, float]]  # each selected head -> detector -> score (the selection's order)

    def score(self, detector: str, head: Head) -> float:
        return self.scores[detector][head.layer][head.head]


# ---------------------------------------------------------------------------------------------
# compare-CIRCUIT.json


@dataclass(frozen=True, kw_only=True)
class SharedHead(Record):
    head: str
    role: str  # its role in the circuit


@dataclass(frozen=True, kw_only=True)
class Overlap(Record):
    """How many of ``n`` heads are circuit heads, beside the number expected by chance (hypergeometric)."""

    n: int
    overlap: int
    expected_by_chance: float
    p_at_least: float  # P(overlap at least this large) for n heads drawn at random
    shared: list[SharedHead] = rows(SharedHead)


@dataclass(frozen=True, kw_only=True)
class RoleRanks(Record):
    heads: list[str]
    ranks: list[int | None]  # screen ranks (1 = removal helps most); None: not ranked (racing screens)


@dataclass(frozen=True, kw_only=True)
class CriticalHead(Record):
    head: str
    gain_count: int
    damage: int


@dataclass(frozen=True, kw_only=True)
class EnhancingHead(Record):
    head: str
    gain_count: int
    fixes: int


@dataclass(frozen=True, kw_only=True)
class CriticalAndEnhancing(Record):
    """The heads whose removal hurts most (task-critical) and helps most (enhancing), by layer."""

    critical: list[CriticalHead] = rows(CriticalHead)
    enhancing: list[EnhancingHead] = rows(EnhancingHead)
    critical_layers: dict[int, int]  # layer -> heads (JSON writes the layer as a string key)
    enhancing_layers: dict[int, int]
    overlap: list[str]
    both_fix_and_damage: list[str]

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "") -> CriticalAndEnhancing:
        layers: dict[str, dict[int, int]] = {name: {int(layer): count for layer, count in data[name].items()}
                  for name in ("critical_layers", "enhancing_layers") if name in data}
        return super().from_json({**data, **layers}, where)


@dataclass(frozen=True, kw_only=True)
class RacingNote(Record):
    """On a racing screen only the top-``p`` pool is ranked on every discovery example."""

    mode: str
    p: int
    ranked: list[Head] = coded(HEAD, depth=1)  # the pool, best first
    note: str


@dataclass(frozen=True, kw_only=True)
class CompareDocument(Document):
    """The run's selection and screen ranking against a circuit (``compare-<circuit>.json``).

    ``screen_top`` is written under the key ``screen_top<top>`` (e.g. ``screen_top10``), as before
    documents were typed."""

    DIGESTED: ClassVar[bool] = False  # written without a digest (celtk.run.documents.check_digest)
    schema_version: int = _unwritten_version()
    circuit: str
    circuit_model: str
    source: str
    n_circuit_heads: int
    population: int  # heads in the model
    selection: Overlap = _record(Overlap)
    top: int  # how many of the screen's best heads are compared (the key of screen_top)
    screen_top: Overlap = _record(Overlap)
    circuit_head_ranks: dict[str, int | None]
    mean_rank_of_circuit_heads: float | None  # None: no circuit head ranked, or a racing screen
    mean_rank_by_chance: float | None
    by_role: dict[str, RoleRanks]
    critical_vs_enhancing: CriticalAndEnhancing | None = _record(CriticalAndEnhancing)  # None: racing screens
    racing: RacingNote | None = optional_record(RacingNote)
    run_selection: list[str]

    @staticmethod
    def file(circuit: str | Path) -> str:
        """``compare-<circuit>.json``, from a circuit file's stem or a packaged circuit's name."""
        return f"compare-{Path(str(circuit)).stem.replace('_', '-')}.json"

    def to_json(self) -> dict[str, Any]:
        out = {}
        for key, value in super().to_json().items():
            if key == "top":
                continue
            if key == "by_role":
                value = {role: ranks.to_json() for role, ranks in self.by_role.items()}
            out[f"screen_top{self.top}" if key == "screen_top" else key] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "") -> CompareDocument:
        keys = [k for k in data if k.startswith("screen_top") and k[len("screen_top"):].isdigit()]
        if len(keys) != 1:
            raise RunStoreError(f"{where or 'compare document'} needs one screen_top<N> field, found "
                                f"{', '.join(keys) or 'none'}; rerun `celtk compare`.")
        decoded = {("screen_top" if k == keys[0] else k): v for k, v in data.items()}
        decoded["top"] = int(keys[0][len("screen_top"):])
        if "by_role" in data:
            decoded["by_role"] = {role: RoleRanks.from_json(ranks, where) for role, ranks in data["by_role"].items()}
        return super().from_json(decoded, where)


# ---------------------------------------------------------------------------------------------


def _selected_heads(out: Path) -> HeadSet:
    """The frozen selection's heads, or none before ``selection.json`` exists."""
    return SelectionDocument.load(out).heads if (Path(out) / SelectionDocument.FILE).exists() else HeadSet()


@public
def run_attributes(out: Path, *, model: Model | None = None, length: int = 40, batch: int = 8,
                   seed: int = 0) -> HeadAttributesDocument:
    """Previous-token, duplicate-token and induction scores of every head of the run's model."""
    from celtk.run.session import session_for

    check_probe(length, batch)  # before the model loads
    out = Path(out)
    rd = RunDirectory(out)
    with rd.lock():
        rd.require("attributes")
        doc = rd.load(ScreenDocument)
        session = session_for(doc, model)
        rd.admit("attributes", session, doc)
        scores = head_attribute_scores(session.model, length=length, batch=batch, seed=seed)
        frozen = rd.load_if(SelectionDocument)  # read once, through the stage's run directory
        selection = frozen.heads if frozen is not None else HeadSet()
        document = HeadAttributesDocument(
            model=doc.model_name, n_layers=session.model.n_layers, n_heads=session.model.n_heads,
            probe=AttributeProbe(sequence="random tokens repeated once", length=length, batch=batch, seed=seed),
            scores={name: [[round(float(v), 6) for v in row] for row in array] for name, array in scores.items()},
            selected={str(h): {name: round(float(array[h.layer, h.head]), 6) for name, array in scores.items()}
                      for h in selection})
        write_json(out / HeadAttributesDocument.FILE, document.to_json())
        return document


@public
def run_compare(out: Path, circuit: str, *, top: int = 10, any_model: bool = False) -> CompareDocument:
    """Overlap of the run's selection and screen ranking with ``circuit`` (a file or packaged name),
    and the run's task-critical vs enhancing heads. Needs no model. A circuit found on another model than the
    run's is refused unless ``any_model`` (one of another shape always is).

    On a racing screen only the top-``p`` pool has a rank on the whole discovery set (the other heads
    were dropped early or, kept to the end, may rank below dropped ones): the ranking is the pool,
    ``top`` must be at most ``p``, the mean ranks and the critical heads (the bottom of the ranking)
    are ``None``, and ``racing`` says why."""
    from celtk.run.session import load_screen

    out = Path(out)
    loaded = load_circuit(circuit)
    doc, _, scores = load_screen(out)
    racing = doc.racing
    if racing is not None and top > racing.p:
        raise ConfigError(f"This run's screen raced for the top p = {racing.p} heads, so only those are ranked on "
                          f"every discovery example; compare with top ≤ {racing.p} (--top {racing.p}), or screen "
                          "exhaustively (screen = 'exhaustive', `--screen exhaustive`) in a new directory to rank "
                          "every head.")
    selection = _selected_heads(out)
    ranking = [head for s in rank(scores) for head in s.heads]
    if racing is not None:
        ranking = ranking[:racing.p]
    # the circuit helpers give the comparison's fields as its file writes them; the document decodes them once
    report = CompareDocument.from_json({
        **compare_with_circuit(loaded, doc.n_layers, doc.n_heads, list(selection), ranking, top,
                               model=None if any_model else doc.model_name),
        "critical_vs_enhancing": None if racing else critical_and_enhancing(scores, n=top),
        "run_selection": selection.names()})
    if racing is not None:
        report = replace(report, mean_rank_of_circuit_heads=None, mean_rank_by_chance=None, racing=RacingNote(
            mode=racing.mode, p=racing.p, ranked=ranking,
            note=f"a racing screen ranks only its top {racing.p} heads on the whole discovery set; circuit heads "
                 "outside them have no rank (null), and task-critical heads need an exhaustive screen"))
    with locked(out):
        write_json(out / CompareDocument.file(circuit), report.to_json())
    return report
