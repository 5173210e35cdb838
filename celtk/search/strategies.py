"""Search strategies for stage 2: Algorithm 1 (the paper's, the default and the reference),
greedy forward selection and beam search over all heads. Pure numpy: no torch.

Every strategy sees the same inputs: the single-head screen, the intact per-example
correctness, and ``evaluate``, which scores a list of head sets on the discovery set at once
(the cached screener; :mod:`celtk.run` adds a persistent memo so interrupted searches resume).
Every strategy ranks candidates with the paper's ranking key (ties in every measure broken by
``tie_break``, :data:`celtk.search.registry.TIE_BREAKS`, recorded in the result's options when it is
not the default) and reports how many interventions it evaluated, counting the screen's single heads.

Each :class:`Strategy` checks its own options in one place (:meth:`Strategy.check`) before
any work. A new strategy is one :class:`Strategy` (here or in its own module) plus one line in
:data:`celtk.search.registry.STRATEGIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from jaxtyping import Bool

from celtk.errors import ConfigError
from celtk.heads import Head, HeadSet
from celtk.search.scores import HeadScore, check_tie_break, rank, ranking_key
from celtk.search.selection import (
    InteractionDiagnostics,
    candidate_pool,
    check_pool_options,
    n_subsets,
    select,
    subsets,
)

Evaluate = Callable[[list[HeadSet]], dict[HeadSet, Bool[np.ndarray, " example"]]]


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
    options: dict[str, Any] = field(default_factory=dict)  # as selection.json records them (p, width, tie_break)
    rounds: list[list[HeadSet]] = field(default_factory=list)
    diagnostics: InteractionDiagnostics = field(default_factory=InteractionDiagnostics)  # Algorithm 1's only


def algorithm1(single: Sequence[HeadScore], intact: Bool[np.ndarray, " example"], evaluate: Evaluate, *, k: int = 3,
               p: int = 10, tie_break: str = "numeric", **_: object) -> SearchResult:
    """The paper's Algorithm 1: pool the top ``p`` single heads, score every subset of size ≤ ``k``."""
    pool = candidate_pool(single, p, tie_break)
    check_pool_options(k=k, p=p, n_heads=len(single))
    todo = subsets([next(iter(s.heads)) for s in pool], k)
    results = evaluate(todo) if todo else {}
    selection = select(single, intact, lambda hs: results[hs], p=p, k=k, tie_break=tie_break)
    return SearchResult("algorithm1", selection.best, selection.ranked, len(single) + n_subsets(p, k), k,
                        {"p": p, **tie_break_option(tie_break)}, [[s.heads for s in selection.pool]],
                        selection.diagnostics)


def tie_break_option(tie_break: str) -> dict[str, str]:
    """How a search's options record its tie-break: not at all for the default ``numeric`` (so the options of every
    search made before the setting stay as they were), ``{"tie_break": "paper"}`` otherwise."""
    return {} if check_tie_break(tie_break) == "numeric" else {"tie_break": tie_break}


def check_search_options(*, k: int, width: int = 1, n_heads: int | None = None, **_: object) -> None:
    """The one check of greedy's and beam's options: 1 ≤ k ≤ the screened heads, width ≥ 1 (no pool, no p)."""
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}.")
    if width < 1:
        raise ConfigError(f"Beam width must be at least 1, got {width}.")
    if n_heads is not None and k > n_heads:
        raise ConfigError(f"k = {k} exceeds the {n_heads} screened heads; use k ≤ {n_heads}.")


def beam(single: Sequence[HeadScore], intact: Bool[np.ndarray, " example"], evaluate: Evaluate, *, k: int = 3,
         width: int = 3, tie_break: str = "numeric", **_: object) -> SearchResult:
    """Beam search over all heads: keep the ``width`` best sets of each size; extend each by every
    head not in it; stop at size ``k`` or when no extension beats the best set found so far.
    ``width = 1`` is greedy forward selection. The result is the best set scored, by the ranking key."""
    check_search_options(k=k, width=width, n_heads=len(single))
    heads: list[Head] = sorted(next(iter(s.heads)) for s in single if len(s.heads) == 1)
    scored: dict[HeadSet, HeadScore] = {s.heads: s for s in single}
    frontier = rank(single, tie_break)[:width]
    best = frontier[0]
    rounds = [[s.heads for s in frontier]]
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
        ranked = rank((scored[c] for c in candidates), tie_break)
        if ranking_key(ranked[0], tie_break) >= ranking_key(best, tie_break):  # no extension beats the best so far
            break
        frontier = ranked[:width]
        best = frontier[0]
        rounds.append([s.heads for s in frontier])
    name = "greedy" if width == 1 else "beam"
    return SearchResult(name, best, rank(scored.values(), tie_break), n_evaluations, k,
                        {"width": width, **tie_break_option(tie_break)}, rounds)


def greedy(single: Sequence[HeadScore], intact: Bool[np.ndarray, " example"], evaluate: Evaluate, *, k: int = 3,
           tie_break: str = "numeric", **_: object) -> SearchResult:
    """Greedy forward selection over all heads: start from the best single head, add the head
    that most improves the current set (re-scored from the current ablated model), up to ``k``;
    stop early when no head improves it."""
    return beam(single, intact, evaluate, k=k, width=1, tie_break=tie_break)


@dataclass(frozen=True)
class Strategy:
    """A search strategy: its search function and the one check of its options.

    Calling it checks the options (``k``, ``p``, ``width``; each strategy ignores the ones it
    does not use) against the screen, then searches, ranking by ``tie_break``."""

    name: str
    search: Callable[..., SearchResult]
    check_options: Callable[..., None]  # keyword options k, p, width, n_heads; ignores the ones it does not use

    def check(self, *, k: int, p: int = 10, width: int = 3, n_heads: int | None = None) -> None:
        """Raise :class:`ConfigError` naming the bad option, before any model work."""
        self.check_options(k=k, p=p, width=width, n_heads=n_heads)

    def __call__(self, single: Sequence[HeadScore], intact: Bool[np.ndarray, " example"], evaluate: Evaluate, *,
                 k: int = 3, p: int = 10, width: int = 3, tie_break: str = "numeric") -> SearchResult:
        self.check(k=k, p=p, width=width, n_heads=len(single))
        check_tie_break(tie_break)
        return self.search(single, intact, evaluate, k=k, p=p, width=width, tie_break=tie_break)


ALGORITHM1 = Strategy("algorithm1", algorithm1, check_pool_options)
GREEDY = Strategy("greedy", greedy, check_search_options)
BEAM = Strategy("beam", beam, check_search_options)

