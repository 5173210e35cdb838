"""Helpers the tests share, imported as ``from _support import ...`` (tests/ is on pytest's path): tiny models
of each architecture, the planted run's task and configuration, document edits. Test modules import these, never
conftest."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch

if TYPE_CHECKING:  # conftest imports this module before celtk may load (the jaxtyping hook)
    from celtk.evaluation.results import EvalResult

T = TypeVar("T")


def not_none(value: T | None) -> T:
    """``value``, asserted to be set: where a test relies on an optional field having a value (and says so to the
    type checker)."""
    assert value is not None
    return value


def logprobs(result: EvalResult) -> list[float | list[float]]:
    """Each example's log-probability in ``result`` (one per choice for multiple choice), asserted present: every
    result a test compares this way is scored by log-likelihood."""
    out: list[float | list[float]] = []
    for e in result.examples:
        assert e.logprob is not None
        out.append(e.logprob)
    return out


def edit_document(directory: Path, name: str, change: Any) -> dict:
    """Rewrite ``directory/name`` with ``change(document dict) -> dict`` and record its new digest, as if
    celtk had written it: how a test reaches the checks that stand behind the digest check."""
    from celtk.store.documents import (
        DIGESTS,  # celtk is imported by tests, not when conftest loads (the jaxtyping hook)
    )
    from celtk.store.files import file_digest

    path = Path(directory) / name
    data = change(json.loads(path.read_text()))
    path.write_text(json.dumps(data))
    book = Path(directory) / DIGESTS
    digests = json.loads(book.read_text()) if book.exists() else {}
    digests[name] = file_digest(path)
    book.write_text(json.dumps(digests))
    return data


def forget_documents(directory: Path, *names: str) -> None:
    """Delete ``names`` from ``directory`` and their entries from its digests (the held-out log's files are removed
    whole): the run as it stood before the stages that wrote them."""
    from celtk.store.documents import DIGESTS

    book = Path(directory) / DIGESTS
    digests = json.loads(book.read_text())
    for name in names:
        (Path(directory) / name).unlink(missing_ok=True)
        digests.pop(name, None)
    book.write_text(json.dumps(digests))


def copy_document(source: Path, target: Path, name: str) -> None:
    """Copy ``source/name`` over ``target/name`` and record its digest there, as if celtk had written it in
    ``target``: a document of another run that only the same-run checks (not the digest) can tell apart."""
    edit_document(target, name, lambda _: json.loads((Path(source) / name).read_text()))


# Tiny models (tests/conftest.py's fixtures build theirs with these)

TINY_ARCHS = ("llama", "qwen2", "smollm3")
# Further decoders TransformerLens maps differently (tests/integration/test_architectures.py):
# GPT-2 (fused QKV, Conv1D output projection, learned positions, LayerNorm), GPT-NeoX/Pythia
# (fused QKV, partial rotary, parallel residual, `layer_past` cache keyword), Mistral (sliding
# window) and Qwen3 (q/k norms).
MORE_ARCHS = ("gpt2", "gpt_neox", "mistral", "qwen3")


def load_smol_tokenizer():
    """The real SmolLM2 tokenizer (from the packaged GGUF), with a pad token; tiny models share it."""
    from transformers import AutoTokenizer

    from celtk.models import ALIASES, dequantized_dir

    tok = AutoTokenizer.from_pretrained(dequantized_dir(ALIASES["smollm2-135m"].locate()))
    tok.pad_token = tok.pad_token or tok.eos_token
    return tok


def tiny_hf_model(arch: str, vocab_size: int, seed: int = 0, n_layers: int = 3, n_heads: int = 4):
    """A tiny random HF causal LM of the given architecture, built with ``from_config``."""
    import transformers as tf

    hidden = 64 if n_heads == 4 else 8 * n_heads
    common: dict[str, Any] = dict(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=128, num_hidden_layers=n_layers,
        num_attention_heads=n_heads, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        initializer_range=0.2, tie_word_embeddings=False, pad_token_id=0, bos_token_id=None, eos_token_id=None)
    plain: dict[str, Any] = dict(vocab_size=vocab_size, initializer_range=0.2, pad_token_id=0, bos_token_id=None,
                                 eos_token_id=None)
    config: tf.PreTrainedConfig
    if arch == "llama":
        config = tf.LlamaConfig(**common)
    elif arch == "qwen2":
        config = tf.Qwen2Config(**common)  # q/k/v projections carry biases
    elif arch == "gemma3":  # sliding-window and full layers, local and global rotary embeddings
        config = tf.Gemma3TextConfig(**{**common, "num_key_value_heads": 1}, sliding_window=16,
                                     layer_types=(["sliding_attention", "full_attention"] * n_layers)[:n_layers])
    elif arch == "smollm3":
        config = tf.SmolLM3Config(**common, no_rope_layers=[1, 0, 1][:n_layers] + [1] * max(0, n_layers - 3))
    elif arch == "mistral":  # a sliding window shorter than the few-shot prompts
        config = tf.MistralConfig(**common, sliding_window=16)
    elif arch == "qwen3":  # per-head q/k RMSNorm
        config = tf.Qwen3Config(**common)
    elif arch == "gpt2":  # tied embeddings, as GPT-2 small
        config = tf.GPT2Config(**plain, n_embd=hidden, n_layer=n_layers, n_head=n_heads, n_inner=128, n_positions=512)
    elif arch == "gpt_neox":  # Pythia's layout: a quarter of each head rotary, parallel residual
        config = tf.GPTNeoXConfig(**plain, hidden_size=hidden, num_hidden_layers=n_layers, num_attention_heads=n_heads,
                                  intermediate_size=128, max_position_embeddings=512,
                                  rotary_pct=0.25,  # type: ignore[call-arg]  # HF takes it via **kwargs, untyped
                                  use_parallel_residual=True, tie_word_embeddings=False)
    else:
        raise ValueError(arch)
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if arch == "qwen2":  # make the value biases non-zero so they matter
        for layer in model.model.layers:
            torch.nn.init.normal_(layer.self_attn.v_proj.bias, std=0.2)
    if arch in ("gpt2", "gpt_neox"):  # attention biases (QKV and output) are zero-initialised by HF: make them matter
        for name, param in model.named_parameters():
            if name.endswith("bias") and (".attn." in name or ".attention." in name):
                torch.nn.init.normal_(param, std=0.2)
    return model.eval()


def make_tiny(arch: str, tokenizer, seed: int = 0, n_layers: int = 3, n_heads: int = 4):
    from celtk.models import wrap_hf_model

    return wrap_hf_model(tiny_hf_model(arch, len(tokenizer), seed, n_layers, n_heads), tokenizer, name=f"tiny-{arch}")


# The planted models: the planted run's (the fixture ``planted`` is in conftest) and the head planted against each
# example's own answer, with their tasks and the planted run's configuration. benchmarks/planted_heads.py builds the
# same models from here for the figures docs/selection-holds.md quotes.

WORDS = ["apple", "river", "stone", "cloud", "music", "table", "green", "seven", "light", "paper", "horse", "dream"]


def self_consistent_task(model, directory, n: int = 90) -> str:
    """A JSONL task whose targets are the clean model's own greedy next tokens (intact = 100 %)."""
    import json

    rng = np.random.default_rng(0)
    lines: list[dict] = []
    while len(lines) < n:
        prompt = " ".join(rng.choice(WORDS, size=6))
        ids = model.tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            nxt = model.bridge(ids)[0, -1].argmax().item()
        target = model.tokenizer.decode([nxt])
        whole = model.tokenizer(prompt + target).input_ids
        if (whole[: ids.shape[1]] == ids[0].tolist() and whole[ids.shape[1]:] == [nxt]
                and prompt not in {l["prompt"] for l in lines}):
            lines.append({"prompt": prompt, "target": target})
    path = directory / "self.jsonl"
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    return f"jsonl:{path}"


def planted_model(tokenizer, directory: Path):
    """The planted run's model and task: a tiny Llama (seed 3) whose head L1H2 has its output columns scaled ×25,
    which hurts the task, and a task of the clean model's own greedy answers (written into ``directory``)."""
    task = self_consistent_task(make_tiny("llama", tokenizer, seed=3), directory)
    bad = make_tiny("llama", tokenizer, seed=3)
    o = bad.bridge.blocks[1].attn.o.original_component.weight
    with torch.no_grad():
        o[:, 2 * bad.d_head:3 * bad.d_head] *= 25.0
    return bad, task


def anti_answer_model(tokenizer, directory: Path):
    """A tiny Llama (no grouped keys/values, so a head's weights are its own) with head L2H2 rewritten to undo
    each example's own answer: it attends to its own position (q = k = 5·the first 16 coordinates) and writes
    −10 × its input's projection on the candidate answers' unembedding directions. The task (four-way choice,
    written into ``directory``) is the model's own choice without that head, so zeroing it is 100 % by
    construction; the harm is specific to the example, so another example's z (resample) or the average z (mean)
    should harm it far less. Returns the model, the task and the head."""
    import transformers as tf

    from celtk.evaluation import evaluate
    from celtk.heads import HeadSet
    from celtk.models import wrap_hf_model
    from celtk.tasks import get_task

    config = tf.LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                            num_attention_heads=4, num_key_value_heads=4, head_dim=16, max_position_embeddings=512,
                            initializer_range=0.2, tie_word_embeddings=False, pad_token_id=0, bos_token_id=None,
                            eos_token_id=None)
    torch.manual_seed(3)
    model = wrap_hf_model(tf.AutoModelForCausalLM.from_config(config).eval(), tokenizer, name="tiny-anti-answer")
    head = HeadSet.parse("L2H2")
    rng = np.random.default_rng(0)
    lines = [{"prompt": " ".join(rng.choice(WORDS, size=6)),
              "choices": [str(c) for c in rng.choice(WORDS, 4, replace=False)],
              "label": 0} for _ in range(170)]
    path = Path(directory) / "choose.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    task = get_task(f"jsonl:{path}")
    examples = task.load_pools().discovery
    chosen = evaluate(model, task, examples, heads=head)  # the model's own choice without the head
    for line, result in zip(lines, chosen.examples, strict=True):
        assert result.logprob is not None
        line["label"] = int(np.argmax(result.logprob))
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    ids = [tokenizer(" " + w).input_ids[0] for w in WORDS]
    basis = torch.zeros(16, 64)
    basis[:len(ids)] = torch.linalg.qr(model.arch.unembed_weight.detach()[ids].T)[0].T
    attn, d = model.bridge.blocks[2].attn, model.d_head
    with torch.no_grad():
        attn.q.original_component.weight[2 * d:3 * d] = 5 * torch.eye(64)[:16]
        attn.k.original_component.weight[2 * d:3 * d] = 5 * torch.eye(64)[:16]
        attn.v.original_component.weight[2 * d:3 * d] = basis
        attn.o.original_component.weight[:, 2 * d:3 * d] = -10 * basis.T
    return model, get_task(f"jsonl:{path}"), head


def planted_config(task: str, **kw):
    """The run configuration the planted tests share (40 + 40 examples, pool 4, pairs)."""
    from celtk.run import RunConfig

    return RunConfig(model="tiny-planted", task=task, discovery=40, heldout=40, fewshot=0, batch_size=8, p=4, k=2, **kw)


def single_head_score(head: str, gain: int, damage: int, fixes: int, n: int = 20):
    """A screen score of one head on ``n`` discovery examples of which the intact model gets ``n // 2`` right."""
    from celtk.heads import HeadSet
    from celtk.search.scores import HeadScore

    n_correct = n // 2 + gain
    return HeadScore(HeadSet.parse(head), n_correct, gain, damage, fixes, np.arange(n) < n_correct)


def as_users_call(function: Any) -> Any:
    """A public function (or bound method) as a user calls it: decorated by :func:`celtk.boundary.public` alone,
    without the suite's own type-checking hook (``--jaxtyping-packages``) inside it, which would catch a wrong type
    first, with its own exception; so a test of celtk's refusal sees celtk's :class:`~celtk.errors.ArgumentError`."""
    from celtk.boundary import public

    plain = public(inspect.unwrap(function))
    return functools.partial(plain, function.__self__) if inspect.ismethod(function) else plain


def z_alone(model: Any, layer: int, tokens: Sequence[int]) -> torch.Tensor:
    """hook_z of ``layer`` on ``tokens`` run alone through the intact model: ``[pos, head_index, d_head]``."""
    name = f"blocks.{layer}.attn.hook_z"
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(torch.tensor([tokens]), names_filter=lambda n: n == name)
    return cache[name][0]
