"""Run-directory analyses beyond the held-out test: head attribute scores of the model
(``head_attributes.json``) and the comparison with a circuit (``compare-<circuit>.json``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celtk.circuits import compare_with_circuit, critical_and_enhancing, head_attribute_scores, load_circuit
from celtk.heads import Head
from celtk.models import Model
from celtk.runstore import locked, read_json, write_json
from celtk.selection import rank


def _screen(out: Path) -> dict[str, Any]:
    return read_json(Path(out) / "screen.json")


def run_attributes(out: Path, *, model: Model | None = None, length: int = 40, batch: int = 8, seed: int = 0) -> dict[str, Any]:
    """Previous-token, duplicate-token and induction scores of every head of the run's model."""
    from celtk.pipeline import _session_for

    out = Path(out)
    with locked(out):
        doc = _screen(out)
        session = _session_for(doc, model)
        scores = head_attribute_scores(session.model, length=length, batch=batch, seed=seed)
        selection = read_json(out / "selection.json")["heads"] if (out / "selection.json").exists() else []
        document = {
            "model": doc["model"]["name"], "n_layers": session.model.n_layers, "n_heads": session.model.n_heads,
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
    from celtk.pipeline import load_screen

    out = Path(out)
    loaded = load_circuit(circuit)
    doc, _, scores = load_screen(out)
    selection = read_json(out / "selection.json")["heads"] if (out / "selection.json").exists() else []
    ranking = [str(next(iter(s.heads.heads))) for s in rank(scores)]
    report = compare_with_circuit(loaded, doc["model"]["n_layers"], doc["model"]["n_heads"], selection, ranking, top)
    report["critical_vs_enhancing"] = critical_and_enhancing(doc["heads"], n=top)
    report["run_selection"] = selection
    slug = Path(str(circuit)).stem.replace("_", "-")
    with locked(out):
        write_json(out / f"compare-{slug}.json", report)
    return report
