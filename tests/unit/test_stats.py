"""Holm adjustment, the chunked paired bootstrap, and undefined statistics as None (never NaN)."""

import json
import tracemalloc
from dataclasses import asdict

import numpy as np
import pytest

from celtk.errors import CeltkError
from celtk.stats import (
    bootstrap_chunks,
    bootstrap_gains,
    compare_paired,
    defined,
    holm,
    paired_bootstrap_ci,
    relative_error_reduction,
)


@pytest.mark.parametrize("raw, adjusted", [
    ([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02]),  # unsorted: 4·0.005, 3·0.01, 2·0.03, max(1·0.04, 0.06)
    ([0.001, 0.01, 0.02, 0.5], [0.004, 0.03, 0.04, 0.5]),  # already sorted
    ([0.02, 0.02, 0.5], [0.06, 0.06, 0.5]),  # ties adjust alike: 3·0.02, max(2·0.02, 0.06)
    ([0.5, 0.02, 0.02], [0.5, 0.06, 0.06]),  # the same ties, another order
    ([0.3, 0.4, 0.9], [0.9, 0.9, 0.9]),  # monotone: 3·0.3, max(2·0.4, 0.9), 0.9
    ([0.5, 0.6], [1.0, 1.0]),  # capped at 1
    ([0.04], [0.04]),
    ([], []),
])
def test_holm_hand_values(raw, adjusted):
    np.testing.assert_allclose(holm(raw), adjusted, rtol=1e-12)


def _holm_rejects(p, alpha):
    """The textbook step-down procedure: reject in increasing p until p_(i) > alpha / (m − i)."""
    order, rejected = np.argsort(p, kind="stable"), np.zeros(len(p), dtype=bool)
    for i, j in enumerate(order):
        if p[j] > alpha / (len(p) - i):
            break
        rejected[j] = True
    return rejected


def test_holm_adjusted_p_rejects_exactly_as_the_step_down_procedure():
    rng = np.random.default_rng(0)
    for _ in range(200):
        p = np.round(rng.random(rng.integers(1, 12)) ** 3, 3)  # rounding makes ties common
        adj = holm(p)
        assert np.all(adj >= p) and np.all(adj <= 1)
        for alpha in (0.01, 0.05, 0.2):
            np.testing.assert_array_equal(adj <= alpha, _holm_rejects(p, alpha))


@pytest.mark.parametrize("bad", [[0.1, float("nan")], [0.2, 1.5], [-0.1], [[0.1, 0.2]]])
def test_holm_rejects_bad_input(bad):
    with pytest.raises(CeltkError, match="p-values in \\[0, 1\\]"):
        holm(bad)


def test_bootstrap_chunks_are_bounded_and_cover_every_resample():
    assert list(bootstrap_chunks(10, 7, 20)) == [2, 2, 2, 2, 2]
    assert list(bootstrap_chunks(5, 100, 30)) == [1, 1, 1, 1, 1]  # one row is the least a chunk can hold
    for n_boot, n, cap in ((1000, 37, 500), (3, 5, 10_000), (999, 1, 64)):
        rows = list(bootstrap_chunks(n_boot, n, cap))
        assert sum(rows) == n_boot and all(r * n <= max(cap, n) for r in rows)


@pytest.mark.parametrize("n, n_boot, cap", [(7, 37, 5), (7, 37, 22), (64, 101, 1000), (1, 10, 3)])
def test_chunked_bootstrap_equals_one_draw_of_the_whole_matrix(n, n_boot, cap):
    rng = np.random.default_rng(n)
    intact, ablated = rng.random(n) < 0.4, rng.random(n) < 0.6
    diff = ablated.astype(np.int8) - intact.astype(np.int8)
    plain = diff[np.random.default_rng(11).integers(0, n, size=(n_boot, n))].mean(axis=1)  # the pre-chunking code
    np.testing.assert_array_equal(bootstrap_gains(intact, ablated, n_boot=n_boot, seed=11, max_elements=cap), plain)
    whole = paired_bootstrap_ci(intact, ablated, n_boot=n_boot, seed=11, max_elements=n * n_boot)
    assert paired_bootstrap_ci(intact, ablated, n_boot=n_boot, seed=11, max_elements=cap) == whole


def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_chunked_bootstrap_memory_is_bounded_by_the_chunk():
    rng = np.random.default_rng(0)
    intact, ablated = rng.random(4000) < 0.5, rng.random(4000) < 0.5
    whole = _peak_bytes(lambda: paired_bootstrap_ci(intact, ablated, n_boot=1000, max_elements=4_000_000))
    chunked = _peak_bytes(lambda: paired_bootstrap_ci(intact, ablated, n_boot=1000, max_elements=1 << 15))
    assert whole > 32_000_000  # 4M int64 indices in one array: the measurement sees it
    assert chunked < 1_000_000  # ≈ 32 768 indices (256 KiB) plus their gathered values and the n_boot gains


def test_undefined_statistics_are_none_with_a_reason():
    empty = compare_paired(np.array([], dtype=bool), np.array([], dtype=bool), n_boot=100)
    assert empty.n == 0 and (empty.fixes, empty.damage) == (0, 0)
    for name in ("intact_accuracy", "ablated_accuracy", "gain", "relative_error_reduction", "mcnemar_p", "gain_ci"):
        assert getattr(empty, name) is None and "n = 0" in empty.undefined[name]
    perfect = compare_paired(np.ones(10, dtype=bool), np.array([1] * 8 + [0] * 2, dtype=bool), n_boot=200)
    assert perfect.relative_error_reduction is None and "100 %" in perfect.undefined["relative_error_reduction"]
    assert (perfect.gain == pytest.approx(-0.2) and perfect.damage == 2
            and set(perfect.undefined) == {"relative_error_reduction"})
    assert relative_error_reduction(1.0, 0.0) is None
    for cmp in (empty, perfect):
        json.dumps(asdict(cmp), allow_nan=False)  # nothing undefined is written as NaN


def test_defined_statistics_have_no_undefined_entry():
    c = compare_paired(np.array([1, 0, 0, 1], dtype=bool), np.array([1, 1, 0, 1], dtype=bool), n_boot=200)
    assert c.undefined == {} and c.relative_error_reduction == pytest.approx(0.25 / 0.5)
    with pytest.raises(CeltkError, match="equal-length"):
        compare_paired(np.ones(3, dtype=bool), np.ones(4, dtype=bool))


def test_defined_passes_values_through_and_refuses_none_by_name():
    empty = compare_paired(np.zeros(0, bool), np.zeros(0, bool), n_boot=10)
    assert defined(0.0, "gain") == 0.0  # a zero statistic is defined (not mistaken for missing)
    assert defined((0.0, 0.5), "gain CI") == (0.0, 0.5)
    with pytest.raises(CeltkError, match="gain is undefined on an empty comparison"):
        defined(empty.gain, "gain")
