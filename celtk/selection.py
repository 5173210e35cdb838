"""Stage 2 of Algorithm 1: the ranking key, the candidate pool, subset enumeration, and
interaction diagnostics."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import combinations
from math import comb

import numpy as np

from celtk.errors import ConfigError
from celtk.heads import Head, HeadSet
from celtk.screen import HeadScore
from celtk.stats import discordance_noise


def ranking_key(score: HeadScore) -> tuple:
    """Sort key (ascending = better): higher gain, lower damage, higher accuracy, fewer heads,
    then lexicographic head ids."""
    return (-score.gain, score.damage, -score.n_correct, len(score.heads), score.heads.sort_key())


def rank(scores: Iterable[HeadScore]) -> list[HeadScore]:
    return sorted(scores, key=ranking_key)


def candidate_pool(single: Iterable[HeadScore], p: int) -> list[HeadScore]:
    """The top ``p`` single-head interventions by the ranking key."""
    single = list(single)
    if p < 1:
        raise ConfigError(f"p must be at least 1, got {p}.")
    if p > len(single):
        raise ConfigError(f"p = {p} exceeds the {len(single)} screened heads; use p ≤ {len(single)}.")
    return rank(single)[:p]


def subsets(pool: list[Head], k: int) -> list[HeadSet]:
    """Every subset of ``pool`` of size 2..k (size 1 is reused from the screen)."""
    return [HeadSet(c) for size in range(2, k + 1) for c in combinations(pool, size)]


def n_subsets(p: int, k: int) -> int:
    return sum(comb(p, s) for s in range(2, k + 1))


@dataclass(frozen=True)
class Selection:
    best: HeadScore
    ranked: list[HeadScore]
    pool: list[HeadScore]
    p: int
    k: int
    diagnostics: dict = field(default_factory=dict)


def select(single: Iterable[HeadScore], intact: np.ndarray, evaluate_set: Callable[[HeadSet], np.ndarray],
           p: int = 10, k: int = 3, progress: Callable[[int, int], None] | None = None) -> Selection:
    """Algorithm 1, stage 2: pool the top-``p`` heads, evaluate every subset of size 2..``k``
    with ``evaluate_set`` (returns per-example correctness), choose by the ranking key."""
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}.")
    pool = candidate_pool(single, p)
    if k > p:
        raise ConfigError(f"k = {k} exceeds the pool size p = {p}; subsets are drawn from the pool, so use k ≤ p.")
    scores = list(pool)
    todo = subsets([next(iter(s.heads)) for s in pool], k)
    for i, heads in enumerate(todo, start=1):
        scores.append(HeadScore.compare(heads, evaluate_set(heads), intact))
        if progress:
            progress(i, len(todo))
    ranked = rank(scores)
    return Selection(ranked[0], ranked, pool, p, k, interaction_diagnostics(pool, scores, intact))


def interaction_diagnostics(pool: list[HeadScore], scores: list[HeadScore], intact: np.ndarray) -> dict:
    """Additivity gaps, the pairwise interaction matrix, and fix/damage overlaps between pool heads."""
    single = {next(iter(s.heads)): s for s in pool}
    heads = list(single)
    rows, flagged = [], []
    for s in scores:
        additive = sum(single[h].gain for h in s.heads)
        gap = s.gain - additive
        noise = discordance_noise(s.fixes, s.damage)
        row = {"heads": s.heads.names(), "gain": s.gain, "additive_gain": additive, "gap": gap, "noise": round(noise, 3)}
        rows.append(row)
        if len(s.heads) > 1 and abs(gap) > noise:
            flagged.append({**row, "kind": "super-additive" if gap > 0 else "sub-additive"})
    by_set = {s.heads: s for s in scores}
    matrix = [[None if a == b else by_set[HeadSet((a, b))].gain - single[a].gain - single[b].gain
               if HeadSet((a, b)) in by_set else None for b in heads] for a in heads]
    fixes = {h: ~intact & single[h].correct for h in heads}
    damage = {h: intact & ~single[h].correct for h in heads}
    overlap = {"fixes": [[int((fixes[a] & fixes[b]).sum()) for b in heads] for a in heads],
               "damage": [[int((damage[a] & damage[b]).sum()) for b in heads] for a in heads]}
    return {"pool": [str(h) for h in heads], "subsets": rows, "pairwise_interaction": matrix, "overlap": overlap,
            "flagged": flagged,
            "noise_rule": "|gap| > 1.96 * sqrt(fixes + damage) of the subset, in examples"}
