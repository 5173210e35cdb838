"""The held-out test: the frozen selection against the intact model, in one matched run."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from celtk.errors import RunStoreError
from celtk.heads import HeadSet
from celtk.models import Model
from celtk.run.documents import ScreenDocument, SelectionDocument, TestDocument, TestExample
from celtk.run.integrity import check_selection_matches_screen
from celtk.run.session import check_no_overlap, session_for
from celtk.runstore import check_fingerprint, locked
from celtk.stats import compare_paired, defined

Progress = Callable[[str, int, int], None]


def run_test(out: Path, *, heldout: int | None = None, model: Model | None = None, n_boot: int = 10_000,
             progress: Progress | None = None) -> TestDocument:
    """Score ``selection.json``'s heads and the intact model on the held-out set (``heldout``
    examples, default as configured); McNemar and a paired bootstrap CI; writes ``test.json``."""
    out = Path(out)
    with locked(out):
        sel = SelectionDocument.load(out)
        session = session_for(sel, model, **({"heldout": heldout} if heldout is not None else {}))
        if session.task.config() != sel.task:
            raise RunStoreError(f"selection.json was made for task {sel.task['task']!r}, not {session.task.full_name!r}.")
        check_fingerprint(out / "fingerprint.json", session.fingerprint(), source="selection.json")
        if (out / ScreenDocument.FILE).exists():
            check_selection_matches_screen(out, sel, ScreenDocument.load(out))
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
            intact_accuracy=defined(cmp.intact_accuracy, "intact accuracy"),
            ablated_accuracy=defined(cmp.ablated_accuracy, "ablated accuracy"), gain=defined(cmp.gain, "gain"),
            relative_error_reduction=cmp.relative_error_reduction, fixes=cmp.fixes, damage=cmp.damage,
            mcnemar_p=defined(cmp.mcnemar_p, "McNemar p"), gain_ci=list(defined(cmp.gain_ci, "gain CI")),
            ci_level=cmp.ci_level, n_boot=n_boot,
            heldout_hash=session.splits.manifest()["heldout_hash"],
            examples=[TestExample(id=a.id, intact_correct=a.correct, ablated_correct=b.correct,
                                  intact_logprob=_finite(a.logprob), ablated_logprob=_finite(b.logprob),
                                  intact_generation=a.extra.get("generation"), ablated_generation=b.extra.get("generation"))
                      for a, b in zip(intact.examples, ablated.examples)])
        document.save(out)
        return document


def _finite(logprob):
    """A generation-graded example has no target log-probability (NaN); the document records ``None``."""
    return None if isinstance(logprob, float) and math.isnan(logprob) else logprob
