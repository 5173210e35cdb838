"""The racing screener (celtk.screening.racing) on synthetic outcome tables: exact mode returns the
exhaustive pool, confidence mode agrees and saves on separated heads, and the module needs
no torch."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from celtk.errors import ConfigError
from celtk.heads import Head, HeadSet
from celtk.screening.racing import (
    default_schedule,
    exhaustive_pool,
    geometric_schedule,
    pool_agreement,
    race,
    race_key,
    serfling_radius,
    subset_prepared,
)

FIX = Path(__file__).parent.parent / "fixtures"


def heads_of(count: int) -> list[HeadSet]:
    return [HeadSet((Head(i // 9, i % 9),)) for i in range(count)]


class Table:
    """A ``score_chunk`` reading a full outcome table, recording every (head, example) it serves."""

    def __init__(self, outcomes: dict[HeadSet, np.ndarray]) -> None:
        self.outcomes = outcomes
        self.served: dict[HeadSet, list[int]] = {h: [] for h in outcomes}

    def __call__(self, heads: list[HeadSet], indices: np.ndarray) -> dict[HeadSet, np.ndarray]:
        for h in heads:
            self.served[h] += indices.tolist()
        return {h: self.outcomes[h][indices] for h in heads}


def check_exact(outcomes: dict[HeadSet, np.ndarray], intact: np.ndarray, p: int, **kwargs):
    """Race in exact mode and assert everything the exact mode promises; return the result."""
    table = Table(outcomes)
    n = len(intact)
    result = race(table, list(outcomes), n, intact, p, **kwargs)
    assert result.pool == exhaustive_pool(outcomes, intact, p)
    assert exhaustive_pool(result.outcomes, intact, p) == result.pool  # unscored as wrong: dropped heads rank below
    for h in outcomes:
        scored = result.scored_mask(h)
        assert sorted(table.served[h]) == sorted(np.flatnonzero(scored).tolist())  # each example once
        assert np.array_equal(result.outcomes[h][scored], outcomes[h][scored])
    for h in result.pool:
        assert result.examples_scored[h] == n and np.array_equal(result.outcomes[h], outcomes[h])
    assert result.evaluations == sum(len(v) for v in table.served.values())
    assert result.uncertified == []
    return result


def flipped(rng, intact: np.ndarray, rate: float) -> np.ndarray:
    return intact ^ (rng.random(len(intact)) < rate)


# -- the key ---------------------------------------------------------------------------

def test_race_key_orders_exactly_like_selection_ranking_key():
    from celtk.search.scores import HeadScore, ranking_key  # the torch-free home of the key; this test may

    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(1, 12))
        intact = rng.random(n) < 0.6
        scores, keys = [], {}
        for h in [*heads_of(40), HeadSet.parse("L0H0,L0H1"), HeadSet.parse("L0H2,L1H0")]:  # few examples: many ties
            correct = rng.random(n) < 0.5
            scores.append(HeadScore.compare(h, correct, intact))
            keys[h] = race_key(h, int(correct.sum()), int((intact & ~correct).sum()), int(intact.sum()))
        assert [s.heads for s in sorted(scores, key=ranking_key)] == sorted(keys, key=keys.__getitem__)


# -- exact mode ------------------------------------------------------------------------

@pytest.mark.parametrize("good_first", [True, False])
def test_exact_mode_drops_a_hopeless_head_as_soon_as_it_provably_cannot_enter(good_first):
    n, p = 100, 3
    intact = np.ones(n, dtype=bool)
    heads = heads_of(25)
    good = heads[:5] if good_first else heads[20:]
    outcomes = {h: intact.copy() if h in good else np.zeros(n, dtype=bool) for h in heads}
    result = check_exact(outcomes, intact, p, schedule=[50, 25, 25])
    # after 50 a good head's worst key (50 right, 50 damaged) equals a bad head's best in every
    # part but the head id: the bad heads go now if their ids come later, else after 75
    when = 50 if good_first else 75
    assert [result.examples_scored[h] for h in heads] == [100 if h in good else when for h in heads]
    assert result.racing_after == ([5, 5, 5] if good_first else [25, 5, 5])
    assert result.saved_fraction == pytest.approx(20 * (100 - when) / (25 * 100))


def test_exact_mode_keeps_a_head_that_wins_only_on_the_last_example():
    n = 60
    intact = np.zeros(n, dtype=bool)
    heads = heads_of(12)
    outcomes = {h: np.zeros(n, dtype=bool) for h in heads}
    outcomes[heads[0]][:30] = True  # leads from the start, then stops
    outcomes[heads[11]][:30] = True  # the same, and right on the last example: the lexicographically last id wins
    outcomes[heads[11]][-1] = True
    result = check_exact(outcomes, intact, 1, schedule=[10] * 6)
    assert result.pool == [heads[11]]
    assert result.examples_scored[heads[0]] == n  # could not be told apart before the end


def test_exact_mode_with_many_ties_at_the_pth_place():
    rng = np.random.default_rng(7)
    n, p = 80, 4
    intact = rng.random(n) < 0.7
    heads = heads_of(30)
    shared = flipped(rng, intact, 0.1)
    outcomes = {h: shared.copy() if i % 3 == 0 else np.zeros(n, dtype=bool) for i, h in enumerate(heads)}
    result = check_exact(outcomes, intact, p)
    assert result.pool == [heads[0], heads[3], heads[6], heads[9]]  # equal keys: the head id decides
    assert result.saved_fraction > 0


def test_exact_mode_with_heads_identical_on_early_chunks_then_diverging():
    rng = np.random.default_rng(11)
    n, p = 64, 3
    intact = rng.random(n) < 0.5
    heads = heads_of(20)
    start = flipped(rng, intact, 0.2)[:32]
    outcomes = {h: np.concatenate([start, rng.random(32) < (i / 20)]) for i, h in enumerate(heads)}
    check_exact(outcomes, intact, p, schedule=[8, 8, 16, 16, 8, 8])


@pytest.mark.parametrize("seed", range(150))
def test_exact_mode_returns_the_exhaustive_pool_on_random_instances(seed):
    rng = np.random.default_rng(seed)
    n, count = int(rng.integers(1, 70)), int(rng.integers(1, 30))
    p = int(rng.integers(1, count + 1))
    intact = rng.random(n) < rng.random()
    rates = rng.random(count) ** 3  # a few heads far from the intact model, most close to it
    outcomes = {h: flipped(rng, intact, r) for h, r in zip(heads_of(count), rates, strict=True)}
    for h in list(outcomes)[: count // 3]:  # exact copies of other heads: ties everywhere
        outcomes[h] = outcomes[list(outcomes)[-1]].copy()
    cuts: np.ndarray | list[int] = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, int(rng.integers(0, 8))),
                                                      replace=False)) if n > 1 else []
    schedule = np.diff([0, *cuts, n]).tolist()
    order = rng.permutation(n) if seed % 2 else None
    result = check_exact(outcomes, intact, p, schedule=schedule, order=order)
    assert len(result.survivors) >= p


# -- confidence mode -------------------------------------------------------------------

def test_confidence_mode_saves_and_agrees_on_separated_heads():
    rng = np.random.default_rng(5)
    n, p = 400, 3
    intact = rng.random(n) < 0.5
    heads = heads_of(40)
    outcomes = {h: rng.random(n) < (0.9 if i < p else 0.1) for i, h in enumerate(heads)}
    result = race(Table(outcomes), heads, n, intact, p, mode="confidence", delta=0.05, seed=1)
    assert result.mode == "confidence" and result.delta == 0.05
    assert pool_agreement(result.pool, exhaustive_pool(outcomes, intact, p)) == 1.0
    assert result.pool == exhaustive_pool(outcomes, intact, p) == exhaustive_pool(result.outcomes, intact, p)
    assert result.saved_fraction > 0.5  # the bad heads go after the first or second chunk
    assert result.uncertified  # and some went before the exact rule could drop them
    exact = race(Table(outcomes), heads, n, intact, p, schedule=result.schedule, order=result.order)
    assert result.saved_fraction > exact.saved_fraction
    assert all(result.examples_scored[h] == n for h in result.pool)


def test_confidence_mode_reveals_a_seeded_random_order():
    intact = np.zeros(30, dtype=bool)
    outcomes = {h: intact.copy() for h in heads_of(3)}
    a = race(Table(outcomes), list(outcomes), 30, intact, 1, mode="confidence", seed=4)
    b = race(Table(outcomes), list(outcomes), 30, intact, 1, mode="confidence", seed=4)
    assert np.array_equal(a.order, b.order) and not np.array_equal(a.order, np.arange(30))
    assert sorted(a.order.tolist()) == list(range(30))


def test_confidence_mode_keeps_p_heads_even_when_its_bound_fails():
    # a non-random order that misleads the bound: every head looks perfect early, then wrong
    n, p = 200, 4
    intact = np.zeros(n, dtype=bool)
    heads = heads_of(12)
    outcomes = {h: np.arange(n) < 20 + 10 * i for i, h in enumerate(heads)}
    outcomes[heads[0]] = np.arange(n) >= 20  # wrong first, right on the rest: the true best
    result = race(Table(outcomes), heads, n, intact, p, mode="confidence", delta=0.999,
                  schedule=[20, 180], order=np.arange(n))
    assert heads[0] not in result.pool and heads[0] in result.uncertified  # the bound failed, as it may
    assert len(result.survivors) >= p and len(result.pool) == p
    assert result.pool == exhaustive_pool({h: outcomes[h] for h in result.survivors}, intact, p)


def test_serfling_radius_covers_sampling_without_replacement():
    rng = np.random.default_rng(0)
    n, m, log_term = 200, 40, math.log(2 / 0.1)  # each side fails with probability ≤ 0.05
    population = rng.random(n) < 0.3
    radius = serfling_radius(m, n, log_term)
    misses = sum(abs(population[rng.permutation(n)[:m]].mean() - population.mean()) > radius for _ in range(4000))
    assert misses / 4000 <= 0.1
    assert serfling_radius(m, n, log_term) < serfling_radius(m, 10 * n, log_term)  # the finite population helps


# -- schedules, agreement, errors ------------------------------------------------------

def test_schedules_sum_to_n():
    assert geometric_schedule(100, 10) == [10, 20, 40, 30]
    assert geometric_schedule(100, 50, 0.5, 7) == [50, 25, 12, 7, 6]
    for n in (1, 2, 17, 100, 2000):
        for mode in ("exact", "confidence"):
            assert sum(default_schedule(n, mode)) == n and min(default_schedule(n, mode)) >= 1
    assert default_schedule(100, "exact")[0] == 50 and default_schedule(100, "confidence")[0] == 7


def test_pool_agreement():
    a, b, c = heads_of(3)
    assert pool_agreement([a, b], [b, a]) == 1.0
    assert pool_agreement([a, c], [a, b]) == 0.5


@pytest.mark.parametrize("change, message", [
    (dict(p=0), "p = 0 must be between 1"),
    (dict(p=5), "p = 5 must be between 1"),
    (dict(intact=np.ones(9, dtype=bool)), "shape (10,)"),
    (dict(intact=np.ones(10)), "bool array"),
    (dict(schedule=[5, 4]), "sum to n = 10"),
    (dict(schedule=[10, 0]), "positive"),
    (dict(mode="confidence", delta=0.0), "0 < delta < 1"),
    (dict(heads=[HeadSet()] * 2), "non-empty HeadSets"),
    (dict(order=[0] * 10), "permutation of 0..9"),
])
def test_bad_input_names_what_is_wrong(change, message):
    heads = heads_of(4)
    args: dict[str, Any] = dict(heads=heads, intact=np.ones(10, dtype=bool), p=2)
    args.update(change)
    table = Table({h: np.ones(10, dtype=bool) for h in heads})
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        race(table, args.pop("heads"), 10, args.pop("intact"), args.pop("p"), **args)


def test_same_head_twice_and_a_scorer_that_breaks_the_contract_are_refused():
    heads = heads_of(3)
    intact = np.ones(6, dtype=bool)
    with pytest.raises(ConfigError, match="same head set twice"):
        race(Table({}), [heads[0], heads[0]], 6, intact, 1)
    with pytest.raises(ConfigError, match=r"returned nothing for L0H2"):
        race(lambda hs, idx: {h: np.ones(len(idx), dtype=bool) for h in hs[:2]}, heads, 6, intact, 1)
    with pytest.raises(ConfigError, match=r"returned int64 \(3,\) for L0H0; .* shape \(3,\)"):
        race(lambda hs, idx: {h: np.ones(len(idx), dtype=np.int64) for h in hs}, heads, 6, intact, 1)


# -- torch-free, and the screener wiring -----------------------------------------------

def test_module_imports_and_races_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np\n"
            "from celtk.heads import Head, HeadSet\n"
            "from celtk.screening.racing import race\n"
            "hs = [HeadSet((Head(0, i),)) for i in range(4)]\n"
            "t = {h: np.arange(8) % (i + 2) == 0 for i, h in enumerate(hs)}\n"
            "r = race(lambda heads, idx: {h: t[h][idx] for h in heads}, hs, 8, np.ones(8, dtype=bool), 1)\n"
            "assert 'torch' not in {m for m, v in sys.modules.items() if v is not None}\n"
            "print(r.pool[0])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "L0H0"


def test_subset_prepared_keeps_each_examples_requests():
    from celtk.evaluation.prompts import Prepared, Request
    from celtk.evaluation.scoring import aggregate
    from celtk.tasks import Example

    examples = [Example(f"e{i}", f"q{i}", choices=("a", "bb", "c"), label=i % 3) for i in range(6)]
    requests = [Request(i, (1, 2, i), (10 + j,)) for i in range(6) for j in range(3)]
    prepared = Prepared(examples, requests, [f"prompt {i}" for i in range(6)], "choice", False)
    lp = np.random.default_rng(0).normal(size=len(requests))
    greedy = np.ones(len(requests), dtype=bool)
    full = aggregate(prepared, lp, greedy)
    indices = [4, 1, 5]
    sub = subset_prepared(prepared, indices)
    assert [e.id for e in sub.examples] == ["e4", "e1", "e5"] and sub.prompts == ["prompt 4", "prompt 1", "prompt 5"]
    kept = [requests.index(Request(indices[r.example], r.context, r.continuation)) for r in sub.requests]
    part = aggregate(sub, lp[kept], greedy[kept])
    assert [e.logprob for e in part.examples] == [full.examples[i].logprob for i in indices]
    assert np.array_equal(part.correct, full.correct[indices])
    with pytest.raises(ConfigError, match="distinct examples in 0..5"):
        subset_prepared(prepared, [1, 1])
