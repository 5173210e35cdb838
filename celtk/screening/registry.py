"""The screening wing's two registries.

* :data:`SCREENERS`: engines that score head sets exactly on examples (the cached teacher-forced screener, which
  replays fused layers where it can, and the generation screener); a run picks one by how its task is graded.
* :data:`RANKERS`: cheap proxies that order heads without scoring each one (:mod:`celtk.screening.rankers`), run by
  ``celtk altscreen --method NAME``. A new ranker is one module (a function ``(inputs: RankerInput, *, masks,
  rate, seed, **options) -> RankerResult``) plus one line here.
"""

from __future__ import annotations

from celtk.registry import Registry

SCREENERS = Registry("screener", {
    "cached": "celtk.screening.cached:CachedScreener",
    "generation": "celtk.screening.generation:GenerationScreener",
})

RANKERS = Registry("ranker", {
    "gradient": "celtk.screening.rankers:gradient_ranker",
    "lasso": "celtk.screening.rankers:lasso_ranker",
})
