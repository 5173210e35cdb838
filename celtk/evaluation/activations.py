"""Activation bytes the stages allocate, term by term, from a model's :class:`Shape` and a task's
:class:`TaskSize` alone: ``celtk plan``'s model (:mod:`celtk.planning.plan`), and the memory check every stage
makes before its first pass (:mod:`celtk.evaluation.memory`). No torch: the plan prices a run from a config.

Each term names the tensors the code holds at that moment; shapes use ``rows`` (examples ×
ablations in one forward), ``width`` (query positions: the tokens after the shared prefix, the
last one dropped as no position reads it), ``keys`` (``prefix + width``) and ``db`` (bytes per
element of the model's dtype).

* **One decoder layer** (TransformerLens's bridge reimplements eager attention, so the full
  ``[rows, head, width, keys]`` matrix exists): at the softmax the masked scores and their float32
  softmax are alive together (8 bytes per score in float32; in bfloat16 2 + 4 + the 2-byte cast),
  beside queries, keys/values with their grouped-head copies, the layer input and its normed copy.
  The MLP holds, at its product, the activated gate, the up projection and their product (two
  ``d_ff`` tensors without a gate).
* **The cached screener's resident cache** (:class:`celtk.screening.cached.CachedScreener`): for every batch,
  its current layer input and the additive attention mask ``[rows, 1, width, keys]`` in the model's
  dtype (what the decoder builds for eager attention); rotary tables are ``[1, width, d_head]``,
  shared by the batch, and left out.
* **An ablated pass**: ``rows`` rows repeat the batch; the prefix keys/values of every layer
  still to run are repeated per row; the layer's mask is expanded to every row while it runs.
  After the last layer the final-normed copy and one ablation's scored logits and log-probabilities
  (float32, ``scored × d_vocab``) are held; ablations are scored one at a time.
* **The intact pass**: ``capture_forward`` keeps every layer's input of the batch, and the previous
  batch's list is still bound while the next batch runs (two lists when there are two batches or
  more); with a shared prefix the KV cache holds ``prefix + width`` keys/values of every layer.
* **The held-out stage** (:func:`celtk.evaluation.scoring.score_requests`): one plain forward per batch.

Measured against the process's peak resident memory on CPU by ``benchmarks/plan_accuracy.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from celtk.boundary import check_fields
from celtk.errors import ConfigError

if TYPE_CHECKING:  # annotations only: the activation model imports no torch
    from celtk.models import Model

SCORE_BYTES = 8  # per attention score at the softmax: float32 scores + float32 softmax (bf16: 2 + 4 + 2)
LOGIT_BYTES = 8  # per scored logit: the float32 logits and their float32 log-softmax


@dataclass(frozen=True)
class Shape:
    """A decoder's sizes, all the FLOP count (:mod:`celtk.planning.flops`) and the activation terms here read."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int
    d_ff: int
    d_vocab: int
    gated_mlp: bool = True  # Llama-family (gate, up, down); GPT-2 and GPT-NeoX have no gate

    @classmethod
    def of(cls, model: Model) -> Shape:
        return cls(model.n_layers, model.n_heads, model.n_kv_heads, model.d_head, model.d_model,
                   model.arch.d_mlp, model.d_vocab, model.arch.gated_mlp)


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
        shots_included: shots the token estimates already hold (MBPP's are of its 3-shot prompts).
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
    shots_included: int = 0

    def __post_init__(self) -> None:
        check_fields(self)
        for name, low in (("n_discovery", 1), ("n_heldout", 0), ("prompt_tokens", 1), ("continuation_tokens", 0),
                          ("choices", 1), ("shared_prefix", 0), ("generate_tokens", 0)):
            if getattr(self, name) < low:
                raise ConfigError(f"Task size {name} must be at least {low}, got {getattr(self, name)}.")
        if self.mean_prompt_tokens is not None and not 1 <= self.mean_prompt_tokens <= self.prompt_tokens:
            raise ConfigError(f"The mean prompt ({self.mean_prompt_tokens} tokens) must lie between 1 and the longest "
                              f"prompt ({self.prompt_tokens} tokens): --mean-prompt-tokens ≤ --prompt-tokens.")
        if self.shared_prefix >= self.prompt_tokens:
            raise ConfigError(f"The shared prefix ({self.shared_prefix} tokens of shots and template) must be shorter "
                              f"than the longest prompt ({self.prompt_tokens} tokens) that holds it.")

    @property
    def mean_prompt(self) -> int:
        return self.mean_prompt_tokens or self.prompt_tokens


def attention_bytes(shape: Shape, rows: int, width: int, keys: int, db: int) -> float:
    """Peak of one attention block: ``rows`` rows of ``width`` queries over ``keys`` keys."""
    q, kv = shape.n_heads * shape.d_head, shape.n_kv_heads * shape.d_head
    repeated = 2 * keys * q if shape.n_kv_heads != shape.n_heads else 0  # repeat_kv copies for grouped heads
    tensors = width * (2 * shape.d_model + 2 * q) + keys * 2 * kv + repeated  # input, normed, q, output; k, v
    return float(rows * tensors * db + rows * shape.n_heads * width * keys * SCORE_BYTES)


def mlp_bytes(shape: Shape, rows: int, width: int, db: int) -> float:
    """Peak of one MLP: the layer input, the post-attention residual and its normed copy, and
    the activated gate, the up projection and their product (two ``d_ff`` tensors without a gate)."""
    hidden = 3 if shape.gated_mlp else 2
    return float(rows * width * (3 * shape.d_model + hidden * shape.d_ff) * db)


def layer_bytes(shape: Shape, rows: int, width: int, keys: int, db: int) -> float:
    """Peak of one decoder layer (attention and MLP run one after the other)."""
    return max(attention_bytes(shape, rows, width, keys, db), mlp_bytes(shape, rows, width, db))


def scoring_bytes(shape: Shape, rows: int, width: int, scored: int, db: int) -> float:
    """After the last layer: the residual and its final-normed copy, and one ablation's logits."""
    return float(2 * rows * width * shape.d_model * db + scored * shape.d_vocab * LOGIT_BYTES)


def resident_bytes(shape: Shape, n_requests: int, width: int, prefix: int, db: int) -> float:
    """What the cached screener keeps for every batch between layers: the layer input
    ``[rows, width, d_model]`` and the additive mask ``[rows, 1, width, prefix + width]``."""
    return float(n_requests * width * (shape.d_model + prefix + width) * db)


def ablated_pass_bytes(shape: Shape, rows: int, width: int, prefix: int, scored: int, db: int,
                       layers_run: int) -> float:
    """One ablated pass of ``rows`` rows from a cached layer input through ``layers_run`` layers."""
    keys = prefix + width
    prefix_kv = layers_run * 2 * rows * shape.n_kv_heads * prefix * shape.d_head * db
    expanded_mask = rows * width * keys * db  # repeated to every row for the layer that runs
    return prefix_kv + max(expanded_mask + layer_bytes(shape, rows, width, keys, db),
                           scoring_bytes(shape, rows, width, scored, db))


def intact_pass_bytes(shape: Shape, batch: int, width: int, prefix: int, scored: int, db: int, n_batches: int) -> float:
    """One batch's intact pass while the screener captures every layer's input."""
    keys = prefix + width
    captured = min(n_batches, 2) * shape.n_layers * batch * width * shape.d_model * db
    cache = shape.n_layers * 2 * batch * shape.n_kv_heads * keys * shape.d_head * db if prefix else 0
    mask = batch * width * keys * db  # one additive mask, shared by the layers
    return captured + cache + mask + max(layer_bytes(shape, batch, width, keys, db),
                                         scoring_bytes(shape, batch, width, scored, db))


def plain_pass_bytes(shape: Shape, batch: int, width: int, scored: int, db: int) -> float:
    """One plain forward of a batch (the held-out stage), then its scored logits."""
    return batch * width * width * db + max(layer_bytes(shape, batch, width, width, db),
                                            scoring_bytes(shape, batch, width, scored, db))


def cached_stage_bytes(shape: Shape, task: TaskSize, n_examples: int, batch_size: int, rows_per_pass: int,
                       dtype_bytes: int, layers_run: int | None = None, depth: int = 1) -> float:
    """Peak activation bytes of the cached screener on ``n_examples`` examples: every batch's
    layer input resident, plus the larger of the intact pass and the widest ablated pass
    (``layers_run`` layers, all of them by default: an ablation in layer 0). A prefix tree
    ``depth`` nodes deep (stage 2: the subsets' size) holds one more pass-wide layer input per
    level above the one running (:mod:`celtk.screening.prefix_tree`)."""
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
