"""Stage 2 of Algorithm 1: the ranking key, the candidate pool, subset enumeration, and
interaction diagnostics."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import combinations
from math import comb
from typing import NotRequired, TypedDict

import numpy as np
from jaxtyping import Bool, Shaped

from celtk.errors import ConfigError
from celtk.heads import Head, HeadSet
from celtk.search.scores import HeadScore, rank
from celtk.stats import discordance_noise


class InteractionRow(TypedDict):
    """One subset's gain against the sum of its heads' gains, in examples (``kind`` on flagged subsets only)."""

    heads: HeadSet
    gain_count: int
    additive_gain_count: int
    gap: int
    noise: float
    kind: NotRequired[str]


class InteractionDiagnostics(TypedDict, total=False):
    """Algorithm 1's interaction diagnostics (:func:`interaction_diagnostics`); empty after greedy or beam."""

    pool: list[Head]
    subsets: list[InteractionRow]
    pairwise_interaction: list[list[int | None]]
    overlap: dict[str, list[list[int]]]
    flagged: list[InteractionRow]
    noise_rule: str


MAX_SUBSETS = 1_000_000  # Algorithm 1 subsets one search may evaluate


NOISE_RULE = ("descriptive, not a test: |gap| > 1.96 * sqrt(fixes + damage) of the subset, in examples; the gap's "
              "null spread also holds the singles' noise, and no correction is made for the number of subsets")


def check_scores(single: list[HeadScore], intact: Shaped[np.ndarray, " ..."]) -> None:
    """The screen a search starts from: one head per score, and every score and the intact outcomes
    bool vectors over the same examples."""
    if intact.dtype != bool or intact.ndim != 1:
        raise ConfigError(f"intact must be a 1-D bool array (one outcome per example), got dtype {intact.dtype} "
                          f"and shape {intact.shape}.")
    for s in single:
        if len(s.heads) != 1 or s.correct.shape != intact.shape or s.correct.dtype != bool:
            raise ConfigError(f"Each screened score must be of one head, with bool outcomes on the {len(intact)} "
                              f"intact examples; got {s.heads or 'no head'} with {s.correct.dtype} outcomes of shape "
                              f"{s.correct.shape}.")


def check_pool_options(*, k: int, p: int, n_heads: int | None = None, **_: object) -> None:
    """The one check of Algorithm 1's options: 1 ≤ k ≤ p ≤ the number of screened heads."""
    for name, value in (("k", k), ("p", p)):
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, got {value}.")
    if n_heads is not None and p > n_heads:
        raise ConfigError(f"p = {p} exceeds the {n_heads} screened heads; use p ≤ {n_heads}.")
    if k > p:
        raise ConfigError(f"k = {k} exceeds p = {p}; Algorithm 1 draws subsets from the pool of the top p heads, "
                          "so use k ≤ p (greedy and beam search all heads and take no p).")
    if n_subsets(p, k, stop_above=MAX_SUBSETS) > MAX_SUBSETS:  # checked before any subset is materialised
        raise ConfigError(f"p = {p}, k = {k} means more than {MAX_SUBSETS:,} subsets to evaluate, the limit; "
                          "lower p or k (the paper uses p = 10, k = 3: 165 subsets).")


def candidate_pool(single: Iterable[HeadScore], p: int, tie_break: str = "numeric") -> list[HeadScore]:
    """The top ``p`` single-head interventions by the ranking key (ties in every measure by ``tie_break``:
    :data:`celtk.search.registry.TIE_BREAKS`)."""
    single = list(single)
    check_pool_options(k=1, p=p, n_heads=len(single))
    return rank(single, tie_break)[:p]


def subsets(pool: list[Head], k: int) -> list[HeadSet]:
    """Every subset of ``pool`` of size 2..k (size 1 is reused from the screen)."""
    return [HeadSet(c) for size in range(2, k + 1) for c in combinations(pool, size)]


def n_subsets(p: int, k: int, stop_above: int | None = None) -> int:
    """The subsets of size 2..k of a pool of p heads; with ``stop_above``, counting stops once the count passes it
    (a count above it, not the whole: p and k typed by hand can be so large that the exact sum never finishes)."""
    total = 0
    for size in range(2, k + 1):
        total += comb(p, size)
        if stop_above is not None and total > stop_above:
            break
    return total


@dataclass(frozen=True)
class Selection:
    best: HeadScore
    ranked: list[HeadScore]
    pool: list[HeadScore]
    p: int
    k: int
    diagnostics: InteractionDiagnostics = field(default_factory=InteractionDiagnostics)


def select(single: Iterable[HeadScore], intact: Bool[np.ndarray, " example"],
           evaluate_set: Callable[[HeadSet], Bool[np.ndarray, " example"]],
           p: int = 10, k: int = 3, progress: Callable[[int, int], None] | None = None,
           tie_break: str = "numeric") -> Selection:
    """Algorithm 1, stage 2: pool the top-``p`` heads, evaluate every subset of size 2..``k``
    with ``evaluate_set`` (returns per-example correctness), choose by the ranking key (the pool and the
    subsets alike ordered by ``tie_break`` where they tie in every measure)."""
    single = list(single)
    check_scores(single, intact)
    check_pool_options(k=k, p=p, n_heads=len(single))
    pool = candidate_pool(single, p, tie_break)
    scores = list(pool)
    todo = subsets([next(iter(s.heads)) for s in pool], k)
    for i, heads in enumerate(todo, start=1):
        scores.append(HeadScore.compare(heads, evaluate_set(heads), intact))
        if progress:
            progress(i, len(todo))
    ranked = rank(scores, tie_break)
    return Selection(ranked[0], ranked, pool, p, k, interaction_diagnostics(pool, scores, intact))


def interaction_diagnostics(pool: list[HeadScore], scores: list[HeadScore], intact: Bool[np.ndarray, " example"]
                            ) -> InteractionDiagnostics:
    """Additivity gaps, the pairwise interaction matrix, and fix/damage overlaps between pool heads,
    all in numbers of examples (keys ``gain_count``, ``additive_gain_count``, ``gap``, ``noise``).

    ``flagged`` is descriptive, not a test: ``noise`` is the spread of the subset's own paired
    count, but the gap also carries each single's noise and their covariances on shared examples,
    and it is checked on every subset without correction. A flag says "look here", not "p < 0.05"."""
    single = {next(iter(s.heads)): s for s in pool}
    heads = list(single)
    rows: list[InteractionRow] = []
    flagged: list[InteractionRow] = []
    for s in scores:
        additive = sum(single[h].gain for h in s.heads)
        gap = s.gain - additive
        noise = discordance_noise(s.fixes, s.damage)
        row: InteractionRow = {"heads": s.heads, "gain_count": s.gain, "additive_gain_count": additive, "gap": gap,
               "noise": round(noise, 3)}
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
    return {"pool": heads, "subsets": rows, "pairwise_interaction": matrix, "overlap": overlap,
            "flagged": flagged,
            "noise_rule": NOISE_RULE}
