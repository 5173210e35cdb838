"""The held-out test: the frozen selection against the intact model, in one matched run."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from celtk.ablation_kinds import Ablation
from celtk.boundary import public
from celtk.errors import RunStoreError
from celtk.evaluation.results import EvalResult
from celtk.evaluation.shared_prefix import score_pass
from celtk.heads import HeadSet
from celtk.models import Model
from celtk.run.options import TEST
from celtk.run.session import Session, neutral_overrides, session_for
from celtk.stats import compare_paired, defined
from celtk.store.directory import RunDirectory
from celtk.store.documents import (
    LookRecord,
    SelectionDocument,
    TestDocument,
    TestExample,
)
from celtk.store.files import sweep_if_idle
from celtk.store.ledger import Ledger

Progress = Callable[[str, int, int], None]


@public
def run_test(out: Path, *, heldout: int | None = None, model: Model | None = None, n_boot: int = TEST.n_boot,
             force: bool = False, progress: Progress | None = None, device: str | None = None,
             batch_size: int | str | None = None) -> TestDocument:
    """Score ``selection.json``'s heads and the intact model on the held-out set fixed with the selection
    (``heldout``, if given, must equal its size) in two streamed passes; McNemar and a paired
    bootstrap CI, and the shrinkage from the selection-biased discovery gain to the held-out gain.

    The look is logged in ``heldout_log.jsonl`` before anything is scored, and ``test.json`` is written
    after it. The first test is the run's result: a second one is refused unless ``force``, and then
    ``test.json`` keeps the first result, lists every look (``looks``) and this look's figures go to
    ``test-repeat-SEQ.json``. Earlier looks that already scored the selection on this held-out set (a
    ``stability`` or ``eval --run`` look) are listed in ``seen_before_test``: the test is then not a first
    look. Returns ``test.json``'s document. Refuses a changed discovery set,
    shots, intact baseline or held-out set, and a log or result edited by hand."""
    out = Path(out)
    stored = None if force else stored_test(out, heldout)
    if stored is not None:
        sweep_if_idle(out)
        return stored
    rd = RunDirectory(out)
    with rd.lock():
        admitted = rd.require("test", force=force)
        sel, first = admitted.frozen, admitted.test
        session = session_for(sel, model, **rd.heldout_overrides(heldout), **neutral_overrides(device, batch_size))
        rd.admit("test", session, sel)
        manifest = session.splits.manifest()
        heads = sel.heads
        seen = Ledger().tested_elsewhere(out, weights=session.model.weight_hash, task=session.task.full_name,
                                         heldout_hash=manifest.heldout_hash)
        if seen and not force:
            where = "; ".join(f"look {e.get('line_seq')} of {e.get('run')} at {e.get('when')}" for e in seen[:3])
            raise RunStoreError(f"The held-out set frozen in {out} (hash {manifest.heldout_hash}) was already tested "
                                f"under the same weights and task in another run directory ({where}): a copied run, "
                                "or another selection searched on the same split, gets no second first test of it. "
                                "That run's test.json is the result; to look again anyway, pass force=True "
                                "(`--force`), recorded as seen before.")
        seen_before = [f"{e.get('run')}#{e.get('line_seq')}" for e in seen]
        seq = rd.begin_look("test", [heads], manifest.heldout_hash, len(session.splits.heldout),
                            exploratory=first is not None or bool(seen), forced=first is not None or bool(seen),
                            **({"seen_before": seen_before} if seen else {}))
        if progress:
            progress("test", 0, 2)
        intact, ablated = score_streaming(session, "heldout", heads)
        if progress:
            progress("test", 2, 2)
        document = _document(sel, session, intact, ablated, n_boot, seq)
        if first is None:
            looks = _records(rd, seq, TestDocument.FILE)
            seen_earlier = [r.seq for r in looks if r.seen_before_test == seq]  # looks that already scored it
            document = replace(document, looks=looks, seen_before_test=seen_earlier or None)
            rd.finish_look(seq, (document, None))
            return document
        repeat_name = f"test-repeat-{seq}.json"
        looks = _records(rd, seq, repeat_name)
        kept = replace(first, looks=looks)  # the first test stays the result
        rd.finish_look(seq, (replace(document, looks=looks), repeat_name), (kept, None))
        return kept


@public
def stored_test(out: Path, heldout: int | None = None) -> TestDocument | None:
    """The run's first test when it tests the frozen selection as it stands: what a rerun of ``test`` returns
    (nothing is scored, and no look is logged). ``None`` when there is no test, or when the selection was
    searched again since (then a test is refused unless forced). Reads files only; loads no model
    (:meth:`RunDirectory.stored_test`)."""
    return RunDirectory(out).stored_test(heldout)


def _document(sel: SelectionDocument, session: Session, intact: EvalResult, ablated: EvalResult, n_boot: int,
              seq: int) -> TestDocument:
    cmp = compare_paired(intact.correct, ablated.correct, n_boot=n_boot, seed=session.config.seed)
    return TestDocument(
        heads=sel.heads, strategy=sel.strategy, model=sel.model.ref, task=sel.task.ref, n=cmp.n,
        intact_accuracy=defined(cmp.intact_accuracy, "intact accuracy"),
        ablated_accuracy=defined(cmp.ablated_accuracy, "ablated accuracy"), gain=defined(cmp.gain, "gain"),
        relative_error_reduction=cmp.relative_error_reduction, fixes=cmp.fixes, damage=cmp.damage,
        mcnemar_p=defined(cmp.mcnemar_p, "McNemar p"), gain_ci=list(defined(cmp.gain_ci, "gain CI")),
        ci_level=cmp.ci_level, n_boot=n_boot, heldout_hash=session.splits.manifest().heldout_hash,
        examples=[TestExample(id=a.id, intact_correct=a.correct, ablated_correct=b.correct,
                              intact_logprob=_finite(a.logprob), ablated_logprob=_finite(b.logprob),
                              intact_generation=a.extra.get("generation"), ablated_generation=b.extra.get("generation"))
                  for a, b in zip(intact.examples, ablated.examples, strict=True)],
        discovery_gain=sel.discovery_gain, shrinkage=sel.discovery_gain - defined(cmp.gain, "gain"), look=seq)


def _records(rd: RunDirectory, seq: int, result: str) -> list[LookRecord]:
    """Every look so far, the one being written (``seq``) shown complete with ``result``."""
    return [replace(r, complete=True, result=result) if r.seq == seq else r for r in rd.look_records()]


def _finite(logprob: float | list[float] | None) -> float | list[float] | None:
    """A generation-graded example has no target log-probability (NaN); the document records ``None``."""
    return None if isinstance(logprob, float) and math.isnan(logprob) else logprob


def score_streaming(session: Session, which: str, heads: HeadSet) -> tuple[EvalResult, EvalResult]:
    """Two streamed passes over a split, intact then under ``heads`` (removed as the run's ablation kind
    says), one batch resident at a time: no layer cache, so the held-out set's size does not bound memory."""
    intact, ablated = score_kinds(session, which, heads, [session.ablation()])
    return intact, ablated[0]


def score_kinds(session: Session, which: str, heads: HeadSet, ablations: Sequence[Ablation],
                on_pass: Callable[[int, int], None] | None = None) -> tuple[EvalResult, list[EvalResult]]:
    """One intact pass over a split, then one under ``heads`` per ablation kind in ``ablations`` (streamed as
    :func:`score_streaming`; each pass runs the shared few-shot prefix once:
    :func:`celtk.evaluation.shared_prefix.score_pass`). ``on_pass(done, passes)`` after each pass."""
    done, passes = 0, 1 + len(ablations)

    def finished(result: EvalResult) -> EvalResult:
        nonlocal done
        done += 1
        if on_pass:
            on_pass(done, passes)
        return result

    if session.task.kind == "generate":  # graded by generation: the session's screener decodes
        runs = [session.screener_on(session.prepared(which), ablation).run([heads]) for ablation in ablations]
        if on_pass:
            on_pass(passes, passes)
        return runs[0][0], [results[heads] for _, results in runs]
    prepared, model = session.prepared(which), session.model
    size = session.batch_sizes(prepared)[0]
    intact = finished(score_pass(model, prepared, size))
    return intact, [finished(score_pass(model, prepared, size, heads, a)) for a in ablations]
