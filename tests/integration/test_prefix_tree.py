"""The cached screener's prefix-tree walk on tiny models: scoring many overlapping head sets together
gives every set the outcome it gets scored alone, bit for bit (the walk changes which rows share a
forward, never a row's arithmetic), on every tiny architecture, with and without the shared
few-shot prefix, through the fused and the bridge replays; it runs the layers the tree counts and
no more; each start layer's sets are reported together, so the memo resumes where it stopped."""

from itertools import combinations

import numpy as np
import pytest
from _support import MORE_ARCHS, TINY_ARCHS, make_tiny

from celtk.evaluation.prompts import prepare
from celtk.evaluation.results import EvalResult
from celtk.heads import HeadSet
from celtk.screening.cached import CachedScreener
from celtk.screening.fused import fused_layers
from celtk.screening.prefix_tree import flat_layer_evaluations, layer_evaluations, prefix_tree
from celtk.store.memo import SetMemo
from celtk.tasks import get_task, make_splits

# heads in three of four layers, two in layer 1: subsets share lower heads, some hold two heads of one layer
POOL = HeadSet.parse("L0H1,L1H0,L1H3,L3H1").heads
SETS = [HeadSet(c) for size in (1, 2, 3) for c in combinations(POOL, size)] + [HeadSet()]


@pytest.fixture(scope="module", params=TINY_ARCHS + MORE_ARCHS)
def four_layers(request, smol_tokenizer):
    model = make_tiny(request.param, smol_tokenizer, n_layers=4)
    task = get_task("arithmetic")
    splits = make_splits(task, 10, 0, fewshot=2, seed=2)  # prompts longer than Mistral's 16-token window
    return model, prepare(model, task, splits.discovery, splits.shots)


def _counting(screener):
    """Count the example rows each decoder layer runs on (the shared prefix's one row per node left out)."""
    screener.example_layers = 0
    layer = screener._layer

    def counted(index, hidden, kwargs, rows, copies, cache, mask=None):
        if hidden.shape[0] > copies:
            screener.example_layers += hidden.shape[0]
        return layer(index, hidden, kwargs, rows, copies, cache, mask)

    screener._layer = counted
    return screener


def test_tree_gives_every_set_its_outcome_alone_bit_for_bit(four_layers):
    model, prepared = four_layers
    replays = ("fused", "bridge") if fused_layers(model) is not None else ("bridge",)
    n = len(prepared.requests)
    for share, replay in [(True, r) for r in replays] + [(False, replays[0])]:
        def screener(rows_per_pass):
            return _counting(CachedScreener(model, prepared, batch_size=5, rows_per_pass=rows_per_pass,
                                            share_prefix=share, replay=replay))
        tree = screener(15)  # three nodes to a pass
        intact, together = tree.run(SETS)
        assert (tree.prefix_len > 0) == share and tree.replay == replay
        intact_only = screener(15)
        intact_only.run([])
        advance = n * prefix_tree(SETS, model.n_layers).end  # the intact state, up to its last branch
        assert tree.example_layers - intact_only.example_layers - advance == n * layer_evaluations(SETS, model.n_layers)
        assert layer_evaluations(SETS, model.n_layers) < flat_layer_evaluations(SETS, model.n_layers)
        for heads in SETS:
            alone_intact, alone = screener(5).run([heads])
            assert alone_intact.to_json() == intact.to_json()
            assert alone[heads].to_json() == together[heads].to_json(), (share, replay, heads)
        changed = [h for h in SETS if [e.logprob for e in together[h].examples] != [e.logprob for e in intact.examples]]
        assert changed == SETS[:-1]  # every ablation bites; the null ablation (last) equals the intact model


def test_each_start_layer_is_reported_whole_and_the_memo_resumes_after_it(tiny_llama, tmp_path):
    task = get_task("arithmetic")
    splits = make_splits(task, 8, 0, fewshot=2, seed=1)
    prepared = prepare(tiny_llama, task, splits.discovery, splits.shots)
    sets = [HeadSet(c) for size in (1, 2) for c in combinations(HeadSet.parse("L0H1,L1H0,L1H3,L2H2").heads, size)]
    reported: dict[int, list[HeadSet]] = {}

    def on_layer(layer: int, done: dict[HeadSet, EvalResult]) -> None:
        reported.setdefault(layer, sorted(done))

    _, reference = CachedScreener(tiny_llama, prepared, batch_size=4).run(sets, on_layer=on_layer)
    assert reported == {layer: sorted(s for s in sets if s.heads[0].layer == layer) for layer in (0, 1, 2)}

    class Interrupted(Exception):
        pass

    def stops_after_layer_0():
        screener = CachedScreener(tiny_llama, prepared, batch_size=4)
        score = screener._score_start_layer

        def once(prefix, states, layer, nodes, tick=None):
            if layer > 0:
                raise Interrupted
            return score(prefix, states, layer, nodes, tick)

        setattr(screener, "_score_start_layer", once)  # this instance only: a test double
        return screener

    intact = reference[sets[0]].correct * 0 == 0  # any bool [n] of the right length
    with pytest.raises(Interrupted):
        SetMemo(tmp_path, intact, stops_after_layer_0)(sets)
    asked: list[HeadSet] = []

    def recording():
        screener = CachedScreener(tiny_llama, prepared, batch_size=4)
        run = screener.run

        def recorded(todo, **kw):
            asked.extend(todo)
            return run(todo, **kw)

        setattr(screener, "run", recorded)  # this instance only: a test double
        return screener

    resumed = SetMemo(tmp_path, intact, recording)(sets)
    assert sorted(asked) == sorted(s for s in sets if s.heads[0].layer > 0)  # layer 0's sets came from its part
    assert all(np.array_equal(resumed[s], reference[s].correct) for s in sets)


@pytest.mark.parametrize("kind", ["mean", "resample", "scale:-0.5"])
def test_tree_under_every_ablation_kind_gives_each_set_its_outcome_alone(kind, smol_tokenizer):
    """Mean, resample and scale travel as per-row specs through the tree's groups (each group's specs made
    for its own batch, width and size); every set still gets, bit for bit, what it gets scored alone."""
    from celtk.evaluation.scoring import ablation_for

    model = make_tiny("llama", smol_tokenizer, n_layers=4)
    task = get_task("arithmetic")
    splits = make_splits(task, 10, 0, fewshot=2, seed=2)
    prepared = prepare(model, task, splits.discovery, splits.shots)
    ablation = ablation_for(model, kind, task, splits.heldout or splits.discovery, splits.shots, seed=3)
    for share in (True, False):
        def screener(rows_per_pass):
            return CachedScreener(model, prepared, batch_size=5, rows_per_pass=rows_per_pass, share_prefix=share,
                                  ablation=ablation)
        intact, together = screener(15).run(SETS)
        for heads in SETS:
            _, alone = screener(5).run([heads])
            assert alone[heads].to_json() == together[heads].to_json(), (kind, share, heads)
        assert np.array_equal(together[HeadSet()].correct, intact.correct)  # the null ablation under this kind
        changed = [h for h in SETS[:-1]
                   if [e.logprob for e in together[h].examples] != [e.logprob for e in intact.examples]]
        assert changed == SETS[:-1]


def test_the_walk_reports_its_work_within_layers_weighed_by_what_each_layer_replays(tiny_llama):
    """on_work counts decoder-layer rows: it comes after the intact pass and after every group of sets over a batch
    (so within a start layer), never goes back, ends at its total, and a set replayed from layer 0 weighs three
    times one replayed from layer 2 (of 3). The results are those of a run without it."""
    task = get_task("arithmetic")
    splits = make_splits(task, 8, 0, fewshot=2, seed=1)
    prepared = prepare(tiny_llama, task, splits.discovery, splits.shots)
    sets = [HeadSet.parse(name) for name in ("L0H0", "L0H1", "L2H0", "L2H1")]
    calls: list[tuple[int, int]] = []
    layers: list[int] = []
    screener = CachedScreener(tiny_llama, prepared, batch_size=4, rows_per_pass=4)
    _, scored = screener.run(sets, on_work=lambda done, total: calls.append((done, total)),
                             on_layer=lambda layer, _: layers.append(len(calls)))
    total = calls[0][1]
    assert all(t == total for _, t in calls) and calls[-1][0] == total
    done = [d for d, _ in calls]
    assert done == sorted(done) and len(calls) > 1 + len(set(s.heads[0].layer for s in sets))
    # 2 batches of 4 examples; intact: 3 layers per batch; layer-0 sets: 3 layers each, layer-2 sets: 1 layer each
    assert total == 2 * (3 + 2 * 3 + 2 * 1)
    after_layer0 = calls[layers[0] - 1][0]
    assert after_layer0 - calls[0][0] == 3 * (total - after_layer0)
    _, plain = CachedScreener(tiny_llama, prepared, batch_size=4, rows_per_pass=4).run(sets)
    assert all(np.array_equal(scored[s].correct, plain[s].correct) for s in sets)
