"""Search strategies, alternative-screener maths and stability on synthetic outcomes (no model):
exact expectations that a wrong implementation would miss."""

from itertools import combinations

import numpy as np
import pytest

from celtk.errors import ConfigError
from celtk.heads import Head, HeadSet
from celtk.screening.rankers import lasso_cv, lasso_fit, random_masks
from celtk.search.registry import get_strategy
from celtk.search.scores import HeadScore, rank
from celtk.search.selection import select
from celtk.search.stability import jaccard, resample_indices, stability

N = 60
HEADS = [Head(l, h) for l in range(3) for h in range(3)]


def _world(fixes: dict[Head, set[int]], breaks: dict[Head, set[int]] | None = None, pair=None):
    """Intact: examples 0..19 right. Removing head h fixes ``fixes[h]`` and breaks ``breaks[h]``;
    effects of a set are the union, plus ``pair = (a, b, extra)``: removing a and b together also
    fixes ``extra``. Returns intact, singles, an evaluate function and a call log."""
    breaks = breaks or {}
    intact = np.zeros(N, dtype=bool)
    intact[:20] = True
    calls: list[HeadSet] = []

    def outcome(s: HeadSet) -> np.ndarray:
        out = intact.copy()
        for h in s.heads:
            out[list(fixes.get(h, ()))] = True
        for h in s.heads:
            out[list(breaks.get(h, ()))] = False
        if pair and pair[0] in s.heads and pair[1] in s.heads:
            out[list(pair[2])] = True
        return out

    def evaluate(sets):
        calls.extend(sets)
        return {s: outcome(s) for s in sets}

    singles = [HeadScore.compare(HeadSet((h,)), outcome(HeadSet((h,))), intact) for h in HEADS]
    return intact, singles, evaluate, calls, outcome


def test_algorithm1_strategy_equals_select_and_counts():
    fixes = {HEADS[i]: set(range(20 + 3 * i, 20 + 3 * i + i)) for i in range(9)}
    intact, singles, evaluate, calls, outcome = _world(fixes, {HEADS[8]: {0, 1}})
    result = get_strategy("algorithm1")(singles, intact, evaluate, p=4, k=3)
    reference = select(singles, intact, lambda hs: outcome(hs), p=4, k=3)
    assert result.best.heads == reference.best.heads
    assert result.n_evaluations == 9 + 6 + 4  # screen + C(4,2) + C(4,3)
    assert len(calls) == 10


def test_greedy_equals_brute_force_when_effects_add_up():
    fixes = {h: {20 + i} for i, h in enumerate(HEADS[:5])}  # disjoint fixes: the best k-set is any 3 of these
    fixes[HEADS[0]] |= {30, 31}
    fixes[HEADS[1]] |= {32}
    intact, singles, evaluate, calls, outcome = _world(fixes)
    result = get_strategy("greedy")(singles, intact, evaluate, k=3)
    brute = rank(HeadScore.compare(HeadSet(c), outcome(HeadSet(c)), intact)
                 for size in (1, 2, 3) for c in combinations(HEADS, size))[0]
    assert result.best.heads == brute.heads
    assert result.n_evaluations == 9 + 8 + 7
    assert [len(r) for r in result.rounds] == [1, 1, 1]


def test_greedy_stops_when_no_head_helps_and_beam_width_one_is_greedy():
    fixes = {HEADS[4]: {20, 21, 22}}
    intact, singles, evaluate, calls, _ = _world(fixes, {h: {0} for h in HEADS if h != HEADS[4]})
    greedy = get_strategy("greedy")(singles, intact, evaluate, k=3)
    assert greedy.best.heads == HeadSet((HEADS[4],))
    assert greedy.n_evaluations == 9 + 8  # round 2 found nothing better: stop
    beam1 = get_strategy("beam")(singles, intact, evaluate, k=3, width=1)
    assert ((beam1.best.heads, beam1.n_evaluations, beam1.rounds)
            == (greedy.best.heads, greedy.n_evaluations, greedy.rounds))


def test_planted_pair_missed_by_algorithm1_found_by_greedy_and_beam():
    a, b = HEADS[7], HEADS[8]  # a helps a little alone, b hurts alone, together they fix a lot
    fixes = {a: {20, 21, 22, 23}, HEADS[0]: {24, 25}, HEADS[1]: {26, 27}, HEADS[2]: {28}}
    intact, singles, evaluate, _, _ = _world(fixes, {b: {0, 1, 2}}, pair=(a, b, set(range(30, 50))))
    alg1 = get_strategy("algorithm1")(singles, intact, evaluate, p=4, k=2)
    assert b not in alg1.best.heads.heads
    for name, width in (("greedy", 1), ("beam", 2)):  # greedy is beam of width 1 (it takes no width)
        result = get_strategy(name)(singles, intact, evaluate, k=2, width=width)
        assert result.best.heads == HeadSet((a, b)), name


def test_beam_finds_pair_that_greedy_misses():
    a, b, c = HEADS[3], HEADS[4], HEADS[5]  # c is the best single; a (second) pairs with b
    fixes = {c: {20, 21, 22, 23, 24}, a: {25, 26, 27, 28}}
    intact, singles, evaluate, _, _ = _world(fixes, {b: {0}}, pair=(a, b, set(range(30, 45))))
    greedy = get_strategy("greedy")(singles, intact, evaluate, k=2)
    beam = get_strategy("beam")(singles, intact, evaluate, k=2, width=2)
    assert greedy.best.heads == HeadSet((a, c))
    assert beam.best.heads == HeadSet((a, b))
    assert beam.n_evaluations > greedy.n_evaluations


def test_unknown_strategy_and_bad_width():
    with pytest.raises(ConfigError, match="Unknown search strategy 'gredy'.*Did you mean: 'greedy'"):
        get_strategy("gredy")
    intact, singles, evaluate, _, _ = _world({})
    with pytest.raises(ConfigError, match="Beam width must be at least 1"):
        get_strategy("beam")(singles, intact, evaluate, k=2, width=0)


def test_lasso_fit_matches_soft_thresholding_on_orthogonal_design():
    rng = np.random.default_rng(0)
    x = np.array([[(i >> j) & 1 for j in range(4)] for i in range(16)] * 4, dtype=float)  # full factorial: orthogonal
    beta_true = np.array([0.3, -0.2, 0.0, 0.05])
    y = 0.5 + x @ beta_true + rng.normal(0, 0.01, len(x))
    alpha = 0.01
    b, beta = lasso_fit(x, y, alpha)
    xc, yc = x - x.mean(0), y - y.mean()
    var = (xc ** 2).mean(0)
    ols = xc.T @ yc / len(y) / var
    expected = np.sign(ols) * np.maximum(np.abs(ols) - alpha / var, 0)
    np.testing.assert_allclose(beta, expected, atol=1e-8)


def test_lasso_cv_recovers_sparse_signal():
    rng = np.random.default_rng(1)
    x = (rng.random((300, 40)) < 0.1).astype(float)
    beta_true = np.zeros(40)
    beta_true[[3, 17]] = [0.2, -0.3]
    y = x @ beta_true + rng.normal(0, 0.02, 300)
    _, beta, _ = lasso_cv(x, y, seed=0)
    assert np.argmax(beta) == 3 and np.argmin(beta) == 17
    assert (np.abs(np.delete(beta, [3, 17])) < 0.02).all()


def test_random_masks_distinct_nonempty_and_seeded():
    masks = random_masks(HEADS, 30, 0.2, seed=3)
    assert len(masks) == len(set(masks)) == 30 and all(len(m) for m in masks)
    assert masks == random_masks(HEADS, 30, 0.2, seed=3)


def test_stability_reuses_outcomes_and_finds_a_clear_winner():
    fixes = {HEADS[2]: set(range(20, 40)), HEADS[5]: {40}, HEADS[6]: {41}}
    intact, singles, evaluate, calls, _ = _world(fixes)
    result = stability(singles, intact, evaluate, n_resamples=10, seed=0, p=3, k=2)
    assert result.head_frequency[HEADS[2]] == 1.0
    assert result.reference.heads[0] == HEADS[2]
    assert 0.0 <= result.mean_jaccard <= 1.0
    assert len(set(calls)) <= 9 + 3 * 10  # sets are scored once on the whole set, then indexed
    assert result.n_evaluations == len(set(calls) | {s.heads for s in singles})


def test_resampling_and_jaccard():
    boot = resample_indices(50, 4, "bootstrap", 0.5, seed=0)
    assert all(len(i) == 50 for i in boot) and any(len(set(i)) < 50 for i in boot)
    sub = resample_indices(50, 4, "subsample", 0.4, seed=0)
    assert all(len(i) == len(set(i)) == 20 for i in sub)
    with pytest.raises(ConfigError, match="use 'bootstrap' or 'subsample'"):
        resample_indices(5, 2, "jackknife", 0.5, 0)
    assert jaccard(HeadSet.parse("L1H1,L2H2"), HeadSet.parse("L2H2,L3H3")) == pytest.approx(1 / 3)


def test_lasso_refuses_to_rank_from_constant_scores():
    """Three masks (or masks that all score alike) reported Jaccard 1.00: every head scored 0 and the
    'ranking' was the heads' order, which the exhaustive screen's ties shared."""
    from celtk.screening.rankers import lasso_scores

    heads = [Head(layer, head) for layer in range(3) for head in range(4)]

    def constant(masks):
        return {m: np.array([True, False]) for m in masks}

    with pytest.raises(ConfigError, match=r"needs at least 5 distinct masks; 3 asked .* gave 3\. Use --masks ≥ 5"):
        lasso_scores(constant, heads, n_masks=3, rate=0.3)
    with pytest.raises(ConfigError, match=r"no ranking: all 40 masks score the same accuracy \(50\.0%\)"):
        lasso_scores(constant, heads, n_masks=40, rate=0.3)

    def harmful_l1h2(masks):  # removing L1H2 fixes every example
        return {m: np.array([Head(1, 2) in m] * 4) for m in masks}

    result = lasso_scores(harmful_l1h2, heads, n_masks=40, rate=0.3)
    assert result.ranked()[0] == Head(1, 2)
