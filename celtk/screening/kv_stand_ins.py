"""The stand-in KV caches the cached screener hands its decoder layers: a layer calls ``update(k, v, layer)`` on
the cache it is given and attends to what comes back, and the stand-in notes in ``consulted`` that it was asked (a
layer that never asks would silently drop the shared prefix: :func:`celtk.screening.layer_replay.call_layer`
checks). :class:`RecordKV` keeps each layer's keys/values (the shared prefix's, intact or under a tree node);
:class:`PrefixKV` prepends a shared prefix's keys/values to a batch's own; :class:`TreeKV` holds the shared prefix's
keys/values under each group of the prefix tree, from which each layer's :class:`PrefixKV` is made."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from jaxtyping import Float
from torch import Tensor


@runtime_checkable
class StandInCache(Protocol):
    """What a replayed decoder layer is handed as its KV cache (:class:`RecordKV`, :class:`PrefixKV`, the generation
    screener's own): ``update`` as an HF cache's (extra arguments ignored), and ``consulted``, the layers that asked."""

    consulted: set[int]

    def update(self, k: Tensor, v: Tensor, layer_idx: int, *args: object, **kwargs: object) -> tuple[Tensor, Tensor]:
        ...


class RecordKV:
    """A stand-in KV cache: keeps each layer's keys/values, attends to nothing earlier."""

    def __init__(self) -> None:
        self.keys: dict[int, Tensor] = {}  # [rows, kv_head, pos, d_head]
        self.values: dict[int, Tensor] = {}
        self.consulted: set[int] = set()

    def update(self, k: Float[Tensor, "rows kv_head pos d_head"], v: Float[Tensor, "rows kv_head pos d_head"],
               layer_idx: int, *args: object, **kwargs: object
               ) -> tuple[Float[Tensor, "rows kv_head pos d_head"], Float[Tensor, "rows kv_head pos d_head"]]:
        self.consulted.add(layer_idx)
        self.keys[layer_idx], self.values[layer_idx] = k, v
        return k, v


class PrefixKV:
    """A stand-in KV cache that prepends fixed prefix keys/values: ``keys[layer]`` ``[g, kv_head, prefix, d_head]``
    holds one prefix per set, and batch row ``b·g + j`` attends to set ``j``'s. Each layer's keys/values
    are written once into one buffer (the prefix broadcast over the batch), the same numbers as
    concatenating a per-row copy of the prefix with the row's own, without making that copy."""

    def __init__(self, keys: dict[int, Float[Tensor, "g kv_head prefix d_head"]],
                 values: dict[int, Float[Tensor, "g kv_head prefix d_head"]]) -> None:
        self.keys, self.values = keys, values
        self.consulted: set[int] = set()

    def update(self, k: Float[Tensor, "rows kv_head pos d_head"], v: Float[Tensor, "rows kv_head pos d_head"],
               layer_idx: int, *args: object, **kwargs: object
               ) -> tuple[Float[Tensor, "rows kv_head prefix_pos d_head"],
                          Float[Tensor, "rows kv_head prefix_pos d_head"]]:
        self.consulted.add(layer_idx)
        return _prefixed(self.keys[layer_idx], k), _prefixed(self.values[layer_idx], v)


def _prefixed(prefix: Float[Tensor, "g kv_head prefix d_head"],
              own: Float[Tensor, "rows kv_head pos d_head"]) -> Float[Tensor, "rows kv_head prefix_pos d_head"]:
    """``cat([prefix of set r % g for each row r, own], dim=-2)``, written straight into one buffer."""
    g, p = prefix.shape[0], prefix.shape[2]
    rows, heads, pos, d = own.shape
    out = own.new_empty(rows, heads, p + pos, d)
    out.view(rows // g, g, heads, p + pos, d)[:, :, :, :p] = prefix
    out[:, :, p:] = own
    return out


@dataclass
class TreeKV:
    """The shared prefix's keys/values of each group of the tree at each layer it runs,
    ``[g, kv_head, prefix, d_head]``; or, with ``intact``, the intact prefix's for every group
    (``[1, kv_head, prefix, d_head]``, broadcast: ablation at the example's positions only)."""

    keys: dict[tuple[tuple[int, ...], int], Tensor] = field(default_factory=dict)
    values: dict[tuple[tuple[int, ...], int], Tensor] = field(default_factory=dict)
    intact: tuple[dict[int, Tensor], dict[int, Tensor]] | None = None  # the intact prefix's keys, values

    def at(self, key: tuple[int, ...], layer: int) -> tuple[Tensor, Tensor]:
        """Group ``key``'s prefix keys and values at ``layer``."""
        if self.intact is not None:
            keys, values = self.intact
            return keys[layer], values[layer]
        return self.keys[key, layer], self.values[key, layer]
