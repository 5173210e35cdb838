"""The null calibration of a searched discovery gain: on a tiny model with nothing planted (a
two-choice task whose labels are coin flips, so no head set helps in expectation), the best
discovery gain under the null is above zero while its held-out counterpart is centred near zero;
only the search null prints a p-value, and the others say why not; and, simulated with no effect
anywhere under independent and under additive heads, the search null's p-value rejects at most as
often as it should while the others' reject too often under additive heads."""

import json

import numpy as np
import pytest
from _support import not_none
from click.testing import CliRunner

from celtk.cli import main
from celtk.errors import ConfigError
from celtk.run import RunConfig, run_screen, run_select, run_test
from celtk.run.calibrate import NO_P_VALUE, run_calibration
from celtk.search.null_levels import false_positive_rates, level_bound
from celtk.search.nulls import permutation_null
from celtk.store.documents import CalibrationDocument
from celtk.store.heldout import HeldoutLog


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


def test_search_null_reruns_the_search_and_gives_the_p_value(null_run):
    _, out = null_run
    selection = json.loads((out / "selection.json").read_text())
    doc = run_calibration(out, repeats=400, seed=1)  # the default null
    disc, held = np.array(doc.null_discovery_gains), np.array(doc.null_heldout_gains)
    assert doc.null == "search" and doc.n_candidates == selection["n_evaluations"] and len(disc) == len(held) == 400
    se = held.std() / np.sqrt(len(held))
    assert abs(held.mean()) < 3 * se + 1e-3  # no effect: the chosen candidate's held-out gain is centred at zero
    assert disc.mean() > held.mean() + 6 * se  # the best of many is biased upwards on the examples that chose it
    assert doc.p_value == (1 + np.sum(disc >= doc.observed_discovery_gain - 1e-12)) / 401
    assert doc.p_value_note is None and "beyond the heads' union" in doc.validity
    assert CalibrationDocument.load(out, "calibration-search.json") == doc
    assert run_calibration(out, repeats=400, seed=1) == doc  # stored outcomes and a seed: the same draws


def test_permutation_null_is_a_scale_without_a_p_value(null_run):
    _, out = null_run
    doc = run_calibration(out, null="permutation", repeats=400, seed=1)
    disc, held = np.array(doc.null_discovery_gains), np.array(doc.null_heldout_gains)
    assert doc.n_candidates >= 12 and len(disc) == len(held) == 400
    se = held.std() / np.sqrt(len(held))
    assert abs(held.mean()) < 3 * se + 1e-3 and disc.mean() > held.mean() + 6 * se
    assert doc.p_value is None and doc.p_value_note == NO_P_VALUE["permutation"]
    stored = json.loads((out / "calibration-permutation.json").read_text())
    assert stored["p_value"] is None and "ablations add up" in stored["p_value_note"]


def test_the_cli_prints_a_scale_without_a_p_value_and_says_why(null_run):
    _, out = null_run
    permutation = CliRunner().invoke(main, ["calibrate", str(out), "--null", "permutation", "--repeats", "50"])
    assert permutation.exit_code == 0, permutation.output
    shown = " ".join(permutation.output.split())  # as read, whatever the width rich wrapped the lines at
    assert "no p-value" in shown and "p =" not in shown
    assert "Quote the search null" in " ".join(permutation.output.split())
    search = CliRunner().invoke(main, ["calibrate", str(out), "--repeats", "50"])
    doc = CalibrationDocument.load(out, "calibration-search.json")
    assert search.exit_code == 0 and f"p = {doc.p_value:.3g}" in search.output, search.output


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
    assert doc.p_value is None and doc.p_value_note == NO_P_VALUE["random-heads"]
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
    with pytest.raises(ConfigError, match="search, permutation, random-heads"):
        run_calibration(out, null="shuffle")
    with pytest.raises(ConfigError, match="applies to the random-heads null; the search null"):
        run_calibration(out, n_candidates=5)


SIMS = 300  # searches per model: a rate's standard error is 1.3 points, so 5 % + 3 SE is 8.8 %
BOUND = level_bound(SIMS)


@pytest.mark.parametrize("model", ["independent", "additive"])
def test_only_the_search_null_holds_its_level_under_both_models(model):
    """300 searches at SmolLM2's scale (270 heads, 100 examples, p = 10, k = 3) with nothing to find, each null's
    p-value from 19 draws (then p ≤ 0.05 only when the observed gain beats every draw: 5 % of the time under an
    exchangeable null). The search null rejects at most 5 % + 3 SE under both models. Under additive heads the
    permutation and random-pool nulls reject far more often, which is why calibrate prints them without a
    p-value, and shows that this check fails on a miscalibrated null. The old control (the best of 20 random
    sets of the best's size) rejects far too often under both."""
    rate = false_positive_rates(model, SIMS, seed=1000 if model == "additive" else 0)
    assert rate["search"] <= BOUND, rate
    assert rate["random-heads-control"] > 2 * BOUND, rate
    if model == "independent":  # the one model where the old nulls hold (conservatively)
        assert rate["permutation"] <= BOUND and rate["random-heads"] <= BOUND, rate
    else:
        assert rate["permutation"] > BOUND and rate["random-heads"] > 4 * BOUND, rate
