"""Generation-graded screening: the generation screener equals the plain path (``celtk.evaluate``
under ``ablate()``, one set at a time) on tiny Llama, Qwen2, SmolLM3 and Gemma-3 models, and bad
inputs end cleanly."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from celtk.evaluator import EvalConfig, evaluate, generate_greedy, prepare
from celtk.heads import HeadSet, all_heads
from celtk.screen_generate import GenerationScreener
from celtk.tasks import get_task
from celtk.tasks.jsonl import jsonl_spec

WORDS = "apple river stone cloud music table green seven light paper horse dream".split()
STOP = "e"  # common in random tokens, so rows stop after different numbers of tokens
MAX_NEW = 6


def _tiny(arch, tokenizer):
    from conftest import make_tiny

    return make_tiny(arch, tokenizer, n_layers=2, n_heads=4)


def _self_graded_task(model, tmp_path, n=10, shots=3):
    """Prompts of 1 to 40 words (very different lengths in one batch) and three shots; half the
    targets are the intact model's own greedy answers, so both verdicts occur."""
    rng = random.Random(0)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(rng.choice([1, 3, 20, 40]))) for _ in range(n)]
    fewshot = [{"prompt": " ".join(rng.choice(WORDS) for _ in range(6)), "target": f" {w}", "split": "fewshot"}
               for w in ("snow", "rain", "sun")[:shots]]
    shot_text = "".join(f"{s['prompt']}{s['target']}\n\n" for s in fewshot)
    answers = generate_greedy(model, [shot_text + p for p in prompts], MAX_NEW, [STOP])
    lines = list(fewshot)
    for i, (prompt, answer) in enumerate(zip(prompts, answers)):
        target = answer.strip() if i % 2 == 0 and answer.strip() else "zz"
        lines.append({"id": f"x{i}", "prompt": prompt, "target": target})
    path = tmp_path / "free.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    task = get_task(jsonl_spec(str(path), "generate", stop=(STOP,), max_new_tokens=MAX_NEW))
    pools = task.load_pools()
    return task, pools.discovery, pools.fewshot


def _plain(model, task, examples, shots, heads):
    return evaluate(model, task, examples, shots, heads=heads, config=EvalConfig(batch_size=4))


def _generations(result):
    return [e.extra["generation"] for e in result.examples]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "smollm3", "gemma3"])
def test_generation_screener_equals_plain_path_for_every_head(arch, smol_tokenizer, tmp_path):
    model = _tiny(arch, smol_tokenizer)
    task, examples, shots = _self_graded_task(model, tmp_path)
    sets = [HeadSet((h,)) for h in all_heads(model.n_layers, model.n_heads)]
    sets += [HeadSet.parse("L0H1,L1H3"), HeadSet.parse("L0H0,L0H2,L1H1")]
    plain = {s: _plain(model, task, examples, shots, s) for s in sets}
    intact_plain = _plain(model, task, examples, shots, None)
    assert 0 < intact_plain.correct.sum() < len(examples)  # both verdicts occur
    lengths = {len(e.extra["generation"]) for r in plain.values() for e in r.examples}
    assert len(lengths) > 2  # rows stop at different points
    for share in (False, True):
        prepared = prepare(model, task, examples, shots)
        screener = GenerationScreener(model, prepared, task, batch_size=len(examples), rows_per_pass=3 * len(examples),
                                      share_prefix=share)
        assert (screener.prefix_len > 0) == share
        intact, screened = screener.run(sets)
        assert _generations(intact) == _generations(intact_plain)
        assert np.array_equal(intact.correct, intact_plain.correct)
        for s in sets:
            assert _generations(screened[s]) == _generations(plain[s]), (share, s)
            assert np.array_equal(screened[s].correct, plain[s].correct), (share, s)
            assert [e.extra["new_tokens"] for e in screened[s].examples] == [e.extra["new_tokens"] for e in plain[s].examples]
    assert any(_generations(plain[s]) != _generations(intact_plain) for s in sets)  # ablations change what is written
