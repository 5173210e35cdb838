"""Rankers on a screened run: order heads more cheaply and compare the top-p pool with the exhaustive
screen's (``altscreen-METHOD.json``).

A ranker is registered in :data:`celtk.screening.registry.RANKERS` and called with a
:class:`celtk.screening.rankers.RankerInput` built from the run (:func:`ranker_input`); this stage knows no
ranker by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
from jaxtyping import Bool

from celtk.boundary import public
from celtk.errors import ConfigError
from celtk.heads import HeadSet
from celtk.models import Model
from celtk.run.options import ALTSCREEN
from celtk.run.session import ScreenedRun, memo_for, open_run
from celtk.screening.rankers import LASSO_FOLDS, RankerInput, compare_rankings
from celtk.screening.registry import RANKERS
from celtk.search.selection import check_pool_options
from celtk.store.directory import RunDirectory
from celtk.store.documents import AltscreenDocument
from celtk.store.memo import SetMemo

Progress = Callable[[str, int, int], None]


def ranker_input(run: ScreenedRun, method: str, progress: Progress | None = None) -> RankerInput:
    """What a ranker reads from ``run``: its model, the screened heads, its ablation kind and batch size, the
    discovery set (tokenised on first use) and correctness under head sets through the run's set memo (stage
    ``method``, opened on first use)."""
    config = run.session.config
    memo: list[SetMemo] = []

    def evaluate(sets: list[HeadSet]) -> Mapping[HeadSet, Bool[np.ndarray, " example"]]:
        if not memo:
            memo.append(memo_for(run, progress, method))
        return memo[0](sets)

    # under "auto", 8: auto_batch sizes forward passes, and the gradient rankers also hold a backward pass
    return RankerInput(model=run.session.model, heads=tuple(next(iter(s.heads.heads)) for s in run.scores),
                       ablation=str(config.ablation),
                       batch_size=config.batch_size if isinstance(config.batch_size, int) else 8,
                       discovery=lambda: run.session.prepared("discovery"), evaluate=evaluate)


@public
def run_altscreen(out: Path, *, method: str = ALTSCREEN.method, p: int = ALTSCREEN.p,
                  masks: int = ALTSCREEN.masks, rate: float = ALTSCREEN.rate, seed: int = ALTSCREEN.seed,
                  model: Model | None = None, progress: Progress | None = None) -> AltscreenDocument:
    """Rank heads with the registered ranker ``method`` (:data:`celtk.screening.registry.RANKERS`) and compare its
    top-p pool with the exhaustive screen's; writes ``altscreen-{method}.json`` (and its timing beside it)."""
    out = Path(out)
    ranker = RANKERS.get(method)
    if masks < 1 or not 0 < rate <= 1:  # no masks would report perfect agreement from no data
        raise ConfigError(f"altscreen needs masks ≥ 1 and 0 < rate ≤ 1, got masks = {masks}, rate = {rate}.")
    if method == "lasso" and masks < LASSO_FOLDS:  # before the model loads: a fit on fewer ranks nothing
        raise ConfigError(f"LASSO chooses its penalty by {LASSO_FOLDS}-fold cross-validation, so it needs at least "
                          f"{LASSO_FOLDS} masks, got masks = {masks}. Use --masks ≥ {LASSO_FOLDS} (default 200).")
    rd = RunDirectory(out)
    with rd.lock():
        rd.require("altscreen", whole=f"comparing the {method} screener's ranking with the screen's")
        run = open_run(rd, model, stage="altscreen")
        check_pool_options(k=1, p=p, n_heads=len(run.scores))
        result = ranker(ranker_input(run, method, progress), masks=masks, rate=rate, seed=seed)
        comparison = compare_rankings(run.scores, result, p)
        comparison.pop("seconds")  # timing goes to its own file so the document is deterministic
        document = AltscreenDocument(method=method, comparison=comparison, details=result.details,
                                     scores={str(h): result.scores[h] for h in result.ranked()},
                                     exhaustive_evaluations=len(run.scores), seconds=result.seconds)
        rd.save(document)
        return document
