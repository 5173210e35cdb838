"""Counting the arithmetic a screen must do, for efficiency figures and GPU-hour estimates.

Counts multiply-adds as 2 FLOPs in the matrix products (projections, attention scores and
weighted sums, MLP (three matrices when gated, two otherwise), unembedding at scored positions);
norms, rotary embeddings and softmax are left out (a few percent at these sizes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from celtk.evaluation.activations import Shape as Shape  # re-exported: the counts' callers name it from here


class ScreenFlops(TypedDict):
    """FLOPs of a screen by the cached screener and by plain passes."""

    cached: float
    plain: float


class GpuHours(TypedDict):
    """GPU hours of a screen by each path, the FLOPs they come from and the throughput assumed."""

    cached: float
    plain: float
    flops: ScreenFlops
    assumed_flops_per_second: float


def layer_flops(shape: Shape, n_new: int, n_past: int = 0) -> float:
    """One decoder layer on ``n_new`` tokens that attend to ``n_past`` earlier ones and each other (causal)."""
    q, kv = shape.n_heads * shape.d_head, shape.n_kv_heads * shape.d_head
    projections = 2 * n_new * shape.d_model * (q + 2 * kv) + 2 * n_new * q * shape.d_model
    keys_seen = n_new * n_past + n_new * (n_new + 1) / 2
    attention = 2 * 2 * keys_seen * q
    mlp = 2 * n_new * (3 if shape.gated_mlp else 2) * shape.d_model * shape.d_ff
    return projections + attention + mlp


def screen_flops(shape: Shape, prefix: int, suffixes: Sequence[int], scored: int, start_layers: Sequence[int],
                 layer_evaluations: int | None = None, repeat: int = 1) -> ScreenFlops:
    """FLOPs of the cached screener: one intact pass, then for each ablation starting at layer l,
    layers l..L−1 over the shared prefix once and over every example's suffix; and of the plain
    path (every ablation a full forward of every whole prompt). ``suffixes``: tokens per example
    after the shared prefix; ``scored``: scored positions in all (one unembedding each).
    ``layer_evaluations``: the layers the ablations run in all when they share a prefix tree
    (:func:`celtk.screening.prefix_tree.layer_evaluations`); by default each runs from its start layer alone.
    ``repeat``: each suffix stands for this many examples of its width (a plan of 10^15 equal examples
    passes one width, not a list of 10^15)."""
    per_layer_suffix = repeat * sum(layer_flops(shape, s, prefix) for s in suffixes)
    per_layer_prefix = layer_flops(shape, prefix) if prefix else 0.0
    unembed = 2 * scored * shape.d_model * shape.d_vocab
    full = shape.n_layers * (per_layer_prefix + per_layer_suffix) + unembed
    layers = sum(shape.n_layers - l for l in start_layers) if layer_evaluations is None else layer_evaluations
    cached = full + layers * (per_layer_prefix + per_layer_suffix) + len(start_layers) * unembed
    whole = repeat * sum(layer_flops(shape, prefix + s) for s in suffixes)
    plain = (1 + len(start_layers)) * (shape.n_layers * whole + unembed)
    return {"cached": cached, "plain": plain}


def gpu_hours(shape: Shape, n_examples: int, tokens_per_example: int, shared_prefix: int,
              n_heads_screened: int | None = None, flops_per_second: float = 200e12) -> GpuHours:
    """Expected GPU hours for a full screen, from the FLOP count at a stated sustained throughput."""
    heads = n_heads_screened or shape.n_layers * shape.n_heads
    per_layer = [l for l in range(shape.n_layers) for _ in range(shape.n_heads)][:heads]
    suffix = tokens_per_example - shared_prefix
    counts = screen_flops(shape, shared_prefix, [suffix], n_examples * 3, per_layer, repeat=n_examples)
    return {"cached": counts["cached"] / flops_per_second / 3600, "plain": counts["plain"] / flops_per_second / 3600,
            "flops": counts, "assumed_flops_per_second": flops_per_second}
