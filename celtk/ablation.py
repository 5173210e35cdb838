"""The paper's intervention: zero a head's output ``z`` just before the output projection.

``ablate`` does it with TransformerLens hooks on ``blocks.{l}.attn.hook_z``;
``export_ablated`` bakes the same change into a plain HF checkpoint by zeroing the head's
inputs to the attention output projection (``blocks.{l}.attn.o``, found through the bridge:
columns of an ``nn.Linear``, rows of GPT-2's transposed ``Conv1D``), the same function of the input.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from einops import rearrange
from jaxtyping import Bool, Float
from torch import Tensor

from celtk.errors import RunStoreError
from celtk.heads import HeadSet
from celtk.models import Model


def hook_z_name(layer: int) -> str:
    """The TransformerLens hook on layer ``layer``'s per-head attention output ``z``."""
    return f"blocks.{layer}.attn.hook_z"


def _zero_heads_hook(heads: list[int]) -> Any:
    def hook(z: Float[Tensor, "batch pos head_index d_head"], hook: Any) -> Float[Tensor, "batch pos head_index d_head"]:
        mask = torch.zeros(z.shape[2], dtype=torch.bool, device=z.device)
        mask[heads] = True
        return z.masked_fill(mask[None, None, :, None], 0.0)

    return hook


def _row_mask_hook(mask: Bool[Tensor, "batch head_index"]) -> Any:
    """Zero head ``h`` in row ``b`` where ``mask[b, h]``: one layer, different heads per row."""

    def hook(z: Float[Tensor, "batch pos head_index d_head"], hook: Any) -> Float[Tensor, "batch pos head_index d_head"]:
        if z.shape[0] != mask.shape[0] or z.shape[2] != mask.shape[1]:
            raise ValueError(f"row mask of shape {tuple(mask.shape)} does not fit hook_z of shape {tuple(z.shape)}")
        return z.masked_fill(rearrange(mask, "batch head_index -> batch 1 head_index 1").to(z.device), 0.0)

    return hook


@contextmanager
def hook_z_hooks(model: Model, hooks: dict[int, Any]) -> Iterator[Model]:
    """Add ``hooks[l]`` to ``blocks.{l}.attn.hook_z`` for each layer ``l`` while the body runs, then remove
    exactly those (a hook gets ``z: [batch, pos, head_index, d_head]`` and returns its replacement)."""
    handles = []
    try:
        for layer, fn in sorted(hooks.items()):
            handles.append(model.bridge.hook_dict[hook_z_name(layer)].add_hook(fn))
        yield model
    finally:
        for handle in handles:
            handle.hook.remove()


@contextmanager
def ablate(model: Model, heads: HeadSet | str) -> Iterator[Model]:
    """Zero the output of every head in ``heads`` at every position while the block runs.

    Composes with other hooks (it adds and removes only its own) and restores the intact
    model on exit, also when the body raises. Under grouped-query attention only the
    query head's output is zeroed; the shared key/value heads are untouched.

    Example:
        >>> with ablate(model, "L5H3,L10H0"):  # doctest: +SKIP
        ...     logits = model.bridge(tokens)
    """
    if isinstance(heads, str):
        heads = HeadSet.parse(heads)
    model.validate_heads(heads)
    with hook_z_hooks(model, {layer: _zero_heads_hook(hs) for layer, hs in heads.by_layer().items()}):
        yield model


@contextmanager
def ablate_rows(model: Model, layer: int, mask: Bool[Tensor, "batch head_index"]) -> Iterator[Model]:
    """Ablate different heads of one layer in different batch rows (the screener's batching)."""
    with hook_z_hooks(model, {layer: _row_mask_hook(mask)}):
        yield model


def zero_output_columns(model: Model, state: dict[str, Tensor], heads: HeadSet) -> dict[str, Tensor]:
    """Copy of ``state`` (HF names) with each head's inputs ``h·d_head:(h+1)·d_head`` of its layer's
    attention output projection zeroed (the projection and its layout are ``model.arch``'s)."""
    out = dict(state)
    for layer, hs in heads.by_layer().items():
        name = model.arch.output_weights[layer]
        out[name] = model.arch.zero_head_outputs(out[name], hs, model.d_head)
    return out


def export_ablated(model: Model, heads: HeadSet | str, out_dir: str | Path) -> Path:
    """Write a standard HF checkpoint of ``model`` with ``heads`` removed by weight zeroing.

    The directory holds safetensors weights, the config, the tokenizer and
    ``celtk_ablation.json`` naming the heads; any HF-compatible tool runs it without hooks.
    It is written under a temporary name and renamed into place.
    """
    from transformers import AutoModelForCausalLM

    if isinstance(heads, str):
        heads = HeadSet.parse(heads)
    model.validate_heads(heads)
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise RunStoreError(f"Export directory {out_dir} already exists; choose a new directory.")
    state = zero_output_columns(model, model.hf_state_dict(), heads)
    fresh = AutoModelForCausalLM.from_config(model.hf_model.config, dtype=model.dtype)
    fresh.load_state_dict(state, strict=True)
    fresh.config.architectures = [model.architecture]
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=out_dir.parent))
    try:
        fresh.save_pretrained(scratch, safe_serialization=True)
        model.tokenizer.save_pretrained(scratch)
        note = {"base_model": model.name, "weight_hash": model.weight_hash, "ablated_heads": heads.names(),
                "method": f"inputs h*d_head:(h+1)*d_head of each layer's attention output projection set to zero "
                          f"({'rows' if model.arch.output_transposed else 'columns'}; = hook_z zeroing)"}
        (scratch / "celtk_ablation.json").write_text(json.dumps(note, indent=2) + "\n")
        os.chmod(scratch, 0o755)
        os.replace(scratch, out_dir)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return out_dir
