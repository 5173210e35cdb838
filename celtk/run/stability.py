"""Selection stability on a screened run: rerun a strategy on resamples of the discovery set and
score every distinct selection on the held-out set (``stability.json``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from jaxtyping import Float

from celtk.boundary import public
from celtk.heads import HeadSet
from celtk.models import Model
from celtk.run.options import STABILITY
from celtk.run.select import search_settings
from celtk.run.session import memo_for, open_run
from celtk.run.transfer import heldout_pass
from celtk.search.registry import get_strategy
from celtk.search.stability import StabilityResult, stability
from celtk.stats import PairedComparison, compare_paired, defined
from celtk.store.directory import RunDirectory
from celtk.store.documents import SelectionDocument, StabilityDocument, StableSelection, TestDocument

Progress = Callable[[str, int, int], None]


@public
def run_stability(out: Path, *, resamples: int = STABILITY.resamples, method: str = STABILITY.method,
                  fraction: float = STABILITY.fraction, seed: int = STABILITY.seed,
                  strategy: str = STABILITY.strategy, p: int | None = None, k: int | None = None,
                  width: int = STABILITY.width, model: Model | None = None, n_boot: int = STABILITY.n_boot,
                  progress: Progress | None = None) -> StabilityDocument:
    """Selections of ``strategy`` on ``resamples`` resamples of the discovery set, how often each
    head and set is chosen, and each distinct selection's held-out gain: exploratory for every
    selection but the frozen one (``selection.json``), since many are compared on the same held-out set.

    The held-out scoring is a look, logged before it is made (on the held-out set fixed with the
    selection, when there is one): after it, ``select`` is refused unless forced, since the rows
    include what a selection with these ``p`` and ``k`` would choose (by default the run's, as ``select`` takes them).

    ``progress(stage, done, total)`` reports ``resamples`` (the whole discovery set's search, then each
    resample's), ``stability`` (head sets scored on the discovery set, as each start layer finishes) and
    ``held-out work`` (thousandths of the held-out pass).
    """
    out = Path(out)
    p, k, _ = search_settings(out, p, k)
    get_strategy(strategy).check(k=k, p=p, width=width)
    rd = RunDirectory(out)
    with rd.lock():
        rd.require("stability", whole="selection on resampled discovery sets")
        run = open_run(rd, model, stage="stability", **rd.heldout_overrides())
        memo = memo_for(run, progress, "stability")
        # ties ranked as the frozen selection's search ranked them (else as the run is set to)
        tie_break = (rd.load(SelectionDocument).config.get("tie_break", "numeric") if rd.has(SelectionDocument)
                     else run.session.config.tie_break)
        result = stability(run.scores, run.intact, memo, n_resamples=resamples, method=method, fraction=fraction,
                           seed=seed, strategy=strategy, p=p, k=k, width=width, tie_break=tie_break,
                           progress=(lambda done, total: progress("resamples", done, total)) if progress else None)
        session = run.session
        manifest = session.splits.manifest()
        distinct = sorted(set(result.selections) | {result.reference}, key=HeadSet.sort_key)
        seq = rd.begin_look("stability", list(distinct), manifest.heldout_hash,
                            len(session.splits.heldout), exploratory=True, p=p, k=k, strategy=strategy)
        held_intact, held = heldout_pass(session, distinct, progress, "held-out work")
        full = memo(distinct)
        # the frozen selection's row is its held-out figure again (the test is the result); the rest were chosen after
        frozen = rd.frozen_heads() if rd.has(TestDocument) else None  # untested: no row is the test's figure
        rows = [_row(heads, result, cmp=compare_paired(held_intact.correct, held[heads].correct, n_boot=n_boot,
                                                       seed=session.config.seed),
                     discovery_gain=float(full[heads].mean() - run.intact.mean()), frozen=frozen)
                for heads in distinct]
        rows.sort(key=lambda r: (-r.frequency, r.heads))
        gains = np.array([next(r.heldout_gain for r in rows if r.heads == s) for s in result.selections])
        document = StabilityDocument(
            strategy=strategy, p=p, k=k, resampling=method, n_resamples=resamples,
            fraction=fraction if method == "subsample" else None, seed=seed,
            reference_selection=result.reference, reference_frequency=result.reference_frequency,
            head_frequency=result.head_frequency, mean_pairwise_jaccard=result.mean_jaccard,
            n_distinct_selections=len(set(result.selections)),
            heldout_gain_over_resamples=_spread(gains),
            heldout_intact_accuracy=held_intact.accuracy, n_heldout=len(held_intact.examples), selections=rows,
            per_resample=list(result.selections), n_discovery_evaluations=result.n_evaluations)
        rd.finish_look(seq, (document, None))
        return document


def _row(heads: HeadSet, result: StabilityResult, *, cmp: PairedComparison, discovery_gain: float,
         frozen: HeadSet | None) -> StableSelection:
    """One distinct selection: how often the resamples chose it, and its held-out comparison (exploratory unless
    it is the tested selection)."""
    return StableSelection(
        heads=heads, frequency=result.subset_frequency.get(heads, 0.0), is_reference=heads == result.reference,
        discovery_gain=discovery_gain, heldout_gain=defined(cmp.gain, "gain"),
        heldout_gain_ci=list(defined(cmp.gain_ci, "gain CI")), heldout_mcnemar_p=defined(cmp.mcnemar_p, "McNemar p"),
        exploratory=heads != frozen)


def _spread(gains: Float[np.ndarray, " resamples"]) -> dict[str, float]:
    """The held-out gain of each resample's selection, summarised."""
    return {"mean": float(gains.mean()), "min": float(gains.min()), "q05": float(np.quantile(gains, 0.05)),
            "median": float(np.median(gains)), "q95": float(np.quantile(gains, 0.95)), "max": float(gains.max())}
