"""Null distributions for a searched discovery gain: pure numpy, no torch.

A p-value compares the observed statistic with draws of *the same statistic* under the null. The
search's statistic is the discovery gain of its best candidate, by the ranking key, over every
candidate it scored: each single head (the screen), then every subset of size 2..k of the pool
of the top p (Algorithm 1). Three nulls reproduce it, and only one holds its level whether a set's
outcomes are independent of its heads' or follow from them:

* :func:`search_null` reruns the whole search, screen included, on outcomes relabelled under "no
  head helps". Each example's discordance pattern (which heads change it) is kept and its
  direction is a fair coin, the same for every candidate (a fix becomes a damage for all of them
  at once, as when the example's intact outcome flips); every head is screened again, the top p
  pooled by the ranking key, every subset of size 2..k scored, the best's gain kept. A set changes
  the examples any of its heads changes (so it inherits their luck, as additive ablations do),
  plus, at the rate the search's own scored sets showed beyond their heads' union, examples none
  of them changes (shifts too small to flip an example alone that add up). Simulated with no
  effect anywhere (:mod:`celtk.search.null_levels`), its p-value holds its level under both a
  model where sets' outcomes are independent of their heads' and one where heads' margin shifts
  add up; it is conservative in both.
* :func:`permutation_null` relabels each scored candidate's discordant examples (fixes vs
  damage) independently: McNemar's exact null per candidate, the best kept. Where subsets inherit
  their heads' luck, the 165 subsets of a lucky pool are not fresh draws, and the best relabelled
  gain falls short of the search's: its p-value rejects too often (``celtk calibrate`` prints it as
  a scale, without a p-value).
* :func:`random_pool_null` runs the search with a random pool of p heads in place of the
  screened top p. Random pools hold no lucky heads, so their subsets inherit none: under additive
  heads it rejects most of the time with no effect anywhere (also printed as a scale only).

Each returns per-repeat bests; :func:`p_value` turns them into ``(1 + #{null ≥ observed}) / (1 + R)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import combinations

import numpy as np
from jaxtyping import Bool, Float, Int

from celtk.heads import Head, HeadSet
from celtk.search.scores import HeadScore, rank
from celtk.search.selection import subsets

Evaluate = Callable[[list[HeadSet]], dict[HeadSet, Bool[np.ndarray, " example"]]]
CHUNK_ELEMENTS = 1 << 24  # (repeat, candidate, example) cells the search null holds at once (64 MiB of float32)


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


def subset_members(p: int, k: int) -> Int[np.ndarray, "subset k"]:
    """Every subset of size 2..``k`` of pool positions ``0..p-1``, in :func:`celtk.search.selection.subsets`'
    order, one row each, padded to ``k`` columns by repeating its first member (a union ignores repeats)."""
    rows = [c + (c[0],) * (k - len(c)) for size in range(2, k + 1) for c in combinations(range(p), size)]
    return np.array(rows, dtype=np.int64).reshape(len(rows), k)


def beyond_union(discordant: Bool[np.ndarray, "head example"], members: Sequence[Sequence[int]],
                 counts: Sequence[int]) -> dict[int, float]:
    """Per set size ≥ 2, the share of the examples outside a scored set's heads' union of discordant examples
    that the set changes, at least: ``Σ max(0, count − |union|) / Σ (n − |union|)`` over the scored sets of
    that size (``members``: each set's head rows in ``discordant``; ``counts``: its fixes + damage). Where sets
    change examples none of their heads changes alone (shifts that add up past the margin), the search null
    adds that many; where they change fewer than the union, the union stands (conservative)."""
    n = discordant.shape[1]
    extra: dict[int, list[int]] = {}
    for rows, count in zip(members, counts, strict=True):
        if len(rows) < 2:
            continue
        union = int(discordant[list(rows)].any(axis=0).sum())
        tally = extra.setdefault(len(rows), [0, 0])
        tally[0] += max(0, int(count) - union)
        tally[1] += n - union
    return {size: (more / room if room else 0.0) for size, (more, room) in sorted(extra.items())}


def relabelled_best(discordant: Bool[np.ndarray, "*batch head example"], signs: Int[np.ndarray, "repeat example"],
                    p: int, k: int, order: Int[np.ndarray, " head"],
                    extra: Bool[np.ndarray, "repeat subset example"] | None = None
                    ) -> tuple[Int[np.ndarray, " repeat"], Int[np.ndarray, " repeat"]]:
    """Algorithm 1 rerun on relabelled outcomes, once per row of ``signs``: a discordant example with sign +1 is
    a fix, with −1 a damage, for every candidate alike. Each head is scored from its row of ``discordant`` (one
    matrix for every repeat, or one per repeat), the top ``p`` pooled by the ranking key (gain, then damage,
    then ``order``: each head's rank under the tie-break), and every subset of size 2..``k`` of the pool
    scored on the union of its heads' discordant examples (or-ed with ``extra``, per repeat and subset, in
    :func:`subset_members` order).

    Returns:
        the best candidate's (gain, damage) per repeat, in examples: best by the ranking key, which orders by
        gain, then damage, before anything else; its fixes + damage are gain + 2 · damage.
    """
    signs = np.asarray(signs)
    repeats, n = signs.shape
    shared = discordant.ndim == 2
    heads = discordant.shape[-2]
    plus = (signs > 0).astype(np.float32)
    if shared:  # one matrix: two products, not a copy per repeat
        flat = discordant.astype(np.float32)
        fixes, disc = plus @ flat.T, np.broadcast_to(flat.sum(axis=1), (repeats, heads))
    else:
        fixes, disc = np.einsum("rhn,rn->rh", discordant, plus, dtype=np.float32), discordant.sum(axis=2)
    fixes, disc = np.rint(fixes).astype(np.int64), np.asarray(disc, dtype=np.int64)
    measures = (n - (2 * fixes - disc)) * (n + 1) + (disc - fixes)  # (−gain, damage) as one integer
    best = measures.min(axis=1)
    members = subset_members(p, k)
    if len(members):
        key = measures * heads + np.asarray(order)[None, :]  # the ranking key's order among single heads
        pool = np.argpartition(key, p - 1, axis=1)[:, :p]  # the top p (keys are distinct: head ranks differ)
        rows = pool[:, members]  # repeat × subset × k head rows
        at = np.arange(repeats)[:, None]
        union = discordant[rows[..., 0]] if shared else discordant[at, rows[..., 0]]
        for j in range(1, k):
            union = union | (discordant[rows[..., j]] if shared else discordant[at, rows[..., j]])
        if extra is not None:
            union = union | extra
        s_fixes = np.rint(np.matmul(union.astype(np.float32), plus[:, :, None])[..., 0]).astype(np.int64)
        s_disc = union.sum(axis=2)
        best = np.minimum(best, ((n - (2 * s_fixes - s_disc)) * (n + 1) + (s_disc - s_fixes)).min(axis=1))
    return n - best // (n + 1), best % (n + 1)


def search_null(discordant: Bool[np.ndarray, "head example"], p: int, k: int, repeats: int, seed: int, *,
                n_held: int, order: Int[np.ndarray, " head"] | None = None,
                extra_rate: Mapping[int, float] | None = None,
                scored: Bool[np.ndarray, "head example"] | None = None,
                progress: Callable[[int, int], None] | None = None
                ) -> tuple[Float[np.ndarray, " repeat"], Float[np.ndarray, " repeat"], int]:
    """The search rerun under "no head helps", ``repeats`` times (:func:`relabelled_best` on fair-coin signs per
    example): per repeat the best candidate's discovery gain and a null held-out gain for it (its discordance
    rate on ``n_held`` examples, each a fix or a damage by a fair coin, as :func:`permutation_null` does).

    Args:
        discordant: each screened head's changed examples (ablated ≠ intact) on the ``n`` discovery examples.
        order: each head's rank under the tie-break (default: row order).
        extra_rate: per set size, the share of the examples outside its heads' union a set also changes
            (:func:`beyond_union`); drawn afresh per repeat and subset.
        scored: where a racing screen scored each head (default: everywhere); an unscored example is drawn per
            repeat at the head's own discordance rate on its scored ones.
        progress: ``progress(repeats done, repeats)`` after each chunk of repeats (with it, at least 50
            chunks where there are as many repeats; the draws are the same in any chunking).

    Returns:
        (discovery gains, held-out gains, candidates per repeat: heads + subsets of the pool), gains as fractions.
    """
    heads, n = discordant.shape
    order = np.arange(heads) if order is None else np.asarray(order)
    members = subset_members(p, k)
    sign_rng, extra_rng, fill_rng, held_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4))
    rates = np.array([0.0, 0.0] + [float((extra_rate or {}).get(size, 0.0)) for size in range(2, k + 1)])
    subset_rate = rates[1 + (members[:, 1:] != members[:, :1]).sum(axis=1)] if len(members) else rates[:0]
    mask = np.ones_like(discordant) if scored is None else np.asarray(scored, dtype=bool)
    missing = not mask.all()
    fill = (discordant & mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1)  # each head's rate where scored
    width = max(len(members), heads if missing else 1)
    step = max(1, CHUNK_ELEMENTS // (width * max(n, 1)))
    if progress:
        step = min(step, max(1, repeats // 50))
    gains, disc = np.empty(repeats, dtype=np.int64), np.empty(repeats, dtype=np.int64)
    for start in range(0, repeats, step):
        rows = min(step, repeats - start)
        signs = np.where(sign_rng.random((rows, n)) < 0.5, 1, -1)  # float draws: the same in any chunking
        matrix = discordant
        if missing:
            drawn = fill_rng.random((rows, heads, n)) < fill[None, :, None]
            matrix = np.where(mask[None], discordant[None], drawn)
        extra = None
        if subset_rate.any():
            extra = extra_rng.random((rows, len(members), n), dtype=np.float32) < subset_rate[None, :, None]
        gain, damage = relabelled_best(matrix, signs, p, k, order, extra)
        gains[start:start + rows], disc[start:start + rows] = gain, gain + 2 * damage
        if progress:
            progress(start + rows, repeats)
    held_disc = np.rint(disc * n_held / max(n, 1)).astype(np.int64)
    held = (2 * held_rng.binomial(held_disc, 0.5) - held_disc) / max(n_held, 1)
    return gains / max(n, 1), held, heads + len(members)
