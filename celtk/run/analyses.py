"""The analyses of a run directory as stages: head attribute scores of the run's model (``head_attributes.json``)
and the comparison of its heads with a known circuit (``compare-<circuit>.json``). The documents and the
computations are :mod:`celtk.analysis`'s and :mod:`celtk.circuits`'s; this module opens the run, checks it and
writes the file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from celtk.analysis import AttributeProbe, CompareDocument, HeadAttributesDocument, RacingNote
from celtk.boundary import public
from celtk.circuits import (
    check_probe,
    compare_with_circuit,
    critical_and_enhancing,
    head_attribute_scores,
    load_circuit,
)
from celtk.errors import ConfigError
from celtk.heads import HeadSet
from celtk.models import Model
from celtk.run.options import ATTRIBUTES, COMPARE
from celtk.run.session import load_screen, session_for
from celtk.search.scores import rank
from celtk.store.directory import RunDirectory
from celtk.store.documents import ScreenDocument, SelectionDocument
from celtk.store.files import locked, write_json


def _selected_heads(out: Path) -> HeadSet:
    """The frozen selection's heads, or none before ``selection.json`` exists."""
    return SelectionDocument.load(out).heads if (Path(out) / SelectionDocument.FILE).exists() else HeadSet()


@public
def run_attributes(out: Path, *, model: Model | None = None, length: int = ATTRIBUTES.length,
                   batch: int = ATTRIBUTES.batch, seed: int = ATTRIBUTES.seed) -> HeadAttributesDocument:
    """Previous-token, duplicate-token and induction scores of every head of the run's model."""
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
            model=doc.model.ref, n_layers=session.model.n_layers, n_heads=session.model.n_heads,
            probe=AttributeProbe(sequence="random tokens repeated once", length=length, batch=batch, seed=seed),
            scores={name: [[round(float(v), 6) for v in row] for row in array] for name, array in scores.items()},
            selected={h: {name: round(float(array[h.layer, h.head]), 6) for name, array in scores.items()}
                      for h in selection})
        write_json(out / HeadAttributesDocument.FILE, document.to_json())
        return document


@public
def run_compare(out: Path, circuit: str, *, top: int = COMPARE.top, any_model: bool = False) -> CompareDocument:
    """Overlap of the run's selection and screen ranking with ``circuit`` (a file or packaged name),
    and the run's task-critical vs enhancing heads. Needs no model. A circuit found on another model than the
    run's is refused unless ``any_model`` (one of another shape always is).

    On a racing screen only the top-``p`` pool has a rank on the whole discovery set (the other heads
    were dropped early or, kept to the end, may rank below dropped ones): the ranking is the pool,
    ``top`` must be at most ``p``, the mean ranks and the critical heads (the bottom of the ranking)
    are ``None``, and ``racing`` says why."""
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
