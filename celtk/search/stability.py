"""Selection stability: rerun a search strategy on resamples of the discovery set and report
how often each head and each subset is chosen and how similar the selections are.

Every resample reuses per-example outcomes: single heads come from the screen, and a subset
scored once on the whole discovery set is re-scored on any resample by indexing, so B
resamples cost only the subsets no earlier resample needed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
from jaxtyping import Bool, Int

from celtk.errors import ConfigError
from celtk.heads import Head, HeadSet
from celtk.search.registry import STRATEGIES
from celtk.search.scores import HeadScore
from celtk.search.strategies import SearchResult


@dataclass(frozen=True)
class StabilityResult:
    selections: list[HeadSet]  # one per resample
    reference: HeadSet  # the selection on the whole discovery set
    head_frequency: dict[Head, float]  # most often chosen first
    subset_frequency: dict[HeadSet, float]
    mean_jaccard: float
    reference_frequency: float
    n_resamples: int
    method: str
    n_evaluations: int  # distinct interventions scored on the discovery set, the screen's included


def resample_indices(n: int, n_resamples: int, method: str, fraction: float, seed: int
                     ) -> list[Int[np.ndarray, " draw"]]:
    rng = np.random.default_rng(seed)
    if method == "bootstrap":
        return [rng.integers(0, n, size=n) for _ in range(n_resamples)]
    if method == "subsample":
        if not 0 < fraction < 1:
            raise ConfigError(f"Subsample fraction must be between 0 and 1, got {fraction}.")
        size = max(1, int(round(fraction * n)))
        return [np.sort(rng.choice(n, size=size, replace=False)) for _ in range(n_resamples)]
    raise ConfigError(f"Unknown resampling method {method!r}; use 'bootstrap' or 'subsample'.")


def jaccard(a: HeadSet, b: HeadSet) -> float:
    union = set(a.heads) | set(b.heads)
    return len(set(a.heads) & set(b.heads)) / len(union) if union else 1.0


def stability(single: Sequence[HeadScore], intact: Bool[np.ndarray, " example"],
              evaluate: Callable[[list[HeadSet]], dict[HeadSet, Bool[np.ndarray, " example"]]],
              *, n_resamples: int = 20, method: str = "bootstrap", fraction: float = 0.5, seed: int = 0,
              strategy: str = "algorithm1", progress: Callable[[int, int], None] | None = None,
              **options: Any) -> StabilityResult:
    """Run ``strategy`` on ``n_resamples`` resamples of the discovery examples (and once on all);
    ``progress(done, n_resamples + 1)`` before the first search and after each."""
    if n_resamples < 2:
        raise ConfigError(f"Stability needs at least 2 resamples, got {n_resamples}.")
    search = STRATEGIES.get(strategy)
    scored: set[HeadSet] = {s.heads for s in single}

    def run(idx: Int[np.ndarray, " draw"] | None) -> SearchResult:
        def take(a: Bool[np.ndarray, " example"]) -> Bool[np.ndarray, " draw"]:
            return a if idx is None else a[idx]

        rescored = [HeadScore.compare(s.heads, take(s.correct), take(intact)) for s in single]

        def evaluate_resampled(sets: list[HeadSet]) -> dict[HeadSet, Bool[np.ndarray, " draw"]]:
            scored.update(sets)
            return {s: take(v) for s, v in evaluate(sets).items()}

        return search(rescored, take(intact), evaluate_resampled, **options)

    draws = [None, *resample_indices(len(intact), n_resamples, method, fraction, seed)]  # None: the whole set
    found: list[HeadSet] = []
    for idx in draws:
        if progress:
            progress(len(found), len(draws))
        found.append(run(idx).best.heads)
    if progress:
        progress(len(found), len(draws))
    reference, selections = found[0], found[1:]
    heads = Counter(h for s in selections for h in s.heads)
    subsets = Counter(selections)
    pairs = [jaccard(a, b) for a, b in combinations(selections, 2)]
    return StabilityResult(
        selections=selections, reference=reference,
        head_frequency={h: c / n_resamples for h, c in heads.most_common()},
        subset_frequency={s: c / n_resamples for s, c in subsets.most_common()},
        mean_jaccard=float(np.mean(pairs)), reference_frequency=subsets[reference] / n_resamples,
        n_resamples=n_resamples, method=method, n_evaluations=len(scored),
    )
