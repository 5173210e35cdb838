"""Search strategies for stage 2: Algorithm 1 (the paper's, the default and the reference),
greedy forward selection and beam search over all heads.

Every strategy sees the same inputs: the single-head screen, the intact per-example
correctness, and ``evaluate``, which scores a list of head sets on the discovery set at once
(the cached screener; the pipeline adds a persistent memo so interrupted searches resume).
Every strategy ranks candidates with the paper's ranking key and reports how many
interventions it evaluated, counting the screen's single heads.

A new strategy is one function here plus one line in :data:`STRATEGIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from celtk.errors import ConfigError, suggest
from celtk.heads import Head, HeadSet
from celtk.screen import HeadScore
from celtk.selection import n_subsets, rank, ranking_key, select

Evaluate = Callable[[list[HeadSet]], dict[HeadSet, np.ndarray]]


@dataclass(frozen=True)
class SearchResult:
    """What a strategy chose, every intervention it scored, and its cost.

    ``n_evaluations`` counts interventions scored on the discovery set, the single-head
    screen included; ``rounds`` lists, per round, the sets kept (greedy/beam)."""

    strategy: str
    best: HeadScore
    scored: list[HeadScore]
    n_evaluations: int
    k: int
    options: dict = field(default_factory=dict)
    rounds: list[list[str]] = field(default_factory=list)
    diagnostics: dict = field(default_factory=dict)


def algorithm1(single: Sequence[HeadScore], intact: np.ndarray, evaluate: Evaluate, *, k: int = 3, p: int = 10,
               **_: object) -> SearchResult:
    """The paper's Algorithm 1: pool the top ``p`` single heads, score every subset of size ≤ ``k``."""
    from celtk.selection import candidate_pool, subsets

    pool = candidate_pool(single, p)
    if k > p:
        raise ConfigError(f"k = {k} exceeds p = {p}; subsets are drawn from the pool of p heads, so use k ≤ p.")
    todo = subsets([next(iter(s.heads)) for s in pool], k)
    results = evaluate(todo) if todo else {}
    selection = select(single, intact, lambda hs: results[hs], p=p, k=k)
    return SearchResult("algorithm1", selection.best, selection.ranked, len(single) + n_subsets(p, k), k,
                        {"p": p}, [[str(s.heads) for s in selection.pool]], selection.diagnostics)


def beam(single: Sequence[HeadScore], intact: np.ndarray, evaluate: Evaluate, *, k: int = 3, width: int = 3,
         **_: object) -> SearchResult:
    """Beam search over all heads: keep the ``width`` best sets of each size; extend each by every
    head not in it; stop at size ``k`` or when no extension beats the best set found so far.
    ``width = 1`` is greedy forward selection. The result is the best set scored, by the ranking key."""
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}.")
    if width < 1:
        raise ConfigError(f"Beam width must be at least 1, got {width}.")
    heads: list[Head] = sorted(next(iter(s.heads)) for s in single if len(s.heads) == 1)
    scored: dict[HeadSet, HeadScore] = {s.heads: s for s in single}
    frontier = rank(single)[:width]
    best = frontier[0]
    rounds = [[str(s.heads) for s in frontier]]
    n_evaluations = len(single)
    for _size in range(2, k + 1):
        candidates = sorted({HeadSet(s.heads.heads + (h,)) for s in frontier for h in heads if h not in s.heads.heads},
                            key=HeadSet.sort_key)
        todo = [c for c in candidates if c not in scored]
        if not candidates:
            break
        results = evaluate(todo) if todo else {}
        n_evaluations += len(todo)
        for c in todo:
            scored[c] = HeadScore.compare(c, results[c], intact)
        ranked = rank(scored[c] for c in candidates)
        if ranking_key(ranked[0]) >= ranking_key(best):  # no extension beats the best so far
            break
        frontier = ranked[:width]
        best = frontier[0]
        rounds.append([str(s.heads) for s in frontier])
    name = "greedy" if width == 1 else "beam"
    return SearchResult(name, best, rank(scored.values()), n_evaluations, k, {"width": width}, rounds)


def greedy(single: Sequence[HeadScore], intact: np.ndarray, evaluate: Evaluate, *, k: int = 3, **_: object) -> SearchResult:
    """Greedy forward selection over all heads: start from the best single head, add the head
    that most improves the current set (re-scored from the current ablated model), up to ``k``;
    stop early when no head improves it."""
    return beam(single, intact, evaluate, k=k, width=1)


STRATEGIES: dict[str, Callable[..., SearchResult]] = {"algorithm1": algorithm1, "greedy": greedy, "beam": beam}


def get_strategy(name: str) -> Callable[..., SearchResult]:
    if name not in STRATEGIES:
        raise ConfigError(f"Unknown search strategy {name!r}.{suggest(name, STRATEGIES)}")
    return STRATEGIES[name]
