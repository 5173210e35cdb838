"""The evaluator against plain full forwards, batch-size invariance, and task scoring."""

from pathlib import Path

import numpy as np
import pytest
import torch
from _support import logprobs

from celtk.ablation import ablate
from celtk.errors import SandboxRefusedError
from celtk.evaluation import evaluate
from celtk.evaluation.prompts import prepare
from celtk.evaluation.results import EvalConfig
from celtk.heads import HeadSet
from celtk.tasks import get_task, make_splits

FIX = Path(__file__).parent.parent / "fixtures"


def _reference_logprobs(model, prepared):
    """Sum of target log-probs from the bridge's own full forward, one request at a time."""
    out = []
    with torch.no_grad():
        for req in prepared.requests:
            tokens = torch.tensor([req.context + req.continuation])
            logp = torch.log_softmax(model.bridge(tokens)[0].float(), -1)
            n = len(req.context)
            out.append(sum(logp[n - 1 + j, t].item() for j, t in enumerate(req.continuation)))
    return np.array(out)


@pytest.mark.parametrize("heads", ["", "L1H2,L0H0"])
def test_evaluator_equals_bridge_forward(tiny_model, heads):
    task = get_task("arithmetic:3ds")
    splits = make_splits(task, 12, 0, fewshot=2)
    result = evaluate(tiny_model, task, splits.discovery, splits.shots, HeadSet.parse(heads), EvalConfig(batch_size=5))
    prepared = prepare(tiny_model, task, splits.discovery, splits.shots)
    with ablate(tiny_model, HeadSet.parse(heads)):
        ref = _reference_logprobs(tiny_model, prepared)
    assert np.allclose(logprobs(result), ref, atol=1e-4)
    assert [e.id for e in result.examples] == [e.id for e in splits.discovery]


def test_batch_size_invariance(tiny_llama):
    task = get_task("arithmetic")
    splits = make_splits(task, 70, 0, fewshot=1, seed=5)
    runs = [evaluate(tiny_llama, task, splits.discovery, splits.shots, config=EvalConfig(batch_size=b))
            for b in (1, 7, 64)]
    for other in runs[1:]:
        assert np.array_equal(other.correct, runs[0].correct)
        assert np.allclose(logprobs(other), logprobs(runs[0]), atol=1e-4)


def test_unembedding_only_at_scored_positions(tiny_llama):
    task = get_task("arithmetic:2da")
    splits = make_splits(task, 6, 0, fewshot=1)
    prepared = prepare(tiny_llama, task, splits.discovery, splits.shots)
    seen = []
    handle = tiny_llama.hf_model.lm_head.register_forward_hook(lambda m, i, o: seen.append(i[0].shape[0]))
    try:
        evaluate(tiny_llama, task, splits.discovery, splits.shots, config=EvalConfig(batch_size=3))
    finally:
        handle.remove()
    assert sum(seen) == sum(len(r.continuation) for r in prepared.requests)


def test_multiple_choice_scoring(tiny_llama):
    task = get_task("hellaswag", data_path=str(FIX / "hellaswag"))
    splits = make_splits(task, 3, 5, fewshot=1)
    result = evaluate(tiny_llama, task, splits.heldout, splits.shots, config=EvalConfig(batch_size=4))
    for ex, res in zip(splits.heldout, result.examples, strict=True):
        assert isinstance(res.logprob, list) and ex.choices is not None  # multiple choice: one log-prob per choice
        assert len(res.logprob) == 4
        norm = [ll / len(c) for ll, c in zip(res.logprob, ex.choices, strict=True)]
        assert res.correct == (int(np.argmax(norm)) == ex.label)
        assert res.extra["acc"] == (int(np.argmax(res.logprob)) == ex.label)


def test_mbpp_refuses_without_opt_in(tiny_llama, monkeypatch):
    monkeypatch.delenv("CELTK_ALLOW_CODE_EXEC", raising=False)
    task = get_task("mbpp", data_path=str(FIX / "mbpp"))
    splits = make_splits(task, 1, 1, fewshot=1)
    with pytest.raises(SandboxRefusedError, match="--allow-code-execution"):
        evaluate(tiny_llama, task, splits.heldout, splits.shots)


def test_mbpp_grading_runs_the_tests():
    task = get_task("mbpp", data_path=str(FIX / "mbpp"))
    ex = make_splits(task, 1, 5).heldout[0]
    assert task.grade_generation(ex, "def add(a, b):\n    return a + b\n[DONE]junk", allow_code=True)
    assert not task.grade_generation(ex, "def add(a, b):\n    return a - b\n", allow_code=True)
    assert not task.grade_generation(ex, "this is not python", allow_code=True)


def test_chat_formatting_wraps_prompt_and_is_recorded(tiny_llama):
    from celtk.evaluation.prompts import format_prompt

    task = get_task("arithmetic:2da")
    splits = make_splits(task, 2, 0, fewshot=1)
    plain = format_prompt(tiny_llama, task, splits.discovery[0], splits.shots, chat=False)
    chat = format_prompt(tiny_llama, task, splits.discovery[0], splits.shots, chat=True)
    assert plain in chat and chat != plain and chat.startswith("<|im_start|>")
    assert chat.rstrip().endswith("<|im_start|>assistant")
    a = evaluate(tiny_llama, task, splits.discovery, splits.shots, config=EvalConfig(chat=True))
    b = evaluate(tiny_llama, task, splits.discovery, splits.shots, config=EvalConfig(chat=False))
    assert [e.logprob for e in a.examples] != [e.logprob for e in b.examples]


def test_empty_prompt_is_scored_after_end_of_text_as_lm_eval_does(tiny_llama, tmp_path):
    """An empty prompt used to be scored from a padding position, so its log-prob changed with the
    batch (the longest prompt in it); now its context is the end-of-text token, whatever the batch."""
    import json

    from celtk.evaluation.prompts import encode_pair

    tokenizer = tiny_llama.tokenizer
    assert encode_pair(tokenizer, "", " 5") == ([tokenizer.eos_token_id],
                                                tokenizer(" 5", add_special_tokens=False).input_ids)
    path = tmp_path / "task.jsonl"
    rows = [{"id": "empty", "prompt": "", "target": " 5"}] + [{"prompt": f"{i} and {i} and {i} make", "target": " 9"}
                                                              for i in range(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = get_task(f"jsonl:{path}")
    examples = make_splits(task, 6, 0, fewshot=0).discovery
    alone = evaluate(tiny_llama, task, [e for e in examples if e.id == "empty"], config=EvalConfig(batch_size=1))
    batched = evaluate(tiny_llama, task, examples, config=EvalConfig(batch_size=6))
    in_batch = next(r for r in batched.examples if r.id == "empty")
    assert isinstance(in_batch.logprob, float) and isinstance(alone.examples[0].logprob, float)
    assert abs(in_batch.logprob - alone.examples[0].logprob) < 1e-4
