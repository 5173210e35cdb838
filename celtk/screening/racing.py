"""Racing over single-head interventions: stage 1 of Algorithm 1 without scoring every head
on every discovery example.

The discovery examples are revealed in chunks (a ``schedule`` of chunk sizes). After each
chunk every head still racing has been scored on the same examples, and each head gets
bounds on its final ranking key (the key of :func:`celtk.search.selection.ranking_key`, ascending
= better). A head is dropped once at least ``p`` other heads' worst possible final key is
strictly better than its best possible one: it cannot enter the top-``p`` pool. Heads never
dropped are scored on every example, so the pool is read off complete outcomes and stage 2
and the held-out test see exactly what an exhaustive screen gives them.

Why bounds on each part of the key suffice: if ``worst(g)`` bounds every part of g's final
key from above, ``best(h)`` bounds every part of h's from below, and ``worst(g) < best(h)``
lexicographically, then g's final key is lexicographically below h's.

Two modes, recorded in the result:

* ``"exact"``: the bounds hold whatever the unscored outcomes are (best: every remaining
  example right, damage unchanged; worst: every one wrong, damage plus the remaining
  examples the intact model gets right). The pool equals the exhaustive screen's, ties at
  the p-th place included (the head id ends the key, so the order is total), under either
  tie-break of the ids (``tie_break``: a head's id part is fixed, so its bounds are too).
* ``"confidence"`` (opt-in): the final number right is bounded by Hoeffding's inequality
  for sampling without replacement (Serfling 1974: P(mean_m − mean ≥ t) ≤
  exp(−2mt² / (1 − (m−1)/n)) for outcomes in [0, 1]), on a uniformly random reveal order,
  with a union bound over heads, rounds and both sides. With probability at least 1 − δ
  every bound holds and the pool is the exhaustive one; otherwise it may differ. Heads
  dropped by the bound alone (not by the exact rule) are listed as ``uncertified``: when
  none is, the pool is the exhaustive one for certain.

The module needs numpy only; the screener it drives is imported inside
:func:`cached_scorer`, so importing it does not import torch.
"""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from jaxtyping import Bool, Int, Shaped

from celtk.errors import ConfigError
from celtk.heads import HeadSet
from celtk.search.scores import RankKey, check_tie_break, head_order

Mode = Literal["exact", "confidence"]
# (heads, example indices of the chunk) -> each head's correctness on those examples, in that order
ScoreChunk = Callable[[list[HeadSet], Int[np.ndarray, " chunk"]], Mapping[HeadSet, Bool[np.ndarray, " chunk"]]]


def race_key(heads: HeadSet, n_correct: int, damage: int, intact_correct: int, tie_break: str = "numeric"
             ) -> RankKey:
    """The ranking key (:func:`celtk.search.scores.head_order`, ties by ``tie_break``) of one intervention from
    its counts on the examples scored so far."""
    return head_order(heads, n_correct - intact_correct, damage, n_correct, tie_break)


def geometric_schedule(n: int, first: int, growth: float = 2.0, smallest: int = 1) -> list[int]:
    """Chunk sizes ``first, first·growth, …`` (each at least ``smallest``), the last cut so
    they sum to ``n``. ``growth < 1`` gives shrinking chunks: decisions late, where the exact
    mode can make them."""
    if n < 1 or first < 1 or smallest < 1 or growth <= 0:
        raise ConfigError(f"A schedule needs n, first and smallest ≥ 1 and growth > 0; got n={n}, first={first}, "
                          f"smallest={smallest}, growth={growth}.")
    sizes: list[int] = []
    size = float(first)
    while sum(sizes) < n:
        sizes.append(min(max(smallest, round(size)), n - sum(sizes)))
        size *= growth
    return sizes


def default_schedule(n: int, mode: Mode) -> list[int]:
    """Exact mode can drop a head only once the examples left are fewer than its deficit, so
    it halves the chunks (n/2, n/4, … down to n/16); confidence mode doubles them from n/16."""
    step = max(1, math.ceil(n / 16))
    if mode == "exact":
        return geometric_schedule(n, math.ceil(n / 2), 0.5, step)
    return geometric_schedule(n, step, 2.0)


def serfling_radius(m: int, n: int, log_term: float) -> float:
    """Half-width on the mean of ``n`` values in [0, 1] from ``m`` drawn without replacement,
    holding on each side with probability ≥ 1 − exp(−log_term)."""
    return math.sqrt((1 - (m - 1) / n) * log_term / (2 * m))


@dataclass(frozen=True)
class RaceResult:
    """What a race scored and kept.

    ``outcomes[h]`` is a bool array over the ``n`` examples whose entries at ``order[:examples_scored[h]]``
    are head ``h``'s per-example correctness; unscored entries are False, so a dropped head's
    row is its worst case and ranking every row (``exhaustive_pool(outcomes, intact, p)``)
    gives ``pool`` again (always in exact mode; in confidence mode when its bound held).
    Pool heads are always scored on all ``n`` examples.
    """

    mode: Mode
    p: int
    heads: list[HeadSet]
    pool: list[HeadSet]  # the top p by the final key, best first
    outcomes: dict[HeadSet, Bool[np.ndarray, " n"]]
    examples_scored: dict[HeadSet, int]
    order: Int[np.ndarray, " n"]  # the order the examples were revealed in
    schedule: list[int]
    racing_after: list[int]  # heads still racing after each chunk
    uncertified: list[HeadSet]  # dropped by the confidence bound alone (always empty in exact mode)
    delta: float | None

    @property
    def n(self) -> int:
        return len(self.order)

    @property
    def evaluations(self) -> int:
        """(head, example) evaluations made."""
        return sum(self.examples_scored.values())

    @property
    def saved_fraction(self) -> float:
        """Fraction of the exhaustive screen's ``heads × n`` evaluations not made."""
        return 1 - self.evaluations / (len(self.heads) * self.n)

    @property
    def survivors(self) -> list[HeadSet]:
        return [h for h in self.heads if self.examples_scored[h] == self.n]

    def scored_mask(self, heads: HeadSet) -> Bool[np.ndarray, " n"]:
        """The examples ``heads`` was scored on."""
        mask = np.zeros(self.n, dtype=bool)
        mask[self.order[:self.examples_scored[heads]]] = True
        return mask


def exhaustive_pool(outcomes: Mapping[HeadSet, Bool[np.ndarray, " n"]], intact: Bool[np.ndarray, " n"],
                    p: int, tie_break: str = "numeric") -> list[HeadSet]:
    """The top ``p`` heads by the ranking key (ties by ``tie_break``) on complete outcomes (each head's
    correctness, as ``intact``'s)."""
    intact = np.asarray(intact, dtype=bool)
    total = int(intact.sum())
    check_tie_break(tie_break)

    def key(heads: HeadSet) -> RankKey:
        correct = np.asarray(outcomes[heads], dtype=bool)
        return race_key(heads, int(correct.sum()), int((intact & ~correct).sum()), total, tie_break)

    return sorted(outcomes, key=key)[:p]


def pool_agreement(pool: Sequence[HeadSet], reference: Sequence[HeadSet]) -> float:
    """Fraction of ``reference``'s heads that ``pool`` also holds (1.0 = same set)."""
    return len(set(pool) & set(reference)) / len(reference) if reference else 1.0


@dataclass
class _Race:
    """The state between chunks: outcomes in reveal order and each head's scored count."""

    heads: list[HeadSet]
    intact: Bool[np.ndarray, " n"]  # in reveal order
    p: int
    outcomes: Bool[np.ndarray, "head n"]  # in reveal order
    scored: Int[np.ndarray, " head"]
    racing: Bool[np.ndarray, " head"]
    tie_break: str = "numeric"

    def key_bounds(self, low: Int[np.ndarray, " head"], high: Int[np.ndarray, " head"]
                   ) -> tuple[list[RankKey], list[RankKey]]:
        """Best and worst final keys of every head, given bounds on its final number right."""
        n = len(self.intact)
        wrong_intact_right = np.cumsum(self.intact[None, :] & ~self.outcomes, axis=1)
        intact_left = int(self.intact.sum()) - np.concatenate([[0], np.cumsum(self.intact)])
        total = int(self.intact.sum())
        best: list[RankKey] = []
        worst: list[RankKey] = []
        for i, heads in enumerate(self.heads):
            m = int(self.scored[i])
            damage = int(wrong_intact_right[i, m - 1]) if m else 0
            best.append(race_key(heads, int(high[i]), damage, total, self.tie_break))
            worst.append(race_key(heads, int(low[i]), damage + int(intact_left[min(m, n)]), total, self.tie_break))
        return best, worst

    def exact_counts(self) -> tuple[Int[np.ndarray, " head"], Int[np.ndarray, " head"]]:
        right = np.array([self.outcomes[i, :m].sum() for i, m in enumerate(self.scored)])
        return right, right + (len(self.intact) - self.scored)

    def beaten_by(self, low: Int[np.ndarray, " head"], high: Int[np.ndarray, " head"]) -> Int[np.ndarray, " head"]:
        """For each head, how many heads' worst final key is strictly better than its best."""
        best, worst = self.key_bounds(low, high)
        ordered = sorted(worst)
        return np.array([bisect_left(ordered, b) for b in best])


def race(score_chunk: ScoreChunk, heads: Sequence[HeadSet], n: int, intact: Shaped[np.ndarray, " ..."], p: int,
         mode: Mode = "exact", schedule: Sequence[int] | None = None, *, delta: float = 0.05,
         order: Sequence[int] | Int[np.ndarray, " n"] | None = None, seed: int = 0,
         tie_break: str = "numeric") -> RaceResult:
    """Score ``heads`` chunk by chunk on ``n`` examples, dropping those that cannot enter the
    top-``p`` pool; return the pool and what was scored.

    Args:
        score_chunk: ``score_chunk(heads, indices)`` returns, for each of ``heads``, a bool
            array ``[len(indices)]``: its correctness on examples ``indices`` (in that order).
        heads: the interventions, each a :class:`HeadSet` (one head each in stage 1).
        n: number of discovery examples; ``intact``: bool ``[n]``, the intact model's correctness
            (any other array is refused with a :class:`ConfigError` naming its dtype and shape).
        p: pool size; ``mode``: ``"exact"`` or ``"confidence"`` (see the module docstring).
        schedule: chunk sizes summing to ``n`` (default :func:`default_schedule`).
        delta: the confidence mode's failure probability.
        order: the order examples are revealed in; default 0..n−1 in exact mode and a
            permutation drawn from ``seed`` in confidence mode (whose bound needs a random order).
        tie_break: how heads that tie in every measure are ordered (:data:`celtk.search.registry.TIE_BREAKS`); the
            pool is the exhaustive one under this key.
    """
    check_tie_break(tie_break)
    heads, intact, schedule = _check(heads, n, intact, p, mode, schedule, delta)
    if order is None:
        order = np.random.default_rng(seed).permutation(n) if mode == "confidence" else np.arange(n)
    order = np.asarray(order, dtype=np.int64)
    if sorted(order.tolist()) != list(range(n)):
        raise ConfigError(f"order must be a permutation of 0..{n - 1}; got {len(order)} indices.")
    state = _Race(heads, intact[order], p, np.zeros((len(heads), n), dtype=bool),
                  np.zeros(len(heads), dtype=np.int64), np.ones(len(heads), dtype=bool), tie_break)
    log_term = math.log(2 * len(heads) * len(schedule) / delta)
    racing_after, uncertified, start = [], [], 0
    for size in schedule:
        _score(state, score_chunk, order, start, size)
        start += size
        if start < n:
            uncertified += _drop(state, mode, log_term)
        racing_after.append(int(state.racing.sum()))
    outcomes = {}
    for i, h in enumerate(heads):
        outcomes[h] = np.zeros(n, dtype=bool)
        outcomes[h][order] = state.outcomes[i]
    survivors = {h: outcomes[h] for i, h in enumerate(heads) if state.racing[i]}
    return RaceResult(mode, p, heads, exhaustive_pool(survivors, intact, p, tie_break), outcomes,
                      {h: int(m) for h, m in zip(heads, state.scored, strict=True)}, order, schedule, racing_after,
                      uncertified, delta if mode == "confidence" else None)


def _check(heads: Sequence[HeadSet], n: int, intact: Shaped[np.ndarray, " ..."], p: int, mode: Mode,
           schedule: Sequence[int] | None, delta: float) -> tuple[list[HeadSet], Bool[np.ndarray, " n"], list[int]]:
    heads = list(heads)
    if any(not isinstance(h, HeadSet) or len(h) == 0 for h in heads):
        raise ConfigError("race() takes non-empty HeadSets; wrap a Head h as HeadSet((h,)).")
    if len(set(heads)) != len(heads):
        raise ConfigError("race() was given the same head set twice; list each intervention once.")
    if mode not in ("exact", "confidence"):
        raise ConfigError(f"Unknown racing mode {mode!r}; use 'exact' or 'confidence'.")
    if not 1 <= p <= len(heads):
        raise ConfigError(f"p = {p} must be between 1 and the {len(heads)} heads raced.")
    intact = np.asarray(intact)
    if intact.shape != (n,) or intact.dtype != bool:
        raise ConfigError(f"intact must be a bool array of shape ({n},), got {intact.dtype} {intact.shape}.")
    schedule = default_schedule(n, mode) if schedule is None else [int(s) for s in schedule]
    if sum(schedule) != n or min(schedule) < 1:
        raise ConfigError(f"The schedule's chunk sizes must be positive and sum to n = {n}; got {schedule}.")
    if mode == "confidence" and not 0 < delta < 1:
        raise ConfigError(f"delta is a probability of failure; use 0 < delta < 1, got {delta}.")
    return heads, intact, schedule


def _score(state: _Race, score_chunk: ScoreChunk, order: Int[np.ndarray, " n"], start: int, size: int) -> None:
    """Score every racing head on the next ``size`` examples of ``order``."""
    rows = np.flatnonzero(state.racing)
    indices = order[start:start + size]
    got = score_chunk([state.heads[i] for i in rows], indices.copy())
    for i in rows:
        correct = np.asarray(got[state.heads[i]]) if state.heads[i] in got else None
        if correct is None or correct.dtype != bool or correct.shape != (size,):
            what = "nothing" if correct is None else f"{correct.dtype} {correct.shape}"
            raise ConfigError(f"score_chunk returned {what} for {state.heads[i]}; it must return a bool "
                              f"array of shape ({size},) for every head it is given.")
        state.outcomes[i, start:start + size] = correct
        state.scored[i] += size


def _drop(state: _Race, mode: Mode, log_term: float) -> list[HeadSet]:
    """Stop racing the heads that cannot enter the pool; return those only the bound dropped."""
    n = len(state.intact)
    low, high = state.exact_counts()
    beaten = exact_beaten = state.beaten_by(low, high)
    if mode == "confidence":
        mean = low / np.maximum(state.scored, 1)
        radius = np.array([serfling_radius(int(m), n, log_term) for m in state.scored])
        # ceil/floor: the final count is an integer; the 1e-9 keeps rounding on the safe side
        conf_low = np.maximum(low, np.ceil(n * (mean - radius) - 1e-9)).astype(np.int64)
        conf_high = np.minimum(high, np.floor(n * (mean + radius) + 1e-9)).astype(np.int64)
        inside = conf_low <= conf_high  # an empty interval means the bound failed there: keep the exact one
        low, high = np.where(inside, conf_low, low), np.where(inside, conf_high, high)
        beaten = state.beaten_by(low, high)
    # at least p keep racing: whoever beats h has best ≤ worst < best(h), so the p heads with the
    # best best-keys are each beaten by fewer than p
    dropped = [i for i in np.flatnonzero(state.racing) if beaten[i] >= state.p]
    state.racing[dropped] = False
    return [state.heads[i] for i in dropped if exact_beaten[i] < state.p]


def subset_prepared(prepared: Any, indices: Sequence[int]) -> Any:
    """A :class:`celtk.evaluation.prompts.Prepared` holding only examples ``indices`` (in that order),
    their requests renumbered, so a screener scores just those examples."""
    position = {int(e): k for k, e in enumerate(indices)}
    if len(position) != len(indices) or any(not 0 <= e < len(prepared.examples) for e in position):
        raise ConfigError(f"indices must be distinct examples in 0..{len(prepared.examples) - 1}.")
    by_example: dict[int, list[Any]] = {}
    for request in prepared.requests:
        if request.example in position:
            by_example.setdefault(position[request.example], []).append(
                dataclasses.replace(request, example=position[request.example]))
    return dataclasses.replace(prepared, examples=[prepared.examples[int(e)] for e in indices],
                               prompts=[prepared.prompts[int(e)] for e in indices],
                               requests=[r for k in range(len(indices)) for r in by_example.get(k, [])])


def cached_scorer(model: Any, prepared: Any, *, batch_size: int = 16, rows_per_pass: int = 64,
                  ablation: Any = None) -> ScoreChunk:
    """A ``score_chunk`` for :func:`race` that runs :class:`celtk.screening.cached.CachedScreener` on
    the chunk's examples (each call pays one intact pass over the chunk and, with a shared
    few-shot prefix, the prefix once per head)."""
    from celtk.screening.cached import CachedScreener

    def score_chunk(heads: list[HeadSet], indices: Int[np.ndarray, " chunk"]
                    ) -> dict[HeadSet, Bool[np.ndarray, " chunk"]]:
        screener = CachedScreener(model, subset_prepared(prepared, indices.tolist()), batch_size=batch_size,
                                  rows_per_pass=rows_per_pass, ablation=ablation)
        _, results = screener.run(heads)
        return {h: results[h].correct for h in heads}

    return score_chunk
