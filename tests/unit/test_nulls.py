"""The search null's fast path against the plain search, and its parts by hand: the subsets it enumerates, the
changes beyond a set's heads' union it adds, and where a racing screen left examples unscored."""

import importlib
import json
from pathlib import Path

import numpy as np
import pytest

from celtk.heads import HeadSet, all_heads
from celtk.search import nulls
from celtk.search.null_levels import AdditiveWorld, IndependentWorld, level_bound, no_effect_search
from celtk.search.nulls import beyond_union, relabelled_best, search_null, subset_members
from celtk.search.scores import HeadScore, head_ids
from celtk.search.selection import subsets
from celtk.search.strategies import algorithm1


def _tie_ranks(heads, tie_break):
    ranks = sorted(range(len(heads)), key=lambda i: head_ids(HeadSet((heads[i],)), tie_break))
    order = np.empty(len(heads), dtype=np.int64)
    order[ranks] = np.arange(len(heads))
    return order


def _plain(discordant, signs, p, k, heads, tie_break, extra=None):
    """Algorithm 1 itself on the relabelled world: intact wrong where the sign is +1, every candidate flips its
    heads' union of discordant examples (or-ed with ``extra`` per subset, in subset order)."""
    intact = signs < 0
    by_set = {}

    def evaluate(sets):
        out = {}
        for s in sets:
            rows = [heads.index(h) for h in s]
            union = discordant[rows].any(axis=0)
            if extra is not None:
                pool_rows = sorted(rows, key=lambda r: chosen.index(r))
                union = union | extra[order_of_subset[tuple(pool_rows)]]
            out[s] = intact ^ union
            by_set[s] = out[s]
        return out

    single = [HeadScore.compare(HeadSet((h,)), intact ^ discordant[i], intact) for i, h in enumerate(heads)]
    order = _tie_ranks(heads, tie_break)
    chosen = sorted(range(len(heads)), key=lambda i: ((-single[i].gain, single[i].damage), order[i]))[:p]
    order_of_subset = {tuple(row[: len(set(row))]): j for j, row in enumerate(
        [tuple(chosen[m] for m in members) for members in subset_members(p, k)])}
    best = algorithm1(single, intact, evaluate, k=k, p=p, tie_break=tie_break).best
    return best.gain, best.damage


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("tie_break", ["numeric", "paper"])
def test_relabelled_best_is_algorithm1_on_the_relabelled_outcomes(k, tie_break):
    rng = np.random.default_rng(k)
    heads = all_heads(12, 2)  # L10.. and L2.. differ under the two tie-breaks
    n, p = 15, 4
    # few examples and sparse changes: many heads tie on (gain, damage), so the pool's tie-break decides
    discordant = rng.random((len(heads), n)) < 0.12
    signs = np.where(rng.random((6, n)) < 0.5, 1, -1)
    gain, damage = relabelled_best(discordant, signs, p, k, _tie_ranks(heads, tie_break))
    for r in range(len(signs)):
        assert (gain[r], damage[r]) == _plain(discordant, signs[r], p, k, heads, tie_break)
    # one matrix per repeat gives the same as the shared one
    per_repeat = np.broadcast_to(discordant, (len(signs), *discordant.shape)).copy()
    assert all(np.array_equal(a, b) for a, b in zip(relabelled_best(per_repeat, signs, p, k,
                                                                    _tie_ranks(heads, tie_break)), (gain, damage),
                                                                strict=True))


def test_relabelled_best_with_changes_beyond_the_union_is_the_plain_search_with_them():
    rng = np.random.default_rng(3)
    heads = all_heads(4, 3)
    n, p, k = 20, 4, 3
    discordant = rng.random((len(heads), n)) < 0.1
    signs = np.where(rng.random((4, n)) < 0.5, 1, -1)
    extra = rng.random((4, len(subset_members(p, k)), n)) < 0.2
    gain, damage = relabelled_best(discordant, signs, p, k, _tie_ranks(heads, "numeric"), extra)
    for r in range(len(signs)):
        assert (gain[r], damage[r]) == _plain(discordant, signs[r], p, k, heads, "numeric", extra[r])
    # every subset changing every example: its gain is the sum of the signs, the best at least that
    everything = np.ones_like(extra)
    gain, _ = relabelled_best(discordant, signs, p, k, _tie_ranks(heads, "numeric"), everything)
    assert np.all(gain >= signs.sum(axis=1))


def test_subset_members_are_the_searchs_subsets_in_its_order():
    pool = list(all_heads(2, 3))[:5]
    rows = subset_members(5, 3)
    assert [HeadSet(tuple(pool[m] for m in dict.fromkeys(row))) for row in rows] == subsets(pool, 3)
    assert subset_members(4, 1).shape == (0, 1)


def test_beyond_union_by_hand():
    discordant = np.array([[1, 1, 0, 0, 0, 0, 0, 0, 0, 0],
                           [0, 1, 1, 0, 0, 0, 0, 0, 0, 0],
                           [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]], dtype=bool)
    # pair (0, 1): union 3 of 10, the set changed 5 -> 2 beyond it of the 7 outside; pair (0, 2): union 3, the set
    # changed 2 (fewer than the union: nothing beyond it counted); triple: union 4, changed 7 -> 3 of 6
    rates = beyond_union(discordant, [[0, 1], [0, 2], [0, 1, 2], [1]], [5, 2, 7, 4])
    assert rates == pytest.approx({2: 2 / 14, 3: 3 / 6})


def test_search_null_is_reproducible_in_any_chunking(monkeypatch):
    rng = np.random.default_rng(0)
    discordant = rng.random((30, 40)) < 0.1
    rates = {2: 0.05, 3: 0.1}
    first = search_null(discordant, 6, 3, 50, 7, n_held=80, extra_rate=rates)
    monkeypatch.setattr(nulls, "CHUNK_ELEMENTS", 1)  # one repeat at a time
    again = search_null(discordant, 6, 3, 50, 7, n_held=80, extra_rate=rates)
    assert all(np.array_equal(a, b) for a, b in zip(first[:2], again[:2], strict=True))
    assert first[2] == again[2] == 30 + 20 + 15  # heads, then the pool's pairs and triples
    gains, held, _ = first
    assert np.all(gains >= 0) and set(np.round(gains * 40, 6)) <= set(range(41))  # whole examples
    assert np.all(np.abs(held) <= 1)


def test_search_null_draws_an_unscored_example_at_the_heads_own_rate():
    rng = np.random.default_rng(1)
    discordant = rng.random((10, 30)) < 0.15
    discordant[4] = True  # head 4 changes every example it was scored on ...
    scored = np.ones_like(discordant)
    scored[4, 10:] = False  # ... the first 10: its unscored examples are drawn at rate 1, i.e. all changed
    args = (3, 2, 40, 5)
    assert all(np.array_equal(a, b) for a, b in zip(search_null(discordant, *args, n_held=30, scored=scored)[:1],
                                                    search_null(discordant, *args, n_held=30)[:1], strict=True))
    discordant[5], scored[5] = False, False  # never scored: drawn at rate 0, i.e. never changed
    hidden = discordant.copy()
    hidden[5] = rng.random(30) < 0.5  # whatever it holds where unscored is not read
    assert np.array_equal(search_null(hidden, *args, n_held=30, scored=scored)[0],
                          search_null(discordant, *args, n_held=30, scored=scored)[0])


def test_the_simulated_worlds_are_what_they_say():
    independent = IndependentWorld(5, 2000, salt=11)
    sets = np.array([[0, -1], [1, -1], [0, 1], [1, 0]])
    out = independent.outcomes(sets)
    assert np.array_equal(out[2], out[3])  # one set, whatever its order: one draw
    assert np.array_equal(independent.outcomes(sets[:1])[0], out[0])  # the same set always draws the same examples
    assert abs((out[:3] != independent.intact).mean() - 0.15) < 0.02 and independent.intact.mean() == 0.5
    additive = AdditiveWorld.draw(3, 50, np.random.default_rng(0))
    both = additive.margin + additive.shift[0] + additive.shift[2] > 0
    alone = additive.margin + additive.shift[2] > 0
    assert np.array_equal(additive.outcomes(np.array([[0, 2], [2, -1]])), [both, alone])


def test_no_effect_search_p_values_are_shares_of_draws():
    p = no_effect_search("additive", 0, n_heads=20, n=30, p=4, k=2, repeats=9)
    assert set(p) == {"search", "permutation", "random-heads", "random-heads-control"}
    assert all(round(v * 10) == v * 10 and 0.1 <= v <= 1 for v in p.values())  # (1 + count) / (1 + 9)
    assert level_bound(100) == pytest.approx(0.05 + 3 * np.sqrt(0.05 * 0.95 / 100))


def test_the_docs_table_of_null_levels_is_the_benchmarks_json(monkeypatch):
    """docs/selection-holds.md shows what benchmarks/null_levels.py last wrote to docs/null-levels.json, and
    every null that prints a p-value (the search null) is within 5 % + 3 SE under every simulated model."""
    root = Path(__file__).resolve().parents[2]
    monkeypatch.syspath_prepend(str(root / "benchmarks"))
    bench = importlib.import_module("null_levels")
    data = json.loads(bench.DATA.read_text())
    page = bench.PAGE.read_text()
    assert f"{bench.START}\n{bench.table(data)}\n\n{bench.caption(data)}\n{bench.END}" in page
    assert set(data["models"]) >= {"independent", "additive"} and data["bound"] == level_bound(data["sims"])
    assert all(data["rates"][model]["search"] <= data["bound"] for model in data["models"])
