"""The null calibration of a searched discovery gain: on a tiny model with nothing planted (a
two-choice task whose labels are coin flips, so no head set helps in expectation), the best
discovery gain under the null is above zero while its held-out counterpart is centred near zero."""

import json

import numpy as np
import pytest

from celtk.errors import ConfigError
from celtk.run import RunConfig, run_screen, run_select, run_test
from celtk.run.calibrate import permutation_null, run_calibration
from celtk.run.documents import CalibrationDocument
from celtk.run.frozen import read_log


@pytest.fixture(scope="module")
def null_run(tiny_llama, tmp_path_factory):
    rng = np.random.default_rng(5)
    words = ["red", "blue", "cat", "dog", "sun", "moon", "tree", "rock", "fish", "bird"]
    lines = [{"prompt": " ".join(rng.choice(words, size=6)) + f" #{i}", "choices": [" yes", " no"],
              "label": int(rng.integers(2))} for i in range(200)]
    data = tmp_path_factory.mktemp("null") / "coin.jsonl"
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path_factory.mktemp("run")
    config = RunConfig(model="tiny-null", task=f"jsonl:{data}", discovery=100, heldout=100, fewshot=0, batch_size=25, p=4, k=2)
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


def test_random_heads_null_shrinks_to_zero_on_heldout(null_run):
    model, out = null_run
    doc = run_calibration(out, null="random-heads", repeats=12, n_candidates=8, seed=0, model=model)
    disc, held = np.array(doc.null_discovery_gains), np.array(doc.null_heldout_gains)
    se = held.std() / np.sqrt(len(held))
    assert abs(held.mean()) < 3 * se + 1e-3  # coin-flip labels: no head set helps on fresh examples
    # but the best of 8 on discovery looks like a gain (12 draws of 100 examples: the bias is the claim, not its size)
    assert disc.mean() > held.mean() and disc.min() >= 0
    (entry,) = [e for e in read_log(out) if e["what"] == "calibrate-random-heads"]
    # only each draw's best set is scored on held-out examples (not all 12 × 8 candidates)
    assert entry["exploratory"] and 1 < len(entry["heads"]) <= 12


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
