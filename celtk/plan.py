"""Planning a run before any work: FLOPs, peak memory and time of each stage, from a model's
config alone (no weights), the task's sizes and a device's throughput.

FLOPs come from :mod:`celtk.flops`; activation bytes from :mod:`celtk.activations`, term by term:

* **screen / select** (:class:`celtk.screen.CachedScreener`): every batch's current layer input and
  boolean mask stay resident, plus the larger of the intact pass (every layer's input of a batch
  captured) and the widest ablated pass (``rows_per_pass`` rows through every layer, the shared
  prefix's keys/values of every layer repeated per row, eager attention scores, one ablation's logits);
  select walks its subsets as a prefix tree, which holds one pass-wide layer input per level above
  the running one, and runs the layers :func:`celtk.prefix_tree.layer_evaluations` counts for a pool
  spread evenly over the layers.
* **test**: two plain passes (intact and ablated) over the held-out set, batch by batch.
* **generate** tasks (MBPP): greedy generation with a KV cache, once per ablation.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from celtk.activations import ablated_pass_bytes, intact_pass_bytes, plain_pass_bytes, resident_bytes
from celtk.errors import ConfigError
from celtk.flops import Shape, layer_flops, screen_flops
from celtk.heads import Head, HeadSet
from celtk.prefix_tree import layer_evaluations

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


def cached_stage_bytes(shape: Shape, task: TaskSize, n_examples: int, batch_size: int, rows_per_pass: int,
                       dtype_bytes: int, layers_run: int | None = None, depth: int = 1) -> float:
    """Peak activation bytes of the cached screener on ``n_examples`` examples: every batch's
    layer input resident, plus the larger of the intact pass and the widest ablated pass
    (``layers_run`` layers, all of them by default: an ablation in layer 0). A prefix tree
    ``depth`` nodes deep (stage 2: the subsets' size) holds one more pass-wide layer input per
    level above the one running (:mod:`celtk.prefix_tree`)."""
    n_requests = n_examples * task.choices
    width = task.prompt_tokens - task.shared_prefix + task.continuation_tokens - 1
    mean_width = task.mean_prompt - task.shared_prefix + task.continuation_tokens - 1
    batch = min(batch_size, n_requests)
    copies = max(1, min(rows_per_pass // batch, shape.n_heads))  # ablations per pass: at most one layer's heads
    scored = batch * task.continuation_tokens
    resident = resident_bytes(shape, n_requests, mean_width, task.shared_prefix, dtype_bytes)
    ablated = ablated_pass_bytes(shape, batch * copies, width, task.shared_prefix, scored, dtype_bytes,
                                 shape.n_layers if layers_run is None else layers_run)
    ablated += (depth - 1) * batch * copies * width * shape.d_model * dtype_bytes  # the tree's upper levels
    intact = intact_pass_bytes(shape, batch, width, task.shared_prefix, scored, dtype_bytes,
                               math.ceil(n_requests / batch))
    return resident + max(ablated, intact)


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
             dtype: str = "bfloat16", pool: int = 10, k: int = 3) -> list[StagePlan]:
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
    tied = bool((json.loads(Path(config).read_text()) if isinstance(config, (str, Path)) else
                 config if isinstance(config, dict) else vars(config)).get("tie_word_embeddings", False))
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
    width = task.mean_prompt - task.shared_prefix + task.continuation_tokens - 1
    n_disc = task.n_discovery * task.choices

    def cached(n_sets_by_start: list[int], layers: int | None = None) -> float:
        return screen_flops(shape, task.shared_prefix, [width] * n_disc, n_disc * task.continuation_tokens,
                            n_sets_by_start, layers)["cached"]

    screen_starts = [l for l in range(shape.n_layers) for _ in range(shape.n_heads)]
    # stage 2 walks its subsets as a prefix tree; the pool is taken spread evenly over the layers
    spread = [Head(int((i + 0.5) * shape.n_layers / pool), i) for i in range(pool)]
    select_sets = [HeadSet(c) for s in range(2, k + 1) for c in combinations(spread, s)]
    select_layers = layer_evaluations(select_sets, shape.n_layers)
    disc_bytes = cached_stage_bytes(shape, task, task.n_discovery, batch_size, rows, width_bytes)
    select_bytes = cached_stage_bytes(shape, task, task.n_discovery, batch_size, rows, width_bytes,
                                      depth=min(k, len({h.layer for h in spread})))
    # the held-out stage streams: two plain passes, one batch at a time (celtk.run.test.score_streaming)
    test_bytes = plain_pass_bytes(shape, batch_size, task.prompt_tokens + task.continuation_tokens - 1,
                                  batch_size * task.continuation_tokens, width_bytes)
    return [_stage("screen", n_heads + 1, cached(screen_starts), weights, disc_bytes, device),
            _stage("select", subsets, cached([hs.heads[0].layer for hs in select_sets], select_layers), weights,
                   select_bytes, device),
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

