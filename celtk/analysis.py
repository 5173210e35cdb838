"""Run-directory analyses beyond the held-out test: head attribute scores of the model
(``head_attributes.json``) and the comparison with a circuit (``compare-<circuit>.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celtk.circuits import compare_with_circuit, critical_and_enhancing, head_attribute_scores, load_circuit
from celtk.errors import ConfigError
from celtk.heads import Head
from celtk.models import Model
from celtk.run.documents import ScreenDocument, SelectionDocument
from celtk.runstore import locked, write_json
from celtk.scores import rank


def _selected_heads(out: Path) -> list[str]:
    """The frozen selection's heads, or none before ``selection.json`` exists."""
    return SelectionDocument.load(out).heads if (Path(out) / SelectionDocument.FILE).exists() else []


def run_attributes(out: Path, *, model: Model | None = None, length: int = 40, batch: int = 8, seed: int = 0) -> dict[str, Any]:
    """Previous-token, duplicate-token and induction scores of every head of the run's model."""
    from celtk.run.session import session_for

    out = Path(out)
    with locked(out):
        doc = ScreenDocument.load(out)
        session = session_for(doc, model)
        scores = head_attribute_scores(session.model, length=length, batch=batch, seed=seed)
        selection = _selected_heads(out)
        document = {
            "model": doc.model_name, "n_layers": session.model.n_layers, "n_heads": session.model.n_heads,
            "probe": {"sequence": "random tokens repeated once", "length": length, "batch": batch, "seed": seed},
            "scores": {name: [[round(float(v), 6) for v in row] for row in array] for name, array in scores.items()},
            "selected": {str(h): {name: round(float(array[h.layer, h.head]), 6) for name, array in scores.items()}
                         for h in map(Head.parse, selection)},
        }
        write_json(out / "head_attributes.json", document)
        return document


def run_compare(out: Path, circuit: str, *, top: int = 10) -> dict[str, Any]:
    """Overlap of the run's selection and screen ranking with ``circuit`` (a file or packaged name),
    and the run's task-critical vs enhancing heads. Needs no model.

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
        raise ConfigError(f"This run's screen raced for the top p = {racing.p} heads, so only those are ranked on every "
                          f"discovery example; compare with top ≤ {racing.p} (--top {racing.p}), or screen exhaustively "
                          "(screen = 'exhaustive', `--screen exhaustive`) in a new directory to rank every head.")
    selection = _selected_heads(out)
    ranking = [str(next(iter(s.heads.heads))) for s in rank(scores)]
    if racing is not None:
        ranking = ranking[:racing.p]
    report = compare_with_circuit(loaded, doc.n_layers, doc.n_heads, selection, ranking, top)
    report["critical_vs_enhancing"] = None if racing else critical_and_enhancing([r.to_json() for r in doc.heads], n=top)
    if racing is not None:
        report |= {"mean_rank_of_circuit_heads": None, "mean_rank_by_chance": None,
                   "racing": {"mode": racing.mode, "p": racing.p, "ranked": ranking,
                              "note": f"a racing screen ranks only its top {racing.p} heads on the whole discovery set; "
                                      "circuit heads outside them have no rank (null), and task-critical heads need "
                                      "an exhaustive screen"}}
    report["run_selection"] = selection
    slug = Path(str(circuit)).stem.replace("_", "-")
    with locked(out):
        write_json(out / f"compare-{slug}.json", report)
    return report
