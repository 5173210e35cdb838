"""Null distributions for a searched discovery gain: pure numpy, no torch.

A p-value compares the observed statistic with draws of *the same statistic* under the null. The
search's statistic is the discovery gain of its best candidate, by the ranking key, over every
candidate it scored: each single head (the screen), then every subset of size 2..k of the pool
of the top p (Algorithm 1). Two nulls reproduce it:

* :func:`permutation_null` relabels each scored candidate's discordant examples (fixes vs
  damage) independently: McNemar's exact null per candidate, the best kept. Candidates' outcomes
  are positively correlated (shared intact outcomes, shared heads); relabelling them
  independently makes the null best stochastically larger, so the p-value is conservative.
* :func:`random_pool_null` runs the same search with a random pool of p heads in place of the
  screened top p: every single head, then every subset of size 2..k of the random pool, the best
  by the ranking key. It has exactly the search's candidate count and make-up, so where
  candidates' outcomes are exchangeable under the null (no effect, and no head shared between
  candidates carries its luck into them) the p-value is valid. A real model's subsets of the top
  pool inherit their heads' luck, which random pools do not: there it is optimistic, a control
  beside the permutation null rather than a replacement for it.

Both return per-repeat bests; :func:`p_value` turns them into ``(1 + #{null ≥ observed}) / (1 + R)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from jaxtyping import Bool, Float, Int

from celtk.heads import Head, HeadSet
from celtk.search.scores import HeadScore, rank
from celtk.search.selection import subsets

Evaluate = Callable[[list[HeadSet]], dict[HeadSet, Bool[np.ndarray, " example"]]]


def p_value(null_best: Float[np.ndarray, " repeat"], observed: float) -> float:
    """The share of null draws at or above ``observed``, with the +1 correction (never 0)."""
    null_best = np.asarray(null_best, dtype=float)
    return float((1 + np.sum(null_best >= observed - 1e-12)) / (1 + len(null_best)))


def permutation_null(discordant: Int[np.ndarray, " m"], n_disc: int, n_held: int, repeats: int, seed: int
                     ) -> tuple[Float[np.ndarray, " repeat"], Float[np.ndarray, " repeat"], int]:
    """Best relabelled gain per repeat and the chosen candidate's null held-out gain.

    Args:
        discordant: fixes + damage of each of the m candidates on the ``n_disc`` discovery examples.

    Returns:
        (discovery gains, held-out gains, m), one gain per repeat, as fractions.
    """
    rng = np.random.default_rng(seed)
    fixes = rng.binomial(discordant[None, :], 0.5, size=(repeats, len(discordant)))
    gains = (2 * fixes - discordant[None, :]) / n_disc
    best = gains.argmax(axis=1)
    held_discordant = np.rint(discordant[best] * n_held / n_disc).astype(int)  # same discordance rate
    held = (2 * rng.binomial(held_discordant, 0.5) - held_discordant) / n_held
    return gains[np.arange(repeats), best], held, len(discordant)


def random_pools(heads: Sequence[Head], p: int, repeats: int, seed: int) -> list[list[Head]]:
    """``repeats`` pools of ``p`` distinct heads drawn uniformly from ``heads``, each in head order."""
    rng = np.random.default_rng(seed)
    return [sorted(heads[i] for i in rng.choice(len(heads), p, replace=False)) for _ in range(repeats)]


def random_pool_null(single: Sequence[HeadScore], intact: Bool[np.ndarray, " example"], evaluate: Evaluate,
                     pools: list[list[Head]], k: int) -> list[HeadScore]:
    """Algorithm 1 with each of ``pools`` in place of the screened top p: per pool, the best by the
    ranking key of every single head (``single``, the screen) and every subset of size 2..``k`` of
    the pool, each scored by ``evaluate`` (correctness per example) against ``intact``."""
    todo = list(dict.fromkeys(s for pool in pools for s in subsets(pool, k)))
    outcomes = evaluate(todo) if todo else {}
    best_single = rank(single)[:1]  # the singles every repeat shares: only their best can win
    scored = {s: HeadScore.compare(s, np.asarray(outcomes[s], dtype=bool), intact) for s in todo}
    return [rank(best_single + [scored[s] for s in subsets(pool, k)])[0] for pool in pools]
