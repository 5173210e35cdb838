"""Planning a run before any work: FLOPs, peak memory and time of each stage, from a model's
config alone (no weights), the task's sizes and a device's throughput.

FLOPs come from :mod:`celtk.flops`. Memory follows how the stages hold activations:

* **screen / select** (:class:`celtk.screen.CachedScreener`): every batch's current layer input
  stays resident (residual stream, attention mask and rotary tables of each batch), and one
  pass of ``rows_per_pass`` rows (examples × ablations) holds its working set: the repeated
  residual, the expanded mask and rotary tables, the prefix keys/values of every later layer,
  one layer's projections, attention scores and MLP activations, and the scored logits.
  During the intact pass one batch's inputs to every layer are held as well.
* **test**: two plain passes (intact and ablated) over the held-out set, batch by batch.
* **generate** tasks (MBPP): greedy generation with a KV cache, once per ablation.

Byte counts name real tensors; the constant factors (how many copies of an activation a layer
holds at once) were checked against measured peaks on CPU (``benchmarks/plan_accuracy.py``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celtk.errors import ConfigError
from celtk.flops import Shape, layer_flops, screen_flops

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class TaskSize:
    """What a task costs per example, in tokens (after the chat template, if any).

    Attributes:
        name: the task's name, for display.
        kind: ``target``, ``choice`` or ``generate``.
        n_discovery, n_heldout: examples in each set.
        prompt_tokens: longest prompt (shots included); padding makes a pass this wide.
        mean_prompt_tokens: mean prompt length (batches are sorted by length, so the resident
            cache and the FLOPs follow the mean); defaults to ``prompt_tokens``.
        continuation_tokens: tokens scored per request (choice: the longest choice).
        choices: requests per example (1 for a fixed target).
        shared_prefix: tokens every request shares (the shots), run once per ablation.
        generate_tokens: tokens generated per example (generate tasks).
    """

    name: str
    kind: str
    n_discovery: int
    n_heldout: int
    prompt_tokens: int
    continuation_tokens: int
    choices: int = 1
    shared_prefix: int = 0
    generate_tokens: int = 0
    mean_prompt_tokens: int | None = None

    @property
    def mean_prompt(self) -> int:
        return self.mean_prompt_tokens or self.prompt_tokens


PAPER_TASKS = {
    # the paper's sizes (PAPER.md); token lengths are estimates for a Llama-3-style tokenizer with
    # lm-eval's default prompts and shots (0-shot; MBPP 3-shot), not measured on the real data
    "arithmetic": TaskSize("arithmetic", "target", 2000, 1000, prompt_tokens=18, continuation_tokens=4, mean_prompt_tokens=15),
    "boolq": TaskSize("boolq", "choice", 2000, 3270, prompt_tokens=800, continuation_tokens=1, choices=2, mean_prompt_tokens=150),
    "hellaswag": TaskSize("hellaswag", "choice", 2000, 10042, prompt_tokens=120, continuation_tokens=60, choices=4,
                          mean_prompt_tokens=45),
    "mbpp": TaskSize("mbpp", "generate", 374, 500, prompt_tokens=900, continuation_tokens=0, generate_tokens=256,
                     mean_prompt_tokens=600),
}


@dataclass(frozen=True)
class Device:
    """A device as the plan sees it: sustained dense throughput and memory."""

    name: str
    flops_per_second: float
    memory_bytes: float


@dataclass(frozen=True)
class StagePlan:
    """One stage's estimate. ``peak_bytes`` includes the weights."""

    stage: str
    evaluations: int  # ablations scored (plus the intact pass)
    flops: float
    weight_bytes: float
    activation_bytes: float
    seconds: float
    fits: bool

    @property
    def peak_bytes(self) -> float:
        return self.weight_bytes + self.activation_bytes


def shape_from_config(config: Any) -> Shape:
    """A :class:`Shape` from an HF ``config.json`` (path or dict) or a ``transformers`` config."""
    if isinstance(config, (str, Path)):
        path = Path(config)
        try:
            config = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ConfigError(f"Cannot read model config {path}: {error}. Give an HF config.json.") from None
    def get(key: str) -> Any:  # Any: config values are JSON numbers, checked for presence below
        return config.get(key) if isinstance(config, dict) else getattr(config, key, None)
    if isinstance(config, dict) and "text_config" in config:  # multimodal wrappers (Gemma 3)
        return shape_from_config(config["text_config"])
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size") if get(k) is None]
    if missing:
        raise ConfigError(f"Model config lacks {', '.join(missing)}; a decoder config.json names hidden_size, "
                          "num_hidden_layers, num_attention_heads, num_key_value_heads, intermediate_size, vocab_size.")
    heads = int(get("num_attention_heads"))
    d_model = int(get("hidden_size"))
    return Shape(int(get("num_hidden_layers")), heads, int(get("num_key_value_heads") or heads),
                 int(get("head_dim") or d_model // heads), d_model, int(get("intermediate_size") or 4 * d_model),
                 int(get("vocab_size")))


def n_parameters(shape: Shape, tied: bool) -> int:
    """Weights of a Llama-style decoder (biases and norms included only as the small terms they are)."""
    q, kv = shape.n_heads * shape.d_head, shape.n_kv_heads * shape.d_head
    layer = shape.d_model * (q + 2 * kv) + q * shape.d_model + 3 * shape.d_model * shape.d_ff + 2 * shape.d_model + q + 2 * kv
    embed = shape.d_vocab * shape.d_model
    return shape.n_layers * layer + embed * (1 if tied else 2) + shape.d_model


def resident_bytes(shape: Shape, n_requests: int, width: int, prefix: int, dtype_bytes: int) -> float:
    """What the cached screener keeps for every batch between layers: the residual stream
    ``[rows, width, d_model]``, the boolean attention mask ``[rows, 1, width, prefix + width]``
    and the rotary tables ``2 × [rows, width, d_head]`` (``width``: tokens after the shared prefix)."""
    per_row = width * (shape.d_model + 2 * shape.d_head) * dtype_bytes + width * (prefix + width)
    return float(n_requests * per_row)


def pass_bytes(shape: Shape, rows: int, width: int, prefix: int, scored: int, dtype_bytes: int) -> float:
    """One forward of ``rows`` rows through one layer at a time (the working set of a pass).

    Held at once: the residual in and out, the expanded mask and rotary tables, queries, keys
    and values (grouped heads repeated to every query head, the prefix prepended), eager
    attention scores and probabilities, the MLP's gate, up and product activations, and the
    prefix keys/values of every layer, repeated per row; then the logits and log-probabilities
    (float32) of one batch's ``scored`` positions (each ablation of a pass is scored in turn).
    """
    keys = prefix + width
    residual = 3 * rows * width * shape.d_model
    tables = rows * width * 2 * shape.d_head + rows * width * keys / dtype_bytes  # rotary cos/sin, boolean mask
    qkv = rows * width * shape.n_heads * shape.d_head + 2 * rows * keys * shape.n_heads * shape.d_head
    attention = 2 * rows * shape.n_heads * width * keys  # eager (TransformerLens bridges force it): scores, pattern
    mlp = 3 * rows * width * shape.d_ff
    prefix_kv = shape.n_layers * 2 * rows * shape.n_kv_heads * prefix * shape.d_head
    layer_peak = max(qkv + attention, mlp)
    logits = 2 * scored * shape.d_vocab * 4
    return float((residual + tables + layer_peak + prefix_kv) * dtype_bytes + logits)


def _intact_extra(shape: Shape, batch_size: int, width: int, dtype_bytes: int) -> float:
    """During the intact pass the screener holds one batch's input to every layer."""
    return float(shape.n_layers * batch_size * width * shape.d_model * dtype_bytes)


def cached_stage_bytes(shape: Shape, task: TaskSize, n_examples: int, batch_size: int, rows_per_pass: int,
                       dtype_bytes: int) -> float:
    """Peak activation bytes of the cached screener on ``n_examples`` examples."""
    n_requests = n_examples * task.choices
    width = task.prompt_tokens - task.shared_prefix + task.continuation_tokens
    mean_width = task.mean_prompt - task.shared_prefix + task.continuation_tokens
    resident = resident_bytes(shape, n_requests, mean_width, task.shared_prefix, dtype_bytes)
    rows = max(rows_per_pass, batch_size)
    working = pass_bytes(shape, rows, width, task.shared_prefix, batch_size * task.continuation_tokens, dtype_bytes)
    return resident + max(working, _intact_extra(shape, batch_size, width, dtype_bytes)
                          + pass_bytes(shape, batch_size, width, task.shared_prefix, batch_size * task.continuation_tokens, dtype_bytes))


def _generation_flops(shape: Shape, prompt: int, new: int) -> float:
    """Greedy generation with a KV cache: the prompt once, then one token at a time."""
    steps = sum(layer_flops(shape, 1, prompt + i) for i in range(new))
    return float(shape.n_layers * (layer_flops(shape, prompt) + steps) + 2 * (new + 1) * shape.d_model * shape.d_vocab)


def _plain_flops(shape: Shape, task: TaskSize, n_examples: int) -> float:
    seq = task.mean_prompt + task.continuation_tokens
    per_request = shape.n_layers * layer_flops(shape, seq) + 2 * task.continuation_tokens * shape.d_model * shape.d_vocab
    return float(n_examples * task.choices * per_request)


def _stage(name: str, evaluations: int, flops: float, weights: float, activations: float, device: Device) -> StagePlan:
    return StagePlan(name, evaluations, flops, weights, activations, flops / device.flops_per_second,
                     weights + activations <= device.memory_bytes)


def plan_run(config: Any, task: TaskSize, device: Device, *, batch_size: int = 8, rows_per_pass: int | None = None,
             dtype: str = "bfloat16", pool: int = 10, k: int = 3, test_streams: bool = False) -> list[StagePlan]:
    """Estimate the screen, select and test stages of one run (Algorithm 1 with ``pool``, ``k``).

    Args:
        config: an HF ``config.json`` path, its dict, or a ``transformers`` config (no weights).
        task: the task's sizes in tokens.
        device: sustained FLOP/s and memory.
        batch_size: examples per batch; ``rows_per_pass``: rows per forward (default = batch size).
        test_streams: model the held-out stage as two streamed plain passes; by default as it
            runs today, through the cached screener (every held-out batch resident).

    Returns:
        one :class:`StagePlan` each for ``screen``, ``select`` and ``test``.
    """
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"Unknown dtype {dtype!r}; choose one of {', '.join(DTYPE_BYTES)}.")
    if task.kind not in ("target", "choice", "generate"):
        raise ConfigError(f"Task kind {task.kind!r} is not one of target, choice, generate.")
    shape, width_bytes = shape_from_config(config), DTYPE_BYTES[dtype]
    tied = bool((json.loads(Path(config).read_text()) if isinstance(config, (str, Path)) else
                 config if isinstance(config, dict) else vars(config)).get("tie_word_embeddings", False))
    weights = float(n_parameters(shape, tied) * width_bytes)
    rows = rows_per_pass or batch_size
    n_heads = shape.n_layers * shape.n_heads
    subsets = sum(math.comb(pool, s) for s in range(2, k + 1))
    if task.kind == "generate":
        per_example = _generation_flops(shape, task.mean_prompt, task.generate_tokens)
        kv = 2 * shape.n_layers * shape.n_kv_heads * shape.d_head * (task.prompt_tokens + task.generate_tokens)
        working = batch_size * kv * width_bytes + pass_bytes(shape, batch_size, task.prompt_tokens, 0, batch_size, width_bytes)
        return [_stage("screen", n_heads + 1, (n_heads + 1) * task.n_discovery * per_example, weights, working, device),
                _stage("select", subsets, subsets * task.n_discovery * per_example, weights, working, device),
                _stage("test", 2, 2 * task.n_heldout * per_example, weights, working, device)]
    width = task.mean_prompt - task.shared_prefix + task.continuation_tokens - 1
    n_disc = task.n_discovery * task.choices

    def cached(n_sets_by_start: list[int]) -> float:
        return screen_flops(shape, task.shared_prefix, [width] * n_disc, n_disc * task.continuation_tokens,
                            n_sets_by_start)["cached"]

    screen_starts = [l for l in range(shape.n_layers) for _ in range(shape.n_heads)]
    # a subset of s heads drawn across layers starts, on average, at layer L/(s+1)
    select_starts = [shape.n_layers // (s + 1) for s in range(2, k + 1) for _ in range(math.comb(pool, s))]
    disc_bytes = cached_stage_bytes(shape, task, task.n_discovery, batch_size, rows, width_bytes)
    test_bytes = (pass_bytes(shape, batch_size, task.prompt_tokens + task.continuation_tokens, 0,
                             batch_size * task.continuation_tokens, width_bytes) if test_streams
                  else cached_stage_bytes(shape, task, task.n_heldout, batch_size, rows, width_bytes))
    return [_stage("screen", n_heads + 1, cached(screen_starts), weights, disc_bytes, device),
            _stage("select", subsets, cached(select_starts), weights, disc_bytes, device),
            _stage("test", 2, 2 * _plain_flops(shape, task, task.n_heldout), weights, test_bytes, device)]


def task_size_of(prepared: Any, n_heldout: int = 0, share_prefix: bool = True) -> TaskSize:
    """The :class:`TaskSize` of a prepared request list, as the cached screener will see it."""
    from celtk.screen import MIN_SHARED_PREFIX, shared_prefix_length

    requests = prepared.requests
    n_examples = len(prepared.examples)
    prefix = shared_prefix_length(requests) if share_prefix else 0
    prefix = prefix if prefix >= MIN_SHARED_PREFIX else 0
    return TaskSize("prepared", prepared.kind, n_examples, n_heldout, prompt_tokens=max(len(r.context) for r in requests),
                    continuation_tokens=max(len(r.continuation) for r in requests),
                    choices=max(1, round(len(requests) / max(n_examples, 1))), shared_prefix=prefix,
                    mean_prompt_tokens=round(sum(len(r.context) for r in requests) / len(requests)))


def peak_resident_growth(work: Any) -> tuple[Any, int]:
    """Run ``work()`` and return its result and how far the process's peak resident memory rose
    above its resident memory at the start, in bytes (Linux: the kernel's peak is reset first).

    RSS, not ``tracemalloc``: torch allocates tensors outside Python's allocator, where
    tracemalloc cannot see them; large tensors are mapped and unmapped, so RSS follows them.
    """
    import gc
    import re

    def status(field: str) -> int:
        with open("/proc/self/status") as handle:
            return int(re.search(rf"{field}:\s+(\d+)", handle.read()).group(1)) * 1024  # type: ignore[union-attr]

    gc.collect()
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # reset VmHWM to the current RSS
    start = status("VmRSS")
    result = work()
    return result, status("VmHWM") - start
