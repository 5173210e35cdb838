"""Does a null's p-value hold its level? Searches simulated with no effect anywhere, each null's p-value
for the search's best discovery gain, and the share of searches each rejects at α: pure numpy.

Two models of how a head set's outcomes relate to its heads' (with a variant of the second):

* ``independent``: every set, single heads included, changes a random share ``q`` of a 50 %-correct
  intact model's examples, drawn independently per set (the same set always draws the same examples).
  A subset inherits nothing from its heads: the one model where the screen's pool choice does not matter.
* ``additive``: example i has an intact margin m_i (right when m_i > 0, half of them), head h shifts
  it by δ_hi ~ N(0, s_h²) with head scales s_h spread log-normally, and a set's shift is the sum of its
  heads' (as ablations compose when heads add up): the set is right where m_i + Σ δ_hi > 0. No head
  helps in expectation, but a subset of lucky heads inherits their luck.
* ``additive-gapped``: the same with every margin at least ``gap`` from zero, so single heads rarely
  flip an example while sets of them do (their shifts add up past the margin).

:func:`no_effect_search` runs Algorithm 1 in one such world and returns each null's p-value;
:func:`false_positive_rates` repeats it. ``benchmarks/null_levels.py`` writes the table the docs show,
and ``tests/integration/test_calibrate.py`` checks a smaller run of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Bool, Float, Int
from numpy.typing import NDArray

from celtk.search.nulls import beyond_union, p_value, permutation_null, search_null, subset_members

MODELS = ("independent", "additive", "additive-gapped")
NULL_NAMES = ("search", "permutation", "random-heads", "random-heads-control")
UNION_ONLY = "search-union-only"  # the search null without sets' changes beyond their heads' union (benchmark only)
CONTROL_SETS = 20  # random sets per draw of the old control (the best of 20 random sets of the best's size)


def level_bound(sims: int, alpha: float = 0.05) -> float:
    """α plus three standard errors of a rejection rate estimated from ``sims`` searches."""
    return alpha + 3 * float(np.sqrt(alpha * (1 - alpha) / sims))


@dataclass(frozen=True)
class IndependentWorld:
    """Each set changes a share ``q`` of the examples, drawn from a hash of (salt, set, example)."""

    n_heads: int
    n: int
    salt: int
    q: float = 0.15

    @property
    def intact(self) -> Bool[np.ndarray, " example"]:
        return np.equal(np.arange(self.n) % 2, 0)

    def outcomes(self, sets: Int[np.ndarray, "set member"]) -> Bool[np.ndarray, "set example"]:
        """Per-example correctness of each set (rows of head indices, −1 where a set has fewer members)."""
        ids = np.sort(np.where(sets < 0, -1, sets), axis=1).astype(np.int64) + 1  # 0 marks no member
        key = np.zeros(len(sets), dtype=np.uint64)
        for j in range(ids.shape[1]):
            key = key * np.uint64(self.n_heads + 1) + ids[:, j].astype(np.uint64)
        with np.errstate(over="ignore"):  # splitmix64: wrapping arithmetic is the point
            x: NDArray[np.uint64] = (key[:, None] * np.uint64(0x9E3779B97F4A7C15) + np.uint64(self.salt)
                 + np.arange(self.n, dtype=np.uint64)[None, :] * np.uint64(0xD1B54A32D192ED03))
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            x = x ^ (x >> np.uint64(31))
        uniform = (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        return self.intact[None, :] ^ (uniform < self.q)


@dataclass(frozen=True)
class AdditiveWorld:
    """Margins ``margin`` and per-head shifts ``shift``; a set is right where the margin plus its heads' shifts
    is positive."""

    margin: Float[np.ndarray, " example"]
    shift: Float[np.ndarray, "head example"]

    @classmethod
    def draw(cls, n_heads: int, n: int, rng: np.random.Generator, *, scale: float = 0.2, spread: float = 0.5,
             gap: float = 0.0) -> AdditiveWorld:
        """Half the margins positive, |m| = gap + |N(0, 1)|; head scales ``scale`` · exp(``spread`` · N(0, 1))."""
        margin = rng.choice([-1.0, 1.0], size=n) * (gap + np.abs(rng.normal(size=n)))
        scales = scale * np.exp(spread * rng.normal(size=n_heads))
        return cls(margin, scales[:, None] * rng.normal(size=(n_heads, n)))

    @property
    def intact(self) -> Bool[np.ndarray, " example"]:
        return self.margin > 0

    def outcomes(self, sets: Int[np.ndarray, "set member"]) -> Bool[np.ndarray, "set example"]:
        total = np.broadcast_to(self.margin, (len(sets), len(self.margin))).copy()
        for j in range(sets.shape[1]):
            present = sets[:, j] >= 0
            total[present] += self.shift[sets[present, j]]
        return total > 0


World = IndependentWorld | AdditiveWorld


def world(model: str, n_heads: int, n: int, rng: np.random.Generator) -> World:
    """One world of ``model`` (:data:`MODELS`) with nothing to find."""
    if model == "independent":
        return IndependentWorld(n_heads, n, int(rng.integers(1 << 62)))
    if model == "additive":  # scales whose discordance counts resemble SmolLM2's screen (median 4 of 100, 90th pct 12)
        return AdditiveWorld.draw(n_heads, n, rng, scale=0.2, spread=0.5)
    if model == "additive-gapped":
        return AdditiveWorld.draw(n_heads, n, rng, scale=0.1, gap=0.3, spread=0.0)
    raise ValueError(f"Unknown model {model!r}; use one of {', '.join(MODELS)}.")


def _members(pool: Int[np.ndarray, "*batch p"], k: int) -> Int[np.ndarray, "*batch subset k"]:
    """Each pool's subsets of size 2..k as rows of head indices, −1 for the missing members."""
    rows = subset_members(pool.shape[-1], k)
    padded = np.where(rows[:, 1:] == rows[:, :1], -1, rows[:, 1:])
    heads = pool[..., rows[:, 0]][..., None]
    rest = np.where(padded < 0, -1, pool[..., np.maximum(padded, 0)])
    return np.concatenate([heads, rest], axis=-1)


def _scored(w: World, sets: Int[np.ndarray, "set member"]) -> tuple[Int[np.ndarray, " set"], ...]:
    """(gain, damage, fixes + damage) of each set against the world's intact outcomes, in examples."""
    ablated = w.outcomes(sets)
    intact = w.intact
    disc = (ablated != intact).sum(axis=1)
    damage = (intact & ~ablated).sum(axis=1)
    return disc - 2 * damage, damage, disc


def no_effect_search(model: str, seed: int, *, n_heads: int = 270, n: int = 100, p: int = 10, k: int = 3,
                     repeats: int = 19, nulls: tuple[str, ...] = NULL_NAMES) -> dict[str, float]:
    """Algorithm 1 in one world of ``model`` with nothing to find, and the p-value of its best discovery gain
    under each of ``nulls`` (:data:`NULL_NAMES`), each from ``repeats`` draws (19 draws: p ≤ 0.05 when the
    observed gain beats all of them, exactly 5 % of the time under an exchangeable null)."""
    rng = np.random.default_rng(seed)
    w = world(model, n_heads, n, rng)
    singles = np.full((n_heads, k), -1)
    singles[:, 0] = np.arange(n_heads)
    gain, damage, disc = _scored(w, singles)
    discordant = w.outcomes(singles) != w.intact
    pool = np.argsort((n - gain) * (n + 1) + damage, kind="stable")[:p]  # the ranking key, ties by head index
    subsets = _members(pool, k)
    s_gain, s_damage, s_disc = _scored(w, subsets) if len(subsets) else (gain[:0], damage[:0], disc[:0])
    observed = max(gain.max(), s_gain.max(initial=-n)) / n
    out: dict[str, float] = {}
    if "search" in nulls:
        rate = beyond_union(discordant, [row[row >= 0].tolist() for row in subsets], s_disc.tolist())
        null, _, _ = search_null(discordant, p, k, repeats, seed + 1, n_held=n, extra_rate=rate)
        out["search"] = p_value(null, observed)
    if UNION_ONLY in nulls:
        null, _, _ = search_null(discordant, p, k, repeats, seed + 1, n_held=n)
        out[UNION_ONLY] = p_value(null, observed)
    if "permutation" in nulls:
        null, _, _ = permutation_null(np.concatenate([disc, s_disc]), n, n, repeats, seed + 2)
        out["permutation"] = p_value(null, observed)
    if "random-heads" in nulls:
        pools = np.stack([rng.choice(n_heads, p, replace=False) for _ in range(repeats)])
        drawn = _members(pools, k).reshape(-1, k)
        r_gain = _scored(w, drawn)[0].reshape(repeats, -1) if len(drawn) else np.zeros((repeats, 0), dtype=int)
        out["random-heads"] = p_value(np.maximum(gain.max(), r_gain.max(axis=1, initial=-n)) / n, observed)
    if "random-heads-control" in nulls:
        sizes = np.concatenate([np.ones(n_heads, dtype=np.int64), (subsets >= 0).sum(axis=1)])
        measures = np.concatenate([(n - gain) * (n + 1) + damage, (n - s_gain) * (n + 1) + s_damage])
        size = int(sizes[np.lexsort((sizes, measures))[0]])  # the best's size (fewer heads first among ties)
        drawn = np.full((repeats * CONTROL_SETS, k), -1)
        for row in range(len(drawn)):
            drawn[row, :size] = rng.choice(n_heads, size, replace=False)
        c_gain = _scored(w, drawn)[0].reshape(repeats, CONTROL_SETS)
        out["random-heads-control"] = p_value(c_gain.max(axis=1) / n, observed)
    return out


def false_positive_rates(model: str, sims: int, *, alpha: float = 0.05, seed: int = 0,
                         nulls: tuple[str, ...] = NULL_NAMES, **scale: int) -> dict[str, float]:
    """The share of ``sims`` no-effect searches of ``model`` in which each null's p-value is at most ``alpha``
    (searches seeded ``seed``, ``seed + 3``, ...; ``scale``: :func:`no_effect_search`'s sizes and repeats)."""
    p = [no_effect_search(model, seed + 3 * i, nulls=nulls, **scale) for i in range(sims)]
    return {name: float(np.mean([row[name] <= alpha + 1e-12 for row in p])) for name in nulls}
