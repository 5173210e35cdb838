"""The documents of the analyses beyond the held-out test: head attribute scores of the model
(``head_attributes.json``, :class:`HeadAttributesDocument`) and the comparison with a circuit
(``compare-<circuit>.json``, :class:`CompareDocument`). The stages that write them, ``run_attributes`` and
``run_compare``, are :mod:`celtk.run.analyses`'s (``celtk.run.run_attributes``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NoReturn

from celtk.errors import RunStoreError
from celtk.heads import Head
from celtk.store.documents import (
    HEAD,
    KEYS,
    MODEL_NAME,
    SCHEMA_VERSION,
    Document,
    ModelName,
    Record,
    coded,
    optional_record,
    record,
    rows,
)

MOVED = {"run_attributes": "celtk.run.analyses", "run_compare": "celtk.run.analyses"}


def __getattr__(name: str) -> NoReturn:
    """A name that moved says where it went (the stages sit above the documents they write)."""
    if name in MOVED:  # an ImportError: `from celtk.analysis import run_compare` shows this message
        raise ImportError(f"celtk.analysis.{name} moved to {MOVED[name]}.{name} (also celtk.run.{name} and the Run "
                          "handle's method); import it from there.")
    raise AttributeError(f"module 'celtk.analysis' has no attribute {name!r}")


# untyped: as int the tests' run-time type check would refuse the Field it returns
def _unwritten_version() -> Any:
    """Both files were written before documents carried schema_version: it is not written (layout 1, as
    Document.from_json reads a file without one), so they stay byte for byte what they were; a new
    layout writes it."""
    return field(default=SCHEMA_VERSION, metadata={"stored": False})


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

    DIGESTED: ClassVar[bool] = False  # written without a digest (celtk.store.documents.check_digest)
    FILE: ClassVar[str] = "head_attributes.json"
    schema_version: int = _unwritten_version()
    model: ModelName = coded(MODEL_NAME)
    n_layers: int
    n_heads: int
    probe: AttributeProbe = record(AttributeProbe)
    scores: dict[str, list[list[float]]]  # detector -> [layer][head]
    # each selected head -> detector -> score (the selection's order)
    selected: dict[Head, dict[str, float]] = coded(HEAD, depth=KEYS)

    def score(self, detector: str, head: Head) -> float:
        return self.scores[detector][head.layer][head.head]


# ---------------------------------------------------------------------------------------------
# compare-CIRCUIT.json


@dataclass(frozen=True, kw_only=True)
class SharedHead(Record):
    head: Head = coded(HEAD)
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
    heads: list[Head] = coded(HEAD, depth=1)
    ranks: list[int | None]  # screen ranks (1 = removal helps most); None: not ranked (racing screens)


@dataclass(frozen=True, kw_only=True)
class CriticalHead(Record):
    head: Head = coded(HEAD)
    gain_count: int
    damage: int


@dataclass(frozen=True, kw_only=True)
class EnhancingHead(Record):
    head: Head = coded(HEAD)
    gain_count: int
    fixes: int


@dataclass(frozen=True, kw_only=True)
class CriticalAndEnhancing(Record):
    """The heads whose removal hurts most (task-critical) and helps most (enhancing), by layer."""

    critical: list[CriticalHead] = rows(CriticalHead)
    enhancing: list[EnhancingHead] = rows(EnhancingHead)
    critical_layers: dict[int, int]  # layer -> heads (JSON writes the layer as a string key)
    enhancing_layers: dict[int, int]
    overlap: list[Head] = coded(HEAD, depth=1)
    both_fix_and_damage: list[Head] = coded(HEAD, depth=1)

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

    DIGESTED: ClassVar[bool] = False  # written without a digest (celtk.store.documents.check_digest)
    schema_version: int = _unwritten_version()
    circuit: str
    circuit_model: str
    source: str
    n_circuit_heads: int
    population: int  # heads in the model
    selection: Overlap = record(Overlap)
    top: int  # how many of the screen's best heads are compared (the key of screen_top)
    screen_top: Overlap = record(Overlap)
    circuit_head_ranks: dict[Head, int | None] = coded(HEAD, depth=KEYS)
    mean_rank_of_circuit_heads: float | None  # None: no circuit head ranked, or a racing screen
    mean_rank_by_chance: float | None
    by_role: dict[str, RoleRanks]
    critical_vs_enhancing: CriticalAndEnhancing | None = record(CriticalAndEnhancing)  # None: racing screens
    racing: RacingNote | None = optional_record(RacingNote)
    run_selection: list[Head] = coded(HEAD, depth=1)

    @staticmethod
    def file(circuit: str | Path) -> str:
        """``compare-<circuit>.json``, from a circuit file's stem or a packaged circuit's name."""
        return f"compare-{Path(str(circuit)).stem.replace('_', '-')}.json"

    def to_json(self) -> dict[str, object]:
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
