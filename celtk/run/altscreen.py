"""Alternative screeners on a screened run: rank heads more cheaply and compare the top-p pool
with the exhaustive screen's (``altscreen-METHOD.json``).

A screener is a function ``(run: ScreenedRun, *, progress, **options) -> ScreenerResult``,
registered in :data:`celtk.registry.SCREENERS`; it ignores options it does not use.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from celtk.errors import ConfigError
from celtk.models import Model
from celtk.registry import SCREENERS
from celtk.run.documents import AltscreenDocument
from celtk.run.integrity import check_racing_use
from celtk.run.memo import memo_for
from celtk.run.session import ScreenedRun, open_run
from celtk.runstore import locked
from celtk.selection import check_pool_options

Progress = Callable[[str, int, int], None]


def gradient_screener(run: ScreenedRun, *, progress: Progress | None = None, **_: object):
    """Signed per-head gate gradients (:func:`celtk.screeners.gradient_scores`), one backward pass."""
    from celtk.screeners import gradient_scores

    if run.session.config.ablation != "zero":
        raise ConfigError(f"The gradient screener predicts zeroing (a head's gate moved from 1 to 0), and this run "
                          f"screened under {run.session.config.ablation} ablation, so the two would rank different "
                          "interventions. Compare it on a zero run, or use --method lasso (scored under the run's kind).")
    size = run.session.config.batch_size if isinstance(run.session.config.batch_size, int) else 8
    return gradient_scores(run.session.model, run.session.prepared("discovery"), batch_size=size)


def lasso_screener(run: ScreenedRun, *, masks: int = 200, rate: float = 0.05, seed: int = 0,
                   progress: Progress | None = None, **_: object):
    """LASSO over random multi-head knockouts (:func:`celtk.screeners.lasso_scores`), scored through
    the run's set memo so an interrupted screener resumes."""
    from celtk.screeners import lasso_scores

    heads = [next(iter(s.heads.heads)) for s in run.scores]
    return lasso_scores(memo_for(run, progress, "lasso"), heads, n_masks=masks, rate=rate, seed=seed)


def run_altscreen(out: Path, *, method: str = "gradient", p: int = 10, masks: int = 200, rate: float = 0.05,
                  seed: int = 0, model: Model | None = None, progress: Progress | None = None) -> AltscreenDocument:
    """Rank heads with the registered screener ``method`` and compare its top-p pool with the
    exhaustive screen's; writes ``altscreen-{method}.json`` (and its timing beside it)."""
    from celtk.screeners import compare_rankings

    out = Path(out)
    screener = SCREENERS.get(method)
    if masks < 1 or not 0 < rate <= 1:  # no masks would report perfect agreement from no data
        raise ConfigError(f"altscreen needs masks ≥ 1 and 0 < rate ≤ 1, got masks = {masks}, rate = {rate}.")
    with locked(out):
        run = open_run(out, model)
        check_racing_use(run.screen, whole=f"comparing the {method} screener's ranking with the screen's")
        check_pool_options(k=1, p=p, n_heads=len(run.scores))
        result = screener(run, progress=progress, masks=masks, rate=rate, seed=seed)
        comparison = compare_rankings(run.scores, result, p)
        comparison.pop("seconds")  # timing goes to its own file so the document is deterministic
        document = AltscreenDocument(method=method, comparison=comparison, details=result.details,
                                     scores={str(h): result.scores[h] for h in result.ranked()},
                                     exhaustive_evaluations=len(run.scores), seconds=result.seconds)
        document.save(out)
        return document
