"""Replaying a decoder's layers from captured inputs, as both screeners do: one forward that keeps what every
layer receives (:func:`capture_forward`), then single layers re-run from it with the examples repeated once per
ablation (:func:`call_layer`, :func:`expand_rows`; row ``b·g + j`` is example ``b`` under ablation ``j``), each
row's heads ablated by hooks (:func:`with_masks`), and a check that every layer consulted the KV cache it was given
(:func:`check_cache_filled`; a renamed cache keyword in a newer transformers raises
:class:`celtk.errors.KVCacheIgnoredError` instead of silently dropping the shared prefix)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from importlib.metadata import version
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import torch
from einops import repeat
from jaxtyping import Bool, Float
from torch import Tensor

from celtk.ablation import ablate_rows
from celtk.ablation_kinds import RowSpec
from celtk.errors import KVCacheIgnoredError
from celtk.models import CACHE_KEYWORDS, Model
from celtk.screening.kv_stand_ins import StandInCache

# the keyword arguments a decoder layer was called with, as captured and passed back: tensors, the rotary (cos, sin)
# pair, flags, a cache; what each holds is the decoder's business
LayerKwargs = dict[str, Any]
T = TypeVar("T")


@runtime_checkable
class FilledCache(Protocol):
    """An HF KV cache, as :func:`check_cache_filled` asks it how many positions each layer holds."""

    def get_seq_length(self, layer_idx: int = 0) -> int: ...


def decoder_layers(model: Model) -> torch.nn.ModuleList:
    """The decoder's blocks, found through the bridge's adapter (``model.arch``)."""
    return model.arch.blocks


def _ignored(model: Model, index: int, keyword: str) -> KVCacheIgnoredError:
    return KVCacheIgnoredError(
        f"Decoder layer {index} of {model.architecture} ran without consulting the KV cache celtk passed it as "
        f"{keyword!r}: its cache keyword has probably been renamed (transformers {version('transformers')}), and the "
        "shared prefix would silently drop out of attention. Screen with share_prefix=False, or install the "
        "transformers version celtk pins (pyproject.toml).")


def check_cache_filled(model: Model, cache: FilledCache, expected: int) -> None:
    """Raise :class:`KVCacheIgnoredError` unless every layer appended to ``cache`` (``expected`` positions each)."""
    for index in range(model.n_layers):
        if cache.get_seq_length(index) != expected:
            raise _ignored(model, index, model.arch.cache_keyword)


def _layer_output(out: object) -> Float[Tensor, "rows pos d_model"]:
    return cast(Tensor, out[0] if isinstance(out, tuple) else out)  # a decoder layer's hidden states


def _on_device(model: Model, inputs: dict[str, object]) -> dict[str, object]:
    """The decoder's inputs with every tensor moved to the model's device."""
    return {k: v.to(model.device) if isinstance(v, Tensor) else v for k, v in inputs.items()}


def capture_forward(model: Model, **inputs: object
                     ) -> tuple[list[Float[Tensor, "batch pos d_model"]], list[LayerKwargs],
                                Float[Tensor, "batch pos d_model"]]:
    """Run the decoder once; return each layer's input and keyword arguments, and the final-normed hidden."""
    layers = decoder_layers(model)
    resid: list[Tensor | None] = [None] * len(layers)
    kwargs_seen: list[LayerKwargs | None] = [None] * len(layers)
    handles = []
    for index, layer in enumerate(layers):
        def pre_hook(module: torch.nn.Module, args: tuple[object, ...], kwargs: LayerKwargs, index: int = index
                     ) -> None:
            resid[index], kwargs_seen[index] = model.arch.layer_call(args, kwargs)
        handles.append(layer.register_forward_pre_hook(pre_hook, with_kwargs=True))
    try:
        out = model.arch.decoder(**_on_device(model, inputs))
    finally:
        for handle in handles:
            handle.remove()
    # every layer ran, so its pre-hook filled its entries
    return cast("list[Tensor]", resid), cast("list[LayerKwargs]", kwargs_seen), out.last_hidden_state


class _Captured(BaseException):
    """Raised by :func:`capture_inputs`'s hook once layer 0's call is recorded, so no layer runs. A
    ``BaseException``, so that no ``except Exception`` between the hook and the caller takes it for an error."""


def uniform_layers(model: Model) -> bool:
    """Whether every decoder layer receives the same keyword arguments: the config names one attention type (or
    none) for all its layers. Layers of different types (sliding-window and full attention) get different masks."""
    kinds = getattr(getattr(model.hf_model, "config", None), "layer_types", None)
    return kinds is None or len(set(kinds)) <= 1


def capture_inputs(model: Model, **inputs: object
                   ) -> tuple[Float[Tensor, "batch pos d_model"], list[LayerKwargs]] | None:
    """Layer 0's input and the keyword arguments every layer receives, without running any layer: the decoder
    is stopped in layer 0's pre-hook. What a replay from layer 0 needs, at the cost of the embedding alone
    (:func:`capture_forward` runs every layer). ``None`` when the layers' keyword arguments differ
    (:func:`uniform_layers`) or the decoder never called layer 0: capture the whole forward then."""
    if not uniform_layers(model):
        return None
    layers = decoder_layers(model)
    seen: list[tuple[Tensor, LayerKwargs]] = []

    def pre_hook(module: torch.nn.Module, args: tuple[object, ...], kwargs: LayerKwargs) -> None:
        seen.append(model.arch.layer_call(args, kwargs))
        raise _Captured

    handle = layers[0].register_forward_pre_hook(pre_hook, with_kwargs=True)
    try:
        model.arch.decoder(**_on_device(model, inputs))
    except _Captured:
        pass
    finally:
        handle.remove()
    if not seen:
        return None
    resid, kwargs = seen[0]
    return resid, [dict(kwargs) for _ in layers]


def expand_rows(value: T, batch: int, copies: int) -> T:
    """Repeat every per-row tensor (leading dim == batch, ndim >= 2) ``copies`` times: ``batch … -> (batch g) …``."""
    if copies == 1:
        return value
    if isinstance(value, Tensor):
        if value.ndim >= 2 and value.shape[0] == batch and batch > 1:
            return cast(T, repeat(value, "batch ... -> (batch g) ...", g=copies))
        return value
    if isinstance(value, tuple):
        return cast(T, tuple(expand_rows(v, batch, copies) for v in value))
    return value


def call_layer(model: Model, index: int, hidden: Float[Tensor, "rows pos d_model"], kwargs: LayerKwargs, rows: int,
               copies: int, cache: StandInCache | None) -> Float[Tensor, "rows pos d_model"]:
    """Run block ``index`` on ``hidden`` (``rows`` examples × ``copies`` ablations) with the captured
    keyword arguments, under the architecture's cache keyword; check that it consulted ``cache`` (a
    stand-in with ``update()`` and a ``consulted`` set of layer indices, or ``None``)."""
    keyword = model.arch.cache_keyword
    kw = {k: expand_rows(v, rows, copies) for k, v in kwargs.items() if k not in CACHE_KEYWORDS}
    kw[keyword] = cache
    kw["use_cache"] = cache is not None
    if cache is not None:
        cache.consulted.discard(index)
    out = _layer_output(decoder_layers(model)[index](hidden, **kw))
    if cache is not None and index not in cache.consulted:
        raise _ignored(model, index, keyword)
    return out


def with_masks(model: Model, masks: Mapping[int, Bool[Tensor, "rows head_index"] | RowSpec]) -> ExitStack:
    """Hooks zeroing (a :class:`RowSpec`: replacing), per layer, the heads each row's mask marks
    (entered as one context)."""
    stack = ExitStack()
    for layer, mask in masks.items():
        stack.enter_context(ablate_rows(model, layer, mask))
    return stack
