"""Run-directory analyses beyond the held-out test: head attribute scores of the model
(``head_attributes.json``) and the comparison with a circuit (``compare-<circuit>.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celtk.circuits import compare_with_circuit, critical_and_enhancing, head_attribute_scores, load_circuit
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
    and the run's task-critical vs enhancing heads. Needs no model."""
    from celtk.run.session import load_screen

    out = Path(out)
    loaded = load_circuit(circuit)
    doc, _, scores = load_screen(out)
    selection = _selected_heads(out)
    ranking = [str(next(iter(s.heads.heads))) for s in rank(scores)]
    report = compare_with_circuit(loaded, doc.n_layers, doc.n_heads, selection, ranking, top)
    report["critical_vs_enhancing"] = critical_and_enhancing([r.to_json() for r in doc.heads], n=top)
    report["run_selection"] = selection
    slug = Path(str(circuit)).stem.replace("_", "-")
    with locked(out):
        write_json(out / f"compare-{slug}.json", report)
    return report
