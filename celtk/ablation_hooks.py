"""Hooks on ``blocks.{l}.attn.hook_z``, the per-head attention output ``z`` every ablation replaces: its name
and a context manager that adds hooks there and removes exactly those.

It sits below :mod:`celtk.ablation` and :mod:`celtk.ablation_kinds`, which both hook ``z`` (the ablation itself;
the reference values the mean and resample kinds record), so neither imports the other for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from torch import Tensor

from celtk.registry import annotation_names

if TYPE_CHECKING:  # at run time only its attributes are read, and importing it would load the model code
    from celtk.models import Model

__getattr__ = annotation_names({"Model": "celtk.models"})  # what the type checks under pytest resolve on first need

ZHook = Callable[[Tensor, object], Tensor]
"""A hook on ``hook_z``: it gets ``z: [batch, pos, head_index, d_head]`` and the hook point (unread), and returns
the replacement ``z``."""


def hook_z_name(layer: int) -> str:
    """The TransformerLens hook on layer ``layer``'s per-head attention output ``z``."""
    return f"blocks.{layer}.attn.hook_z"


@contextmanager
def hook_z_hooks(model: Model, hooks: dict[int, ZHook]) -> Iterator[Model]:
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
