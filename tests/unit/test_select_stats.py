"""Ranking key, subset enumeration and the statistics against known values."""

from math import comb

import numpy as np
import pytest

from celtk.errors import ConfigError
from celtk.heads import HeadSet
from celtk.search.scores import HeadScore, rank
from celtk.search.selection import MAX_SUBSETS, candidate_pool, check_pool_options, n_subsets, select, subsets
from celtk.stats import compare_paired, mcnemar_exact, paired_bootstrap_ci, relative_error_reduction


def _score(heads, n_correct, damage, n=100):
    correct = np.zeros(n, dtype=bool)
    correct[:n_correct] = True
    return HeadScore(HeadSet.parse(heads), n_correct, n_correct - 50, damage, 0, correct)


def test_ranking_key_ties_at_every_level():
    a = _score("L3H0", 60, 5)  # best gain
    b = _score("L2H0", 55, 1)  # same gain as c, lower damage
    c = _score("L1H0", 55, 2)
    d = _score("L0H0,L0H1", 55, 2)  # ties c on gain, damage, accuracy; more heads
    e = _score("L0H2", 55, 2)  # ties c on everything but head id; L0H2 < L1H0
    assert [str(s.heads) for s in rank([d, c, e, b, a])] == ["L3H0", "L2H0", "L0H2", "L1H0", "L0H0,L0H1"]


def test_subset_enumeration_counts():
    pool = list(HeadSet.parse(",".join(f"L{i}H0" for i in range(10))))
    sets = subsets(pool, 3)
    assert len(sets) == 165 == n_subsets(10, 3) == 45 + 120
    assert len(set(sets)) == 165 and all(2 <= len(s) <= 3 for s in sets)
    assert n_subsets(10, 1) == 0 and len(subsets(pool, 2)) == 45


def test_pool_and_k_p_checks():
    scores = [_score(f"L{i}H0", 50 + i, 0) for i in range(5)]
    assert [str(s.heads) for s in candidate_pool(scores, 2)] == ["L4H0", "L3H0"]
    with pytest.raises(ConfigError, match="exceeds the 5 screened heads"):
        candidate_pool(scores, 6)
    with pytest.raises(ConfigError, match="k = 4 exceeds p = 3; Algorithm 1 draws subsets from the pool"):
        select(scores, np.zeros(100, bool), lambda hs: np.zeros(100, bool), p=3, k=4)


def test_select_prefers_joint_gain_and_flags_interaction():
    n = 40
    intact = np.zeros(n, dtype=bool)
    single = {}
    for i, name in enumerate(["L0H0", "L1H0", "L2H0"]):
        c = intact.copy()
        c[i] = True  # each fixes one example
        single[name] = HeadScore.compare(HeadSet.parse(name), c, intact)

    def evaluate(hs):
        c = intact.copy()
        for h in hs:
            c[int(str(h)[1])] = True
        if str(hs) == "L0H0,L1H0":
            c[10:30] = True  # strongly super-additive pair
        return c

    sel = select(single.values(), intact, evaluate, p=3, k=3)
    # the pair fixes 2 + 20 examples; the triple only its three heads' own 3, so the pair wins
    assert str(sel.best.heads) == "L0H0,L1H0" and sel.best.gain == 22
    assert [str(s.heads) for s in sel.ranked[:2]] == ["L0H0,L1H0", "L0H0,L1H0,L2H0"]
    flagged = sel.diagnostics["flagged"]
    assert any(f["heads"] == HeadSet.parse("L0H0,L1H0") and f["kind"] == "super-additive" for f in flagged)
    m = sel.diagnostics["pairwise_interaction"]
    assert m[0][1] == 20 and m[1][2] == 0 and m[0][0] is None


def test_mcnemar_exact_known_values():
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
    assert mcnemar_exact(2, 8) == pytest.approx(112 / 1024)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(9, 1) == mcnemar_exact(1, 9)


def test_relative_error_reduction_matches_table1():
    reduction = relative_error_reduction(0.704, 0.131)
    assert reduction is not None
    assert 100 * reduction == pytest.approx(44.26, abs=0.01)


def test_bootstrap_ci_covers_true_gain():
    rng = np.random.default_rng(1)
    covered = 0
    for trial in range(40):
        intact = rng.random(400) < 0.5
        ablated = intact.copy()
        flip = rng.random(400) < 0.2
        ablated[flip] = rng.random(flip.sum()) < 0.75  # true gain = 0.2 * (0.75 - 0.5) = 0.05
        ci = paired_bootstrap_ci(intact, ablated, n_boot=2000, seed=trial)
        assert ci is not None
        lo, hi = ci
        covered += lo <= 0.05 <= hi
    assert covered >= 34  # ~95 % nominal; 34/40 leaves room for noise


def test_compare_paired_fields():
    intact = np.array([1, 1, 0, 0, 0, 1], dtype=bool)
    ablated = np.array([1, 0, 1, 1, 0, 1], dtype=bool)
    c = compare_paired(intact, ablated, n_boot=500)
    assert (c.fixes, c.damage) == (2, 1) and c.gain == pytest.approx(1 / 6)
    assert c.relative_error_reduction == pytest.approx((1 / 6) / 0.5)
    assert c.gain_ci is not None and c.gain is not None
    assert c.gain_ci[0] <= c.gain <= c.gain_ci[1]
    with pytest.raises(ValueError, match="equal-length"):
        compare_paired(intact, ablated[:3])


def test_the_subset_count_stops_once_it_passes_the_limit():
    """p and k typed by hand (`celtk select --p 1000000 --k 1000000`) are refused at once: the count stops at the
    first size that passes the limit instead of summing a million binomials of a million."""
    assert n_subsets(10, 3) == 165 and n_subsets(10, 3, stop_above=MAX_SUBSETS) == 165
    assert n_subsets(10**6, 10**6, stop_above=MAX_SUBSETS) == comb(10**6, 2)  # stopped after size 2
    with pytest.raises(ConfigError, match="p = 1000000, k = 1000000 means more than 1,000,000 subsets"):
        check_pool_options(k=10**6, p=10**6)
