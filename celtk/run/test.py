"""The held-out test: the frozen selection against the intact model, in one matched run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from celtk.errors import RunStoreError
from celtk.heads import HeadSet
from celtk.models import Model
from celtk.run.documents import SelectionDocument, TestDocument, TestExample
from celtk.run.session import check_no_overlap, session_for
from celtk.runstore import locked
from celtk.stats import compare_paired

Progress = Callable[[str, int, int], None]


def run_test(out: Path, *, heldout: int | None = None, model: Model | None = None, n_boot: int = 10_000,
             progress: Progress | None = None) -> TestDocument:
    """Score ``selection.json``'s heads and the intact model on the held-out set (``heldout``
    examples, default as configured); McNemar and a paired bootstrap CI, and the shrinkage from
    the selection-biased discovery gain to the held-out gain; writes ``test.json``."""
    out = Path(out)
    with locked(out):
        sel = SelectionDocument.load(out)
        session = session_for(sel, model, **({"heldout": heldout} if heldout is not None else {}))
        if session.task.config() != sel.task:
            raise RunStoreError(f"selection.json was made for task {sel.task['task']!r}, not {session.task.full_name!r}.")
        check_no_overlap(sel.discovery_hashes, sel.discovery_ids, session.splits.heldout)
        heads = HeadSet.parse(",".join(sel.heads))
        if progress:
            progress("test", 0, 2)
        intact, results = session.screener("heldout").run([heads])
        ablated = results[heads]
        if progress:
            progress("test", 2, 2)
        cmp = compare_paired(intact.correct, ablated.correct, n_boot=n_boot, seed=session.config.seed)
        document = TestDocument(
            heads=sel.heads, strategy=sel.strategy, model=sel.model["name"], task=sel.task["task"], n=cmp.n,
            intact_accuracy=cmp.intact_accuracy, ablated_accuracy=cmp.ablated_accuracy, gain=cmp.gain,
            relative_error_reduction=cmp.relative_error_reduction, fixes=cmp.fixes, damage=cmp.damage,
            mcnemar_p=cmp.mcnemar_p, gain_ci=list(cmp.gain_ci), ci_level=cmp.ci_level, n_boot=n_boot,
            heldout_hash=session.splits.manifest()["heldout_hash"],
            examples=[TestExample(id=a.id, intact_correct=a.correct, ablated_correct=b.correct,
                                  intact_logprob=a.logprob, ablated_logprob=b.logprob)
                      for a, b in zip(intact.examples, ablated.examples)],
            discovery_gain=sel.discovery_gain, shrinkage=sel.discovery_gain - cmp.gain)
        document.save(out)
        return document
