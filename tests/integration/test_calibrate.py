"""The null calibration of a searched discovery gain: on a tiny model with nothing planted (a
two-choice task whose labels are coin flips, so no head set helps in expectation), the best
discovery gain under the null is above zero while its held-out counterpart is centred near zero;
and, simulated with no effect anywhere, each null's p-value rejects at most as often as it should."""

import json

import numpy as np
import pytest
from _support import not_none

from celtk.errors import ConfigError
from celtk.heads import HeadSet, all_heads
from celtk.run import RunConfig, run_screen, run_select, run_test
from celtk.run.calibrate import run_calibration
from celtk.run.documents import CalibrationDocument
from celtk.run.heldout import HeldoutLog
from celtk.search.nulls import p_value, permutation_null, random_pool_null, random_pools
from celtk.search.scores import HeadScore, rank
from celtk.search.strategies import algorithm1


@pytest.fixture(scope="module")
def null_run(tiny_llama, tmp_path_factory):
    rng = np.random.default_rng(5)
    words = ["red", "blue", "cat", "dog", "sun", "moon", "tree", "rock", "fish", "bird"]
    lines = [{"prompt": " ".join(rng.choice(words, size=6)) + f" #{i}", "choices": [" yes", " no"],
              "label": int(rng.integers(2))} for i in range(200)]
    data = tmp_path_factory.mktemp("null") / "coin.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path_factory.mktemp("run")
    config = RunConfig(model="tiny-null", task=f"jsonl:{data}", discovery=100, heldout=100, fewshot=0, batch_size=25,
                       p=4, k=2)
    run_screen(config, out, model=tiny_llama)
    run_select(out, p=4, k=2, model=tiny_llama)
    run_test(out, model=tiny_llama, n_boot=200)
    return tiny_llama, out


def test_permutation_null_best_discovery_above_zero_heldout_near_zero(null_run):
    _, out = null_run
    doc = run_calibration(out, null="permutation", repeats=400, seed=1)
    disc, held = np.array(doc.null_discovery_gains), np.array(doc.null_heldout_gains)
    assert doc.n_candidates >= 12 and len(disc) == len(held) == 400
    se = held.std() / np.sqrt(len(held))
    assert abs(held.mean()) < 3 * se + 1e-3  # no effect: the chosen candidate's held-out gain is centred at zero
    assert disc.mean() > held.mean() + 6 * se  # the best of many is biased upwards on the examples that chose it
    assert doc.p_value == (1 + np.sum(disc >= doc.observed_discovery_gain - 1e-12)) / 401
    assert CalibrationDocument.load(out, "calibration-permutation.json") == doc


def test_random_heads_null_is_the_search_on_random_pools(null_run):
    model, out = null_run
    selection = json.loads((out / "selection.json").read_text())
    doc = run_calibration(out, null="random-heads", repeats=12, seed=0, model=model)
    disc, held = np.array(doc.null_discovery_gains), np.array(doc.null_heldout_gains)
    se = held.std() / np.sqrt(len(held))
    assert abs(held.mean()) < 3 * se + 1e-3  # coin-flip labels: no head set helps on fresh examples
    # the best of the search's own candidates on discovery: as many as the search scored, and never below its
    # best single
    assert (doc.n_candidates == selection["n_evaluations"] and disc.min() >= max(0.0, disc.mean() - 1)
            and disc.mean() > held.mean())
    assert doc.p_value == p_value(disc, doc.observed_discovery_gain) and doc.p_value_note is None
    # each repeat's best is a single head or a subset of size ≤ k of a 4-head pool
    assert doc.null_sets is not None and len(doc.null_sets) == 12 and all(1 <= len(s) <= 2 for s in doc.null_sets)
    look = [look for look in HeldoutLog(out).looks() if look.what == "calibrate-random-heads"][-1]
    # only each draw's best set is scored on held-out examples, logged before, its result after
    assert (look.exploratory and look.complete
            and sorted(look.heads) == sorted(set(doc.null_sets)))


def test_random_heads_control_gives_no_p_value(null_run):
    model, out = null_run
    doc = run_calibration(out, null="random-heads", repeats=5, n_candidates=8, seed=0, model=model)
    assert doc.p_value is None and "different statistics" in not_none(doc.p_value_note) and doc.n_candidates == 8
    assert len(doc.null_discovery_gains) == 5 and min(doc.null_discovery_gains) >= 0  # the best of 8 random pairs


def test_permutation_null_by_hand():
    # no discordant examples: every relabelled gain is 0; one candidate with 4 discordant: gain in {-4..4}/n, even steps
    disc, held, m = permutation_null(np.array([0, 0]), 10, 10, 5, 0)
    assert m == 2 and np.all(disc == 0) and np.all(held == 0)
    disc, held, _ = permutation_null(np.array([4]), 10, 20, 2000, 0)
    assert set(np.round(disc * 10).astype(int)) <= {-4, -2, 0, 2, 4}
    assert disc.mean() == pytest.approx(0, abs=0.02) and set(np.round(held * 20).astype(int)) <= set(range(-8, 9, 2))


def test_unknown_null_refused(null_run):
    _, out = null_run
    with pytest.raises(ConfigError, match="permutation, random-heads"):
        run_calibration(out, null="shuffle")


def _no_effect_search(seed, *, n=200, shape=(10, 10), p=8, k=2, q=0.15, repeats=59, control_only=False):
    """One search where no head set has any effect (each set flips a random 15 % of a 50 %-correct
    intact model's outcomes, independently), and the p-values of its best discovery gain under the
    permutation null, the random-pool null and the old control (the best of 20 random sets of the best's size)."""
    rng = np.random.default_rng(seed)
    intact = np.arange(n) % 2 == 0
    cache: dict[HeadSet, np.ndarray] = {}

    def outcome(s):
        if s not in cache:
            cache[s] = intact ^ (rng.random(n) < q)
        return cache[s]

    def evaluate(sets):
        return {s: outcome(s) for s in sets}

    heads = all_heads(*shape)
    single = [HeadScore.compare(HeadSet((h,)), outcome(HeadSet((h,))), intact) for h in heads]
    result = algorithm1(single, intact, evaluate, k=k, p=p)
    observed = result.best.gain / n
    if control_only:
        size = len(result.best.heads)
        control = [rank([HeadScore.compare(s, outcome(s), intact) for s in
                         [HeadSet(tuple(heads[i] for i in rng.choice(len(heads), size, replace=False)))
                          for _ in range(20)]])[0]
                   for _ in range(repeats)]
        return p_value(np.array([c.gain / n for c in control]), observed)
    discordant = np.array([s.fixes + s.damage for s in single]
                          + [s.fixes + s.damage for s in result.scored if len(s.heads) > 1])
    permutation, _, _ = permutation_null(discordant, n, n, repeats, seed)
    pools = random_pool_null(single, intact, evaluate, random_pools(heads, p, repeats, seed + 1), k)
    return [p_value(np.asarray(null), observed) for null in (permutation, [b.gain / n for b in pools])]


SIMS = 150
BOUND = 0.05 + 3 * np.sqrt(0.05 * 0.95 / SIMS)  # 5 % plus three standard errors of a rate over SIMS searches


def test_null_p_values_hold_their_level_with_no_effect_anywhere():
    """150 searches (100 heads, p = 8, k = 2) with nothing to find: the permutation and random-pool
    p-values reject at α = 0.05 at most 5 % of the time within sampling error (both may be conservative)."""
    rate = (np.array([_no_effect_search(seed) for seed in range(SIMS)]) <= 0.05).mean(axis=0)
    assert rate[0] <= BOUND and rate[1] <= BOUND, rate


def test_the_old_random_heads_control_was_not_a_p_value():
    """The statistic the random-heads null used to print, at the scale of SmolLM2 (270 heads, p = 10,
    k = 3: the search's best of 435 candidates against the best of 20 random sets), rejects far more
    often than 5 % with no effect anywhere: the test above would catch a return to it."""
    rate = np.mean([_no_effect_search(seed, shape=(30, 9), p=10, k=3, control_only=True) <= 0.05
                    for seed in range(SIMS)])
    assert rate > 2 * BOUND, rate
