"""Generation-graded screening: the generation screener equals the plain path (``celtk.evaluate``
under ``ablate()``, one set at a time) on tiny Llama, Qwen2, SmolLM3, Gemma-3 and GPT-2 models, and bad
inputs end cleanly."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from celtk.evaluation import evaluate
from celtk.evaluation.generation import generate_greedy
from celtk.evaluation.prompts import prepare
from celtk.evaluation.results import EvalConfig
from celtk.heads import HeadSet, all_heads
from celtk.screening.generation import GenerationScreener
from celtk.tasks import get_task
from celtk.tasks.jsonl import jsonl_spec

WORDS = ["apple", "river", "stone", "cloud", "music", "table", "green", "seven", "light", "paper", "horse", "dream"]
STOP = "e"  # common in random tokens, so rows stop after different numbers of tokens
MAX_NEW = 6


def _tiny(arch, tokenizer):
    from _support import make_tiny

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
    for i, (prompt, answer) in enumerate(zip(prompts, answers, strict=True)):
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


@pytest.mark.parametrize("arch", ["llama", "qwen2", "smollm3", "gemma3", "gpt2"])
def test_generation_screener_equals_plain_path_for_every_head(arch, smol_tokenizer, tmp_path):
    model = _tiny(arch, smol_tokenizer)
    task, examples, shots = _self_graded_task(model, tmp_path)
    sets = [HeadSet((h,)) for h in all_heads(model.n_layers, model.n_heads)]
    sets += [HeadSet.parse("L0H1,L1H3"), HeadSet.parse("L0H0,L0H2,L1H1")]
    plain = {s: _plain(model, task, examples, shots, s) for s in sets}
    intact_plain = _plain(model, task, examples, shots, HeadSet())
    assert 0 < intact_plain.correct.sum() < len(examples)  # both verdicts occur
    lengths = {len(e.extra["generation"]) for r in plain.values() for e in r.examples}
    assert len(lengths) > 2  # rows stop at different points
    for share in (False, True):
        prepared = prepare(model, task, examples, shots)
        # four sets per chunk: one chunk holds sets starting in layers 0 and 1, decoded as one batch
        screener = GenerationScreener(model, prepared, task, batch_size=len(examples), rows_per_pass=4 * len(examples),
                                      share_prefix=share)
        assert (screener.prefix_len > 0) == share
        calls: list[tuple[int, set]] = []
        intact, screened = screener.run(sets, on_layer=lambda layer, done: calls.append((layer, set(done))))
        assert [layer for layer, _ in calls] == [0, 1] and set().union(*(d for _, d in calls)) == set(sets)
        assert _generations(intact) == _generations(intact_plain)
        assert np.array_equal(intact.correct, intact_plain.correct)
        for s in sets:
            assert _generations(screened[s]) == _generations(plain[s]), (share, s)
            assert np.array_equal(screened[s].correct, plain[s].correct), (share, s)
            assert ([e.extra["new_tokens"] for e in screened[s].examples]
                    == [e.extra["new_tokens"] for e in plain[s].examples])
    assert any(_generations(plain[s]) != _generations(intact_plain) for s in sets)  # ablations change what is written


def _screen_and_plain(model, task, examples, sets, **kwargs):
    screener = GenerationScreener(model, prepare(model, task, examples), task, **kwargs)
    intact, screened = screener.run(sets)
    plain = {s: _plain(model, task, examples, (), s) for s in sets}
    return intact, screened, plain, screener


@pytest.mark.parametrize("stop", [(), ("\x00never",)])
def test_generation_without_a_reachable_stop_is_bounded_by_max_new_tokens(smol_tokenizer, tmp_path, stop):
    """A tiny model has no EOS and never writes the stop: every row runs to exactly the token limit."""
    model = _tiny("llama", smol_tokenizer)
    assert model.hf_model.generation_config.eos_token_id is None
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"prompt": " ".join(WORDS[:n]), "target": "zz"}) + "\n" for n in (1, 5, 12)))
    task = get_task(jsonl_spec(str(path), "generate", stop=stop, max_new_tokens=5))
    examples = task.load_pools().discovery
    sets = [HeadSet.parse("L0H1"), HeadSet.parse("L1H2")]
    intact, screened, plain, screener = _screen_and_plain(model, task, examples, sets, batch_size=2)
    for result in [intact, *screened.values(), *plain.values()]:
        assert [e.extra["new_tokens"] for e in result.examples] == [5, 5, 5]
        assert not result.correct.any() and all(e.extra["generation"] for e in result.examples)
    assert screener.new_tokens == 5 * 3 * 3
    for s in sets:
        assert _generations(screened[s]) == _generations(plain[s])


def test_eos_ends_a_row_early_in_both_paths(smol_tokenizer, tmp_path):
    model = _tiny("qwen2", smol_tokenizer)
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"prompt": " ".join(WORDS[:n]), "target": "zz"}) + "\n" for n in (2, 9)))
    task = get_task(jsonl_spec(str(path), "generate", stop=(), max_new_tokens=6))
    examples = task.load_pools().discovery
    first = generate_greedy(model, [examples[1].context], 1)[0]
    model.hf_model.generation_config.eos_token_id = smol_tokenizer(first).input_ids[0]  # row 1's first token ends it
    try:
        intact, screened, plain, _ = _screen_and_plain(model, task, examples, [HeadSet.parse("L1H0")], batch_size=2)
        assert intact.examples[1].extra["new_tokens"] == 1 and intact.examples[0].extra["new_tokens"] > 1
        assert _plain(model, task, examples, (), HeadSet()).examples[1].extra["new_tokens"] == 1
        s = HeadSet.parse("L1H0")
        assert [e.extra for e in screened[s].examples] == [e.extra for e in plain[s].examples]
    finally:
        model.hf_model.generation_config.eos_token_id = None


def test_string_graded_task_needs_no_code_opt_in_and_screener_refuses_scored_tasks(tiny_llama, monkeypatch, tmp_path):
    from celtk.errors import ConfigError

    monkeypatch.delenv("CELTK_ALLOW_CODE_EXEC", raising=False)
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "target": "2"}) + "\n")
    task = get_task(jsonl_spec(str(path), "generate", max_new_tokens=2))
    result = evaluate(tiny_llama, task, task.load_pools().discovery)  # no SandboxRefusedError: nothing is executed
    assert "generation" in result.examples[0].extra
    scored = get_task(f"jsonl:{path}")
    with pytest.raises(ConfigError, match="needs a generation-graded task"):
        GenerationScreener(tiny_llama, prepare(tiny_llama, scored, scored.load_pools().discovery), scored)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_generation_screener_equals_plain_path_under_mean_and_scale(arch, smol_tokenizer, tmp_path, monkeypatch):
    from celtk.evaluation.scoring import ablation_for

    model = _tiny(arch, smol_tokenizer)
    task, examples, shots = _self_graded_task(model, tmp_path)
    sets = [HeadSet((h,)) for h in all_heads(model.n_layers, model.n_heads)] + [HeadSet.parse("L0H1,L1H3")]
    for kind in ("mean", "scale:-1.0"):
        ablation = ablation_for(model, kind, task, examples[:5], shots)  # prompts the generations start from
        plain = {s: evaluate(model, task, examples, shots, s, EvalConfig(batch_size=4), ablation=ablation)
                 for s in sets}
        zeroed = {s: _plain(model, task, examples, shots, s) for s in sets}
        assert any(_generations(plain[s]) != _generations(zeroed[s]) for s in sets)  # the kind is not zeroing
        for share in (False, True):
            screener = GenerationScreener(model, prepare(model, task, examples, shots), task, batch_size=len(examples),
                                          rows_per_pass=4 * len(examples), share_prefix=share, ablation=ablation)
            _, screened = screener.run(sets)
            for s in sets:
                assert _generations(screened[s]) == _generations(plain[s]), (kind, share, s)
                assert np.array_equal(screened[s].correct, plain[s].correct), (kind, share, s)
    resample = ablation_for(model, "resample", task, examples[:5], shots)
    from celtk.errors import ConfigError

    with pytest.raises(ConfigError, match="Resample ablation is not offered for generation-graded tasks"):
        GenerationScreener(model, prepare(model, task, examples, shots), task, ablation=resample)
    with pytest.raises(ConfigError, match="Resample ablation is not offered for generation-graded tasks"):
        evaluate(model, task, examples, shots, HeadSet.parse("L0H1"), ablation=resample)
    import celtk.run.session
    from celtk.run import RunConfig
    from celtk.run.session import Session
    from celtk.tasks import Splits

    session = Session(RunConfig(ablation="resample"), model, task,
                      Splits(examples[:5], examples[5:], list(shots), "test"))
    # a run refuses before it measures any reference
    monkeypatch.setattr(celtk.run.session, "ablation_for", None)
    with pytest.raises(ConfigError, match="Resample ablation is not offered for generation-graded tasks"):
        session.ablation()
