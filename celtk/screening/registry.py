"""The screening wing's two registries.

* :data:`SCREENERS`: engines that score head sets exactly on examples (the cached teacher-forced screener, which
  replays fused layers where it can, and the generation screener); a run picks one by how its task is graded.
* :data:`RANKERS`: cheap proxies that order heads without scoring each one (:mod:`celtk.screening.rankers`), run by
  ``celtk altscreen --method NAME``. A new ranker is one module (a function ``(inputs: RankerInput, *, masks,
  rate, seed, **options) -> RankerResult``) plus one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from celtk.registry import Registry

if TYPE_CHECKING:  # the types only: an engine's module (and torch) loads on first use
    from celtk.screening.cached import CachedScreener
    from celtk.screening.generation import GenerationScreener
    from celtk.screening.rankers import Ranker

SCREENERS: Registry[Callable[..., CachedScreener | GenerationScreener]] = Registry("screener", {
    "cached": "celtk.screening.cached:CachedScreener",
    "generation": "celtk.screening.generation:GenerationScreener",
})

RANKERS: Registry[Ranker] = Registry("ranker", {
    "gradient": "celtk.screening.rankers:gradient_ranker",
    "lasso": "celtk.screening.rankers:lasso_ranker",
})
