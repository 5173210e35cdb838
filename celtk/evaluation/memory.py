"""The memory check every stage makes before its first pass: a prepared request list priced on its model by the
activation model of ``celtk plan`` (:mod:`celtk.evaluation.activations`), against the memory free on the model's
device; a stage that would not fit is refused, naming the batch size that would."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from celtk.errors import ConfigError
from celtk.evaluation.activations import Shape, TaskSize, cached_stage_bytes, plain_pass_bytes
from celtk.evaluation.prompts import MIN_SHARED_PREFIX, Prepared, shared_prefix_length

if TYPE_CHECKING:
    from celtk.models import Model


def available_memory(device: torch.device) -> int:
    """Bytes free for activations: CUDA's free memory, or the kernel's MemAvailable on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 << 30  # unknown: assume 4 GiB


def auto_batch(model: Model, prepared: Prepared, *, free_bytes: int | None = None, fraction: float = 0.5,
               cap: int = 512) -> tuple[int, int]:
    """``(batch_size, rows_per_pass)`` that fit ``fraction`` of the free memory: the cached layer
    inputs of every example stay resident; one pass holds, per row, the residual stream and its
    projections, the MLP's hidden activations and the eager attention scores and pattern."""
    free = available_memory(model.device) if free_bytes is None else free_bytes
    width = torch.finfo(model.dtype).bits // 8
    seq = max(len(r.context) + len(r.continuation) for r in prepared.requests) if prepared.requests else 1
    d_ff = model.arch.d_mlp
    resident = len(prepared.requests) * seq * model.d_model * width * 2
    per_row = seq * (model.d_model * 8 + 3 * d_ff + 2 * model.n_heads * seq
                     + 2 * model.n_heads * model.d_head * 2) * width
    budget = fraction * free - resident
    rows = int(max(1, min(cap, budget // max(per_row, 1))))
    return max(1, min(rows, 32)), rows


def task_size_of(prepared: Prepared, n_heldout: int = 0, share_prefix: bool = True) -> TaskSize:
    """The :class:`TaskSize` of a prepared request list, as the cached screener will see it."""
    requests = prepared.requests
    n_examples = len(prepared.examples)
    prefix = shared_prefix_length(requests) if share_prefix else 0
    prefix = prefix if prefix >= MIN_SHARED_PREFIX else 0
    return TaskSize("prepared", prepared.kind, n_examples, n_heldout,
                    prompt_tokens=max(len(r.context) for r in requests),
                    continuation_tokens=max(len(r.continuation) for r in requests),
                    choices=max(1, round(len(requests) / max(n_examples, 1))), shared_prefix=prefix,
                    mean_prompt_tokens=round(sum(len(r.context) for r in requests) / len(requests)))


def stage_bytes(model: Model, prepared: Prepared, batch_size: int, rows_per_pass: int | None = None, *,
                cached: bool = True, share_prefix: bool = True) -> float:
    """Peak activation bytes of scoring ``prepared`` on ``model`` (weights excluded: they are loaded):
    by the cached screener (``cached``; :func:`cached_stage_bytes`) or by plain passes, one batch at a
    time (the held-out stage and :func:`celtk.evaluation.evaluate`)."""
    if not prepared.requests:
        return 0.0
    shape, db = Shape.of(model), model.dtype.itemsize
    size = task_size_of(prepared, share_prefix=share_prefix)
    if cached:
        return cached_stage_bytes(shape, size, len(prepared.examples), batch_size, rows_per_pass or batch_size, db)
    width = size.prompt_tokens + size.continuation_tokens - 1
    return plain_pass_bytes(shape, min(batch_size, len(prepared.requests)), width,
                            batch_size * size.continuation_tokens, db)


def check_memory(model: Model, prepared: Prepared, batch_size: int, rows_per_pass: int | None = None, *,
                 cached: bool = True, share_prefix: bool = True, free_bytes: int | None = None,
                 what: str = "this stage") -> None:
    """Refuse, before any work, a stage whose activations (:func:`stage_bytes`, the model of ``celtk
    plan``) exceed the memory free on the model's device; the message names the batch size that fits.
    ``rows_per_pass``: the cached screener's rows per forward (it runs ``max(rows_per_pass, batch)``)."""
    free = available_memory(model.device) if free_bytes is None else free_bytes

    def need(batch: int) -> float:
        rows = max(rows_per_pass or batch, batch)
        return stage_bytes(model, prepared, batch, rows, cached=cached, share_prefix=share_prefix)

    needed = need(batch_size)
    if needed <= free:
        return
    low, high = 0, batch_size - 1  # the largest batch size that fits
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if need(mid) <= free else (low, mid - 1)
    rows = f" ({max(rows_per_pass or batch_size, batch_size)} rows per pass)" if cached else ""
    where = f"the {_bytes(free)} available on {model.device}"
    if low >= 1:
        advice = (f"batch size {low} would fit (estimated {_bytes(need(low))}): set batch_size = {low} "
                  f"(--batch-size {low}) or 'auto'")
    else:
        advice = ("no batch size fits: the examples' own cached activations take that much; use fewer or shorter "
                  "examples, fewer shots, or a device with more memory")
    raise ConfigError(f"{what} on {len(prepared.examples):,} examples needs about {_bytes(needed)} of activations "
                      f"at batch size {batch_size}{rows}, more than {where}; {advice}. (The estimate of `celtk plan`.)")


def _bytes(n: int | float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"
