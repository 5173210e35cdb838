"""The real packaged model: offline load, a sensible answer, ablation invariants,
teacher-forced scoring == greedy generation, cached screener == plain path."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from _support import logprobs

from celtk.ablation import ablate, zero_output_columns
from celtk.evaluation import evaluate
from celtk.evaluation.prompts import prepare
from celtk.evaluation.results import EvalConfig
from celtk.heads import Head, HeadSet
from celtk.screening.cached import CachedScreener
from celtk.screening.plain import screen_plain
from celtk.tasks import get_task, make_splits

pytestmark = pytest.mark.slow


def test_loads_offline_and_answers_sensibly(tmp_path):
    code = (
        "from celtk import load_model\n"
        "from celtk.evaluation.generation import generate_greedy\n"
        "m = load_model('smollm2-135m')\n"
        "assert (m.n_layers, m.n_heads, m.n_kv_heads, m.d_head) == (30, 9, 3, 64), m.describe()\n"
        "print(generate_greedy(m, ['Question: What is 2 plus 3?\\nAnswer:'], 3)[0])\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1].strip().startswith("5")


def test_kv_cached_generation_equals_uncached(smollm2):
    # guards the transformers/TransformerLens pairing: a dropped KV cache changes these tokens
    ids = smollm2.tokenizer("Question: What is 7 plus 2?\nAnswer:", return_tensors="pt")
    with torch.no_grad():
        a = smollm2.hf_model.generate(**ids, max_new_tokens=6, do_sample=False, use_cache=True)
        b = smollm2.hf_model.generate(**ids, max_new_tokens=6, do_sample=False, use_cache=False)
    assert torch.equal(a, b)


def test_hook_equals_weight_zeroing_on_real_model(smollm2):
    from transformers import AutoModelForCausalLM

    heads = HeadSet.parse("L3H4,L17H0,L29H8")
    tokens = smollm2.tokenizer("Question: What is 98 plus 45?\nAnswer: 143", return_tensors="pt").input_ids
    with torch.no_grad(), ablate(smollm2, heads):
        hooked = smollm2.bridge(tokens)
    plain = AutoModelForCausalLM.from_config(smollm2.hf_model.config, dtype=torch.float32,
                                             attn_implementation="eager").eval()
    plain.load_state_dict(zero_output_columns(smollm2, smollm2.hf_state_dict(), heads))
    with torch.no_grad():
        assert (plain(tokens).logits - hooked).abs().max().item() <= 1e-5
        assert (smollm2.bridge(tokens) - hooked).abs().max().item() > 1e-3


def test_teacher_forced_equals_greedy_generation(smollm2):
    """Stop condition: generate exactly as many tokens as the target has; correct iff they are
    the target's tokens. 100 examples over all subtasks, three-shot."""
    task = get_task("arithmetic")
    splits = make_splits(task, 100, 0, fewshot=3, seed=1)
    result = evaluate(smollm2, task, splits.discovery, splits.shots, config=EvalConfig(batch_size=50))
    prepared = prepare(smollm2, task, splits.discovery, splits.shots)
    agree = []
    for length in sorted({len(r.continuation) for r in prepared.requests}):
        idx = [i for i, r in enumerate(prepared.requests) if len(r.continuation) == length]
        texts = [prepared.prompts[i] for i in idx]
        tok = smollm2.tokenizer
        tok.padding_side = "left"
        enc = tok(texts, return_tensors="pt", padding=True)
        tok.padding_side = "right"
        with torch.no_grad():
            gen = smollm2.hf_model.generate(**enc, do_sample=False, max_new_tokens=length,
                                            pad_token_id=tok.pad_token_id)
        for row, i in enumerate(idx):
            generated = gen[row, enc.input_ids.shape[1]:].tolist()
            agree.append(((generated == list(prepared.requests[i].continuation)), result.examples[i].correct))
    assert len(agree) == 100
    assert all(g == t for g, t in agree), sum(g != t for g, t in agree)
    assert 0 < sum(t for _, t in agree) < 100  # a non-trivial mix of right and wrong


def test_cached_screener_equals_plain_on_sample_heads(smollm2):
    task = get_task("arithmetic:2da")
    splits = make_splits(task, 24, 0, fewshot=3, seed=1)
    prepared = prepare(smollm2, task, splits.discovery, splits.shots)
    rng = np.random.default_rng(0)
    sample = [HeadSet((Head(int(l), int(h)),))
              for l, h in zip(rng.integers(0, 30, 8), rng.integers(0, 9, 8), strict=True)]
    sample.append(HeadSet.parse("L4H2,L20H7"))
    screener = CachedScreener(smollm2, prepared, batch_size=12)
    assert screener.prefix_len > 20
    _, cached = screener.run(sample)
    _, plain = screen_plain(smollm2, prepared, sample, batch_size=12)
    for s in sample:
        assert np.array_equal(cached[s].correct, plain[s].correct), s
        np.testing.assert_allclose(logprobs(cached[s]), logprobs(plain[s]), atol=1e-4)
