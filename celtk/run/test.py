"""The held-out test: the frozen selection against the intact model, in one matched run."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

from celtk.ablation_kinds import Ablation
from celtk.errors import RunStoreError
from celtk.evaluator import EvalResult
from celtk.heads import HeadSet
from celtk.models import Model
from celtk.run.documents import ScreenDocument, SelectionDocument, TestDocument, TestExample
from celtk.run.frozen import log_heldout
from celtk.run.integrity import check_selection_matches_screen
from celtk.run.session import Session, check_no_overlap, session_for
from celtk.runstore import bits, check_fingerprint, locked
from celtk.stats import compare_paired, defined

Progress = Callable[[str, int, int], None]


def run_test(out: Path, *, heldout: int | None = None, model: Model | None = None, n_boot: int = 10_000,
             progress: Progress | None = None) -> TestDocument:
    """Score ``selection.json``'s heads and the intact model on the held-out set (``heldout``
    examples, default as configured) in two streamed passes; McNemar and a paired bootstrap CI, and
    the shrinkage from the selection-biased discovery gain to the held-out gain; writes ``test.json``
    and appends to ``heldout_log.jsonl``. Refuses a changed discovery set, shots or intact baseline."""
    out = Path(out)
    with locked(out):
        sel = SelectionDocument.load(out)
        session = session_for(sel, model, **({"heldout": heldout} if heldout is not None else {}))
        if session.task.config() != sel.task:
            raise RunStoreError(f"selection.json was made for task {sel.task['task']!r}, not {session.task.full_name!r}.")
        check_fingerprint(out / "fingerprint.json", session.fingerprint(), source="selection.json")
        if (out / ScreenDocument.FILE).exists():
            check_selection_matches_screen(out, sel, ScreenDocument.load(out))
        check_frozen(out, sel, session)
        check_no_overlap(sel.discovery_hashes, sel.discovery_ids, session.splits.heldout)
        heads = HeadSet.parse(",".join(sel.heads))
        if progress:
            progress("test", 0, 2)
        intact, ablated = score_streaming(session, "heldout", heads)
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
                      for a, b in zip(intact.examples, ablated.examples)],
            discovery_gain=sel.discovery_gain, shrinkage=sel.discovery_gain - defined(cmp.gain, "gain"))
        document.save(out)
        log_heldout(out, "test", [sel.heads], document.heldout_hash, n=document.n)
        return document


def _finite(logprob):
    """A generation-graded example has no target log-probability (NaN); the document records ``None``."""
    return None if isinstance(logprob, float) and math.isnan(logprob) else logprob


def check_frozen(out: Path, sel: SelectionDocument, session: Session) -> None:
    """Refuse a test whose discovery set, shots or intact baseline differ from the selection's."""
    manifest = session.splits.manifest()
    if manifest["discovery_hash"] != sel.discovery_hash:
        raise RunStoreError(f"The discovery set drawn now (hash {manifest['discovery_hash']}) differs from the one "
                            f"selection.json was frozen on ({sel.discovery_hash}); the task data or split settings changed.")
    if manifest["shot_ids"] != sel.shots:
        raise RunStoreError(f"The few-shot examples drawn now ({', '.join(manifest['shot_ids']) or 'none'}) differ from "
                            f"those of selection.json ({', '.join(sel.shots) or 'none'}); test with the selection's settings.")
    if (out / ScreenDocument.FILE).exists():
        stored = ScreenDocument.load(out).intact_correct
        intact, _ = session.screener("discovery").run([])  # the path that produced the stored baseline
        if bits(intact.correct) != stored:
            raise RunStoreError(f"{out}: the intact model now scores the discovery set differently from screen.json, so "
                                "the baseline changed (model, data, device or numerics); test on the screen's setup.")


def score_streaming(session: Session, which: str, heads: HeadSet) -> tuple[EvalResult, EvalResult]:
    """Two plain passes over a split, intact then under ``heads`` (removed as the run's ablation kind
    says), one batch resident at a time: no layer cache, so the held-out set's size does not bound memory."""
    intact, ablated = score_kinds(session, which, heads, [session.ablation()])
    return intact, ablated[0]


def score_kinds(session: Session, which: str, heads: HeadSet, ablations: Sequence[Ablation]
                ) -> tuple[EvalResult, list[EvalResult]]:
    """One plain intact pass over a split, then one under ``heads`` per ablation kind in ``ablations``
    (streamed as :func:`score_streaming`)."""
    from celtk.evaluator import ablated, aggregate, make_batches, score_requests
    from celtk.screen import auto_batch

    if session.task.kind == "generate":  # graded by generation: the session's screener decodes
        runs = [session.screener_on(session.prepared(which), ablation).run([heads]) for ablation in ablations]
        return runs[0][0], [results[heads] for _, results in runs]
    prepared, model = session.prepared(which), session.model
    size = session.config.batch_size if isinstance(session.config.batch_size, int) else auto_batch(model, prepared)[0]
    batches = make_batches(prepared.requests, size, model.tokenizer.pad_token_id)
    intact = aggregate(prepared, *score_requests(model, prepared, batches))
    return intact, [aggregate(prepared, *score_requests(model, prepared, batches, around=ablated(model, prepared, heads, a)))
                    for a in ablations]
