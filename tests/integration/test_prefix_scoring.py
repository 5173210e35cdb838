"""Evaluation passes that run the shared few-shot prefix once per pass (celtk.evaluation.shared_prefix) give, example by
example, what the plain path (every prompt whole) gives: on tiny Llama, Qwen2 (q/k/v biases, grouped KV), Gemma-3
(sliding-window and global layers) models, intact and under each ablation kind and
position set; the prefix runs under each pass's own ablation; the plain path is kept where no prefix is shared, where
the model carries hooks of its own, and when forced; and a tiny `celtk run` and `celtk ablations` write byte-identical
test.json and ablation-kinds.json with the shared prefix and without it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _support import logprobs as _logprobs
from _support import make_tiny

from celtk.ablation import ablate
from celtk.evaluation import evaluate, shared_prefix
from celtk.evaluation.prompts import prepare
from celtk.evaluation.results import EvalConfig
from celtk.evaluation.scoring import ablation_for
from celtk.evaluation.shared_prefix import PLAIN_ENV, prefix_to_share, score_pass
from celtk.heads import HeadSet
from celtk.tasks import get_task, make_splits

ARCHS = ("llama", "qwen2", "gemma3")
HEAD_SETS = ("L0H1", "L1H0,L2H3")


@pytest.fixture(scope="module", params=ARCHS)
def arch_model(request, smol_tokenizer):
    return make_tiny(request.param, smol_tokenizer)


def _arithmetic(model, fewshot=3):
    task = get_task("arithmetic")
    splits = make_splits(task, 8, 6, fewshot=fewshot, seed=1)
    return task, splits, prepare(model, task, splits.heldout, splits.shots)


def _kinds(model, task, splits):
    """Every kind, the reference ones measured on the discovery set under the same shots, and ablation at the
    prefix's and at the example's positions only."""
    def measured(kind, positions="all"):
        return ablation_for(model, kind, task, splits.discovery, splits.shots, positions=positions)

    return {"zero": "zero", "scale:0.5": "scale:0.5", "mean": measured("mean"), "resample": measured("resample"),
            "zero@example": measured("zero", "example"), "mean@prefix": measured("mean", "prefix")}


def logprobs(result):
    return np.array(_logprobs(result), dtype=float)


def _count_prefix_passes(monkeypatch):
    """The token lists of every shared prefix pass from now on."""
    calls: list = []
    prefix_kv = shared_prefix._prefix_kv

    def counted(model, tokens, rows):
        calls.append(tokens)
        return prefix_kv(model, tokens, rows)

    monkeypatch.setattr(shared_prefix, "_prefix_kv", counted)
    return calls


def _same(shared, plain, what):
    np.testing.assert_allclose(logprobs(shared), logprobs(plain), rtol=0, atol=1e-5, err_msg=what)
    assert np.array_equal(shared.correct, plain.correct), what


def test_shared_prefix_pass_equals_the_plain_pass_example_by_example(arch_model):
    task, splits, prepared = _arithmetic(arch_model)
    assert prefix_to_share(arch_model, prepared) >= 60  # three shots: most of each ~90-token prompt
    intact = score_pass(arch_model, prepared, 3)
    _same(intact, score_pass(arch_model, prepared, 3, share_prefix=False), "intact")
    for name, kind in _kinds(arch_model, task, splits).items():
        for heads in HEAD_SETS:
            assert prefix_to_share(arch_model, prepared, heads, kind) >= 60, (name, heads)
            shared = score_pass(arch_model, prepared, 3, heads, kind)
            plain = score_pass(arch_model, prepared, 3, heads, kind, share_prefix=False)
            _same(shared, plain, f"{name} {heads}")
            if heads == "L0H1":  # it bites under every kind (later heads at prefix positions only may not)
                assert np.abs(logprobs(plain) - logprobs(intact)).max() > 1e-3, name


def test_the_prefix_runs_under_each_passs_own_ablation(tiny_llama, monkeypatch):
    """A head of layer 0 changes the prefix's keys and values in layers 1 and 2: a prefix computed intact and
    shared with the ablated examples scores them wrongly, so every pass computes its own."""
    _, _, prepared = _arithmetic(tiny_llama)
    plain = score_pass(tiny_llama, prepared, 4, "L0H1", share_prefix=False)
    calls = _count_prefix_passes(monkeypatch)
    _same(score_pass(tiny_llama, prepared, 4, "L0H1"), plain, "own prefix")
    score_pass(tiny_llama, prepared, 4)
    assert len(calls) == 2  # one prefix pass per ablation setting (here: ablated, then intact)

    hooks = shared_prefix._Rows.hooks
    monkeypatch.setattr(shared_prefix._Rows, "hooks",  # the wrong way: the prefix left intact
                        lambda self, model, requests, start, pos: hooks(self, model, requests, start, pos)
                        if requests is not None else hooks(shared_prefix._Rows(prepared, HeadSet(), self.kind),
                                                           model, requests, start, pos))
    wrong = score_pass(tiny_llama, prepared, 4, "L0H1")
    assert np.abs(logprobs(wrong) - logprobs(plain)).max() > 1e-3


def test_the_plain_path_is_kept_where_no_prefix_is_shared_or_hooks_are_on(tiny_llama, monkeypatch):
    task, splits, prepared = _arithmetic(tiny_llama)
    _, _, no_shots = _arithmetic(tiny_llama, fewshot=0)
    assert prefix_to_share(tiny_llama, no_shots) == 0  # "Question: What is" is below the floor
    assert prefix_to_share(tiny_llama, prepared, share_prefix=False) == 0
    monkeypatch.setenv(PLAIN_ENV, "1")
    assert prefix_to_share(tiny_llama, prepared) == 0
    monkeypatch.delenv(PLAIN_ENV)
    # references prompted under other shots share only the prompt's opening with these examples
    other_shots = make_splits(task, 8, 6, fewshot=3, seed=7).shots
    foreign = ablation_for(tiny_llama, "resample", task, splits.discovery, other_shots)
    assert prefix_to_share(tiny_llama, prepared, "L1H0", foreign) < prefix_to_share(tiny_llama, prepared)
    _same(score_pass(tiny_llama, prepared, 4, "L1H0", foreign),
          score_pass(tiny_llama, prepared, 4, "L1H0", foreign, share_prefix=False), "foreign references")
    # hooks of the caller's own (here an outer ablate) would see only the examples' positions: whole prompts
    config = EvalConfig(batch_size=4)
    with ablate(tiny_llama, "L2H0"):
        assert prefix_to_share(tiny_llama, prepared) == 0
        outer = evaluate(tiny_llama, task, splits.heldout, splits.shots, "L0H1", config)
    both = evaluate(tiny_llama, task, splits.heldout, splits.shots, "L0H1,L2H0", config)
    _same(outer, both, "outer hooks")


def test_evaluate_shares_the_prefix_unless_forced_plain(tiny_llama, monkeypatch):
    task, splits, _ = _arithmetic(tiny_llama)
    calls = _count_prefix_passes(monkeypatch)
    mean = ablation_for(tiny_llama, "mean", task, splits.discovery, splits.shots)
    shared = evaluate(tiny_llama, task, splits.heldout, splits.shots, "L1H2", EvalConfig(batch_size=3), ablation=mean)
    assert len(calls) == 1
    monkeypatch.setenv(PLAIN_ENV, "1")
    plain = evaluate(tiny_llama, task, splits.heldout, splits.shots, "L1H2", EvalConfig(batch_size=3), ablation=mean)
    assert len(calls) == 1
    _same(shared, plain, "evaluate")


def test_a_tiny_run_writes_byte_identical_test_and_ablations_with_and_without_the_shared_prefix(
        planted, tmp_path, monkeypatch):
    from celtk.run import RunConfig, run_ablation_kinds, run_screen, run_select, run_test

    model, task = planted
    lines = [json.loads(line) for line in Path(task.removeprefix("jsonl:")).read_text().splitlines()]
    for line in lines[-5:]:  # the planted task's last lines as the shot pool: three shots open every prompt
        line["split"] = "fewshot"
    path = tmp_path / "shots.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = RunConfig(model="tiny-planted", task=f"jsonl:{path}", discovery=40, heldout=40, fewshot=3, batch_size=8,
                       p=4, k=2)
    calls = _count_prefix_passes(monkeypatch)
    counted = {}
    for mode in ("shared", "plain"):
        if mode == "plain":
            monkeypatch.setenv(PLAIN_ENV, "1")
        monkeypatch.setenv("CELTK_LEDGER", str(tmp_path / f"ledger-{mode}.jsonl"))  # one held-out set, two runs
        before = len(calls)
        run_screen(config, tmp_path / mode, model=model)
        run_select(tmp_path / mode, p=4, k=2, model=model, force=True)  # with shots nothing gains: freeze anyway
        run_test(tmp_path / mode, model=model, n_boot=200)
        run_ablation_kinds(tmp_path / mode, model=model, n_boot=200, alphas=(0.5,))
        counted[mode] = len(calls) - before
    # the test: intact and ablated; the ablations: at least intact, zero, mean, resample, scale:0.5
    assert counted["shared"] >= 2 + 5 and counted["plain"] == 0
    for name in ("test.json", "ablation-kinds.json", "selection.json", "screen.json"):
        assert (tmp_path / "shared" / name).read_bytes() == (tmp_path / "plain" / name).read_bytes(), name
