"""Cached-activation scoring of head-set ablations (stage 1 of Algorithm 1, and the
subset evaluations of stage 2).

For each batch the intact model runs once and the screener keeps what each decoder
layer receives (its residual-stream input and the keyword arguments the model passes
it: attention mask, rotary embeddings). An ablation whose earliest head is in layer
``l`` then needs only layers ``l … L−1``, run from the cached input. Layers are visited
in order and each batch's intact residual is advanced one layer at a time, so memory
holds one layer's residuals of the intact model.

Sets are walked as a prefix tree (:mod:`celtk.screening.prefix_tree`): sorted by layer, the sets
that share their lower heads share the residual those heads leave, so it is computed once
and branched, batch by batch and depth first (one group of states per depth is held).
Several tree nodes run together as copies of the batch, each copy with its own heads
ablated (zeroed, or replaced as the screener's :class:`celtk.ablation_kinds.Ablation` says: each
layer's per-row mask becomes a :class:`celtk.ablation_kinds.RowSpec` on its way to the layer).
Which rows share a forward changes; the arithmetic of a row does not, so a set
scored in the tree gets the numbers it gets scored alone (tests/integration/test_prefix_tree.py).

Shared prefix: when every request starts with the same tokens (the few-shot shots),
those tokens are run once per ablation, not once per example. Their keys and values
(intact, or under each tree node from its layer on, walked once before the batches) are
prepended in attention to the examples' own tokens, as a KV cache would. Every layer must
consult the cache it is given; one that does not (a renamed cache keyword in a newer
transformers) raises :class:`celtk.errors.KVCacheIgnoredError` instead of silently dropping the prefix.

Row layout: a pass over a batch of ``batch`` examples under ``g`` ablations has ``batch·g``
rows, row ``b·g + j`` being example ``b`` under ablation ``j`` (einops ``(batch g)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from einops import repeat
from jaxtyping import Bool, Float, Float64
from torch import Tensor

from celtk.ablation import ablate, ablate_rows, as_ablation
from celtk.ablation_kinds import Ablation, AblationKind, RowSpec, common_prefix
from celtk.boundary import public
from celtk.errors import ConfigError, KVCacheIgnoredError
from celtk.evaluation.memory import available_memory
from celtk.evaluation.prompts import MIN_SHARED_PREFIX, Prepared, Request, shared_prefix_length
from celtk.evaluation.results import EvalResult
from celtk.evaluation.scoring import Batch, ablated, aggregate, make_batches, score_hidden, score_requests
from celtk.heads import HeadSet
from celtk.models import CACHE_KEYWORDS, Model
from celtk.screening.fused import FUSED_LAYERS, FusedLayer, fused_layers, has_hooks
from celtk.screening.prefix_tree import Node, prefix_tree

REPLAYS = ("auto", "fused", "bridge")
# how a group of tree nodes turns its boolean masks (and its size) into what _layer takes
_Specs = Callable[[dict[int, Bool[Tensor, "rows_g head_index"]], int],
                  dict[int, "Bool[Tensor, 'rows_g head_index'] | RowSpec"]]


class _RecordKV:
    """A stand-in KV cache: keeps each layer's keys/values, attends to nothing earlier."""

    def __init__(self) -> None:
        self.keys: dict[int, Tensor] = {}  # [rows, kv_head, pos, d_head]
        self.values: dict[int, Tensor] = {}
        self.consulted: set[int] = set()

    def update(self, k: Float[Tensor, "rows kv_head pos d_head"], v: Float[Tensor, "rows kv_head pos d_head"],
               layer_idx: int, *args: Any, **kwargs: Any
               ) -> tuple[Float[Tensor, "rows kv_head pos d_head"], Float[Tensor, "rows kv_head pos d_head"]]:
        self.consulted.add(layer_idx)
        self.keys[layer_idx], self.values[layer_idx] = k, v
        return k, v


class _PrefixKV:
    """A stand-in KV cache that prepends fixed prefix keys/values: ``keys[layer]`` ``[g, kv_head, prefix, d_head]``
    holds one prefix per set, and batch row ``b·g + j`` attends to set ``j``'s. Each layer's keys/values
    are written once into one buffer (the prefix broadcast over the batch), the same numbers as
    concatenating a per-row copy of the prefix with the row's own, without making that copy."""

    def __init__(self, keys: dict[int, Float[Tensor, "g kv_head prefix d_head"]],
                 values: dict[int, Float[Tensor, "g kv_head prefix d_head"]]) -> None:
        self.keys, self.values = keys, values
        self.consulted: set[int] = set()

    def update(self, k: Float[Tensor, "rows kv_head pos d_head"], v: Float[Tensor, "rows kv_head pos d_head"],
               layer_idx: int, *args: Any, **kwargs: Any
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
class _Prefix:
    length: int
    resid: list[Float[Tensor, "1 prefix d_model"]]  # the input of each layer
    layer_kwargs: list[dict[str, Any]]
    keys: dict[int, Float[Tensor, "1 kv_head prefix d_head"]]  # intact
    values: dict[int, Float[Tensor, "1 kv_head prefix d_head"]]


@dataclass
class _BatchState:
    batch: Batch
    resid: Float[Tensor, "batch pos d_model"]  # input to the current layer
    layer_kwargs: list[dict[str, Any]]


def decoder_layers(model: Model) -> torch.nn.ModuleList:
    """The decoder's blocks, found through the bridge's adapter (``model.arch``)."""
    return model.arch.blocks


def _ignored(model: Model, index: int, keyword: str) -> KVCacheIgnoredError:
    import transformers

    return KVCacheIgnoredError(
        f"Decoder layer {index} of {model.architecture} ran without consulting the KV cache celtk passed it as "
        f"{keyword!r}: its cache keyword has probably been renamed (transformers {transformers.__version__}), and the "
        "shared prefix would silently drop out of attention. Screen with share_prefix=False, or install the "
        "transformers version celtk pins (pyproject.toml).")


def check_cache_filled(model: Model, cache: Any, expected: int) -> None:
    """Raise :class:`KVCacheIgnoredError` unless every layer appended to ``cache`` (``expected`` positions each)."""
    for index in range(model.n_layers):
        if cache.get_seq_length(index) != expected:
            raise _ignored(model, index, model.arch.cache_keyword)


def _layer_output(out: Any) -> Float[Tensor, "rows pos d_model"]:
    return out[0] if isinstance(out, tuple) else out


def capture_forward(model: Model, **inputs: Any
                     ) -> tuple[list[Float[Tensor, "batch pos d_model"]], list[dict[str, Any]],
                                Float[Tensor, "batch pos d_model"]]:
    """Run the decoder once; return each layer's input and keyword arguments, and the final-normed hidden."""
    layers = decoder_layers(model)
    resid: list[Any] = [None] * len(layers)
    kwargs_seen: list[Any] = [None] * len(layers)
    handles = []
    for index, layer in enumerate(layers):
        def pre_hook(module, args, kwargs, index=index):
            resid[index], kwargs_seen[index] = model.arch.layer_call(args, kwargs)
        handles.append(layer.register_forward_pre_hook(pre_hook, with_kwargs=True))
    try:
        out = model.arch.decoder(**{k: v.to(model.device) if isinstance(v, Tensor) else v for k, v in inputs.items()})
    finally:
        for handle in handles:
            handle.remove()
    return resid, kwargs_seen, out.last_hidden_state


def _expand(value: Any, batch: int, copies: int) -> Any:
    """Repeat every per-row tensor (leading dim == batch, ndim >= 2) ``copies`` times: ``batch … -> (batch g) …``."""
    if copies == 1:
        return value
    if isinstance(value, Tensor):
        if value.ndim >= 2 and value.shape[0] == batch and batch > 1:
            return repeat(value, "batch ... -> (batch g) ...", g=copies)
        return value
    if isinstance(value, tuple):
        return tuple(_expand(v, batch, copies) for v in value)
    return value


def call_layer(model: Model, index: int, hidden: Float[Tensor, "rows pos d_model"], kwargs: dict[str, Any], rows: int,
               copies: int, cache: Any) -> Float[Tensor, "rows pos d_model"]:
    """Run block ``index`` on ``hidden`` (``rows`` examples × ``copies`` ablations) with the captured
    keyword arguments, under the architecture's cache keyword; check that it consulted ``cache`` (a
    stand-in with ``update()`` and a ``consulted`` set of layer indices, or ``None``)."""
    keyword = model.arch.cache_keyword
    kw = {k: _expand(v, rows, copies) for k, v in kwargs.items() if k not in CACHE_KEYWORDS}
    kw[keyword] = cache
    kw["use_cache"] = cache is not None
    if cache is not None:
        cache.consulted.discard(index)
    out = _layer_output(decoder_layers(model)[index](hidden, **kw))
    if cache is not None and index not in cache.consulted:
        raise _ignored(model, index, keyword)
    return out


def _row_masks(model: Model, sets: Sequence[HeadSet], rows: int) -> dict[int, Bool[Tensor, "rows_g head_index"]]:
    """Per layer, a ``[(batch g), head_index]`` mask with ``batch = rows``: row b·g + j ablates ``sets[j]``."""
    per_set: dict[int, Tensor] = {}
    for j, heads in enumerate(sets):
        for head in heads:
            per_set.setdefault(head.layer, torch.zeros(len(sets), model.n_heads, dtype=torch.bool))[j, head.head] = True
    return {layer: repeat(mask, "g head_index -> (batch g) head_index", batch=rows) for layer, mask in per_set.items()}


def with_masks(model: Model, masks: dict[int, Bool[Tensor, "rows head_index"] | RowSpec]) -> ExitStack:
    """Hooks zeroing (a :class:`RowSpec`: replacing), per layer, the heads each row's mask marks
    (entered as one context)."""
    stack = ExitStack()
    for layer, mask in masks.items():
        stack.enter_context(ablate_rows(model, layer, mask))
    return stack


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


class CachedScreener:
    """Scores many head-set ablations of one prepared request list from cached activations.

    Args:
        model: the model (hooks added here are removed before each call returns).
        prepared: tokenised requests (:func:`celtk.evaluation.prompts.prepare`).
        batch_size: examples per batch.
        rows_per_pass: the largest number of rows (examples × ablations) in one forward.
        share_prefix: run a prefix shared by all requests once per ablation.
        replay: how layers are re-run: ``fused`` (:mod:`celtk.screening.fused`, Llama-family layers with fused
            attention, no bridge hooks), ``bridge`` (the TransformerLens blocks under hook_z hooks), or
            ``auto`` (fused where the architecture allows and the model carries no hooks of its own,
            else bridge). The two agree to float rounding (tests/integration/test_fused.py; bit for bit on
            the demo's screen), not always bit for bit: the fused attention groups its products
            differently. So under the fused replay the intact pass is also scored through it (the
            bridge's decoder still supplies each layer's inputs), and intact and ablated scores come
            from one arithmetic: the null ablation (``HeadSet()``) then checks the replay's batching.
        ablation: what replaces an ablated head's ``z`` (default zero; ``"scale:α"``, or an
            :class:`celtk.ablation_kinds.Ablation` with mean or resampled values). Under resample the
            shared prefix is cut to the tokens every reference example shares with it and every example's prompt
            shares with its reference's (read unmoved, :meth:`celtk.ablation_kinds.Ablation.alignment`), where each
            reference's ``z`` is the prefix's own.
    """

    @public
    def __init__(self, model: Model, prepared: Prepared, *, batch_size: int = 16, rows_per_pass: int = 64,
                 share_prefix: bool = True, replay: str = "auto",
                 ablation: Ablation | AblationKind | str | None = None) -> None:
        if replay not in REPLAYS:
            raise ConfigError(f"Unknown replay {replay!r}; choose one of {', '.join(REPLAYS)}.")
        self.model, self.prepared, self.requested = model, prepared, replay
        self.ablation = as_ablation(ablation)
        self._choose_replay()
        self.batch_size, self.rows_per_pass = batch_size, max(rows_per_pass, batch_size)
        self.prefix_len = shared_prefix_length(prepared.requests) if share_prefix else 0
        self._references: Tensor | None = None
        self._aligns: Tensor | None = None
        if self.ablation.reference is not None:  # resample: each example's reference, and a prefix they all share
            self._references = self.ablation.assign([e.content_hash for e in prepared.examples])
            # per request: its reference's positions it reads, aligned on its last prompt token
            self._aligns = self.ablation.alignment(self._references[[r.example for r in prepared.requests]],
                                                   [r.context for r in prepared.requests])
            if self.prefix_len:
                ours = prepared.requests[0].context[:self.prefix_len]
                self.prefix_len = common_prefix([ours, self.ablation.reference.tokens[:self.prefix_len]])
                if len(self._aligns):  # every row reads the prefix's positions unmoved
                    self.prefix_len = min(self.prefix_len, int(self._aligns[:, 0].min()))
        self._boundaries: Tensor | None = None
        if not self.ablation.everywhere:  # prefix/example positions: the cached prefix lies before every boundary
            self._boundaries = self.ablation.boundaries([r.context for r in prepared.requests])
            if self.prefix_len and len(self._boundaries):
                self.prefix_len = min(self.prefix_len, int(self._boundaries.min()))
        if self.prefix_len < MIN_SHARED_PREFIX:
            self.prefix_len = 0

    def run(self, sets: Iterable[HeadSet], on_layer: Callable[[int, dict[HeadSet, EvalResult]], None] | None = None,
            on_intact: Callable[[EvalResult], None] | None = None,
            on_work: Callable[[int, int], None] | None = None) -> tuple[EvalResult, dict[HeadSet, EvalResult]]:
        """Score every set; ``on_intact`` fires once the intact pass is done, ``on_layer(l, results)``
        as the sets whose earliest head is in layer ``l`` finish. The sets are walked as a prefix tree
        (:mod:`celtk.screening.prefix_tree`): the state after a set's lower heads is computed once for every set
        that extends them. ``HeadSet()`` (the null ablation) is scored through the ablated replay from
        layer 0, so it checks that path against the intact one.

        ``on_work(done, total)`` fires after the intact pass and after every forward of a group of sets over a
        batch, in units of decoder-layer rows (a set replayed from layer ``l`` costs ``n_layers − l`` per
        example), so a progress line can come within a layer and its time left weighs the early layers, which
        replay the most, by what they cost."""
        sets = list(sets)
        self._choose_replay()  # hooks may have been added since construction
        for heads in dict.fromkeys(sets):
            self.model.validate_heads(heads)
        root = prefix_tree(sets, self.model.n_layers)
        results: dict[HeadSet, EvalResult] = {}
        n_layers, n_batches = self.model.n_layers, len(self._batches())
        total = n_batches * (n_layers + sum((n_layers - layer) * len(list(node.sets()))
                                            for layer, nodes in root.children.items() for node in nodes))
        work = [0]

        def tick(cost: int) -> None:
            work[0] += cost
            if on_work:
                on_work(min(work[0], total), total)

        with torch.no_grad(), ablate(self.model, HeadSet()):
            prefix = self._prefix()
            states, intact = self._intact(prefix)
            tick(n_batches * n_layers)
            if on_intact:
                on_intact(intact)
            for layer in range(root.end + 1) if root.children else ():
                if layer in root.children:
                    done = self._score_start_layer(prefix, states, layer, root.children[layer], tick)
                    results.update(done)
                    if on_layer:
                        on_layer(layer, done)
                if layer < root.end:
                    for state in states:
                        self._advance(prefix, state, layer)
        return intact, results

    def _choose_replay(self) -> None:
        """Set ``fused`` and ``replay`` from the requested replay. Hooks already on the model (an outer
        ``ablate()``, a probe) act only in the bridge's blocks: replay through them, or refuse when
        the fused replay was asked for by name, as for a decoder it does not cover."""
        fused = fused_layers(self.model) if self.requested != "bridge" else None
        if self.requested == "fused" and fused is None:
            raise ConfigError(f"The fused replay does not cover {self.model.architecture}'s decoder layers (it covers "
                              f"{', '.join(FUSED_LAYERS)}); use replay='bridge' or 'auto'.")
        if fused is not None and has_hooks(self.model):
            if self.requested == "fused":
                raise ConfigError("The model carries hooks of its own (an ablate() or a probe around this screen), "
                                  "which the fused replay would bypass; "
                                  "remove them, or screen with replay='bridge' or 'auto'.")
            fused = None
        self.fused: list[FusedLayer] | None = fused
        self.replay = "bridge" if fused is None else "fused"

    def _layer(self, index: int, hidden: Float[Tensor, "rows pos d_model"], kwargs: dict[str, Any], rows: int,
               copies: int, cache: Any, mask: Bool[Tensor, "rows_g head_index"] | RowSpec | None = None
               ) -> Float[Tensor, "rows pos d_model"]:
        """Block ``index`` on ``hidden`` (``rows`` examples × ``copies`` ablations), heads ``mask`` marks zeroed
        (a :class:`RowSpec`: replaced as its kind says; :meth:`_specs` makes them from boolean masks)."""
        if self.fused is None:
            with ablate_rows(self.model, index, mask) if mask is not None else nullcontext():
                return call_layer(self.model, index, hidden, kwargs, rows, copies, cache)
        return self.fused[index](hidden, _expand(kwargs.get("attention_mask"), rows, copies),
                                 _expand(kwargs.get("position_embeddings"), rows, copies), cache, mask)

    def _specs(self, masks: dict[int, Bool[Tensor, "rows_g head_index"]], batch: Batch | None, copies: int, pos: int
               ) -> dict[int, Bool[Tensor, "rows_g head_index"] | RowSpec]:
        """What each layer's boolean mask (rows ``(batch g)``, ``g = copies``) stands for under this screener's
        ablation: the masks themselves for zero at every position; else each layer's :class:`RowSpec` for the
        ``pos`` positions the rows hold: ``batch``'s own tokens after the shared prefix, or (``batch=None``) the
        prefix itself, where every reference's ``z`` is the prefix's own (so reference 0 stands for all) and
        every position lies before every example's boundary (so ``prefix`` positions replace all of them; under
        ``example`` positions the prefix is never replayed: its intact keys/values are the right ones)."""
        if self.ablation.is_zero and self.ablation.everywhere:
            return dict(masks)
        references, aligns, start = None, None, 0 if batch is None else self.prefix_len
        if self._references is not None and self._aligns is not None:
            if batch is None:  # every row reads the prefix's positions unmoved
                references = torch.zeros(copies, dtype=torch.long)
                aligns = torch.tensor([[start + pos, 0]] * copies, dtype=torch.long)
            else:
                mine = self._references[[self.prepared.requests[r].example for r in batch.request_ids]]
                references = repeat(mine, "batch -> (batch g)", g=copies)
                aligns = repeat(self._aligns[batch.request_ids], "batch two -> (batch g) two", g=copies)
        boundaries = None
        if self._boundaries is not None:
            if batch is None:
                if self.ablation.positions != "prefix":
                    raise AssertionError("the shared prefix is replayed under prefix positions only")
                boundaries = torch.full((copies,), start + pos, dtype=torch.long)
            else:
                boundaries = repeat(self._boundaries[batch.request_ids], "batch -> (batch g)", g=copies)
        return {layer: self.ablation.spec(layer, mask, references, start, pos, boundaries, aligns)
                for layer, mask in masks.items()}

    # -- intact passes -------------------------------------------------------------
    def _prefix(self) -> _Prefix | None:
        if not self.prefix_len:
            return None
        ids = torch.tensor([self.prepared.requests[0].context[: self.prefix_len]])
        resid, kwargs, _ = capture_forward(self.model, input_ids=ids, attention_mask=torch.ones_like(ids),
                                           use_cache=False)
        record, hidden = _RecordKV(), resid[0]
        for index in range(len(resid)):  # once more through our own loop, to record the intact keys/values
            hidden = self._layer(index, hidden, kwargs[index], 1, 1, record)
        return _Prefix(self.prefix_len, resid, kwargs, record.keys, record.values)

    def _batches(self) -> list[Batch]:
        requests = self.prepared.requests
        if self.prefix_len:
            p = self.prefix_len
            requests = [Request(r.example, r.context[p:], r.continuation) for r in requests]
        return make_batches(requests, self.batch_size, self.model.tokenizer.pad_token_id)

    def _intact(self, prefix: _Prefix | None) -> tuple[list[_BatchState], EvalResult]:
        from transformers import DynamicCache

        n = len(self.prepared.requests)
        lp, greedy, states = np.zeros(n), np.zeros(n, dtype=bool), []
        for batch in self._batches():
            rows = batch.input_ids.shape[0]
            if prefix is None:
                inputs = dict(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
            else:
                cache = DynamicCache()
                for index in sorted(prefix.keys):
                    cache.update(prefix.keys[index].expand(rows, -1, -1, -1),
                                 prefix.values[index].expand(rows, -1, -1, -1), index)
                mask = torch.cat([torch.ones(rows, prefix.length, dtype=torch.long), batch.attention_mask], dim=1)
                inputs = dict(input_ids=batch.input_ids, attention_mask=mask, past_key_values=cache, use_cache=True)
            resid, kwargs, final = capture_forward(self.model, **inputs)
            if prefix is not None:
                check_cache_filled(self.model, inputs["past_key_values"], prefix.length + batch.input_ids.shape[1])
            for kw in kwargs:
                for keyword in (*CACHE_KEYWORDS, "use_cache"):
                    kw.pop(keyword, None)
            if self.fused is not None:  # intact and ablated scores from one arithmetic (see CachedScreener)
                final = self._replay_intact(prefix, resid[0], kwargs)
            blp, bgreedy = score_hidden(self.model, final, batch)
            lp[batch.request_ids], greedy[batch.request_ids] = blp.numpy(), bgreedy.numpy()
            states.append(_BatchState(batch, resid[0], kwargs))
        return states, aggregate(self.prepared, lp, greedy)

    def _replay_intact(self, prefix: _Prefix | None, resid: Float[Tensor, "batch pos d_model"],
                       kwargs: list[dict[str, Any]]) -> Float[Tensor, "batch pos d_model"]:
        cache = None if prefix is None else _PrefixKV(prefix.keys, prefix.values)
        for index in range(len(kwargs)):
            resid = self._layer(index, resid, kwargs[index], resid.shape[0], 1, cache)
        return self.model.arch.final_norm(resid)

    def _advance(self, prefix: _Prefix | None, state: _BatchState, layer: int) -> None:
        rows = state.resid.shape[0]
        cache = None
        if prefix is not None:
            cache = _PrefixKV({layer: prefix.keys[layer]}, {layer: prefix.values[layer]})
        state.resid = self._layer(layer, state.resid, state.layer_kwargs[layer], rows, 1, cache)

    # -- ablated passes: the prefix tree -----------------------------------------------
    def _score_start_layer(self, prefix: _Prefix | None, states: list[_BatchState], layer: int,
                           nodes: list[Node], tick: Callable[[int], None] | None = None) -> dict[HeadSet, EvalResult]:
        """Every set below ``nodes`` (the intact state's branches at ``layer``), ``per`` branches at a
        time: the shared prefix's walk of their subtrees first, then each batch's."""
        n = len(self.prepared.requests)
        sets = [s for node in nodes for s in node.sets()]
        lp = {s: np.zeros(n) for s in sets}
        greedy = {s: np.zeros(n, dtype=bool) for s in sets}
        per = self._per_pass()
        for start in range(0, len(nodes), per):
            chunk = nodes[start:start + per]
            prefix_kv = self._ablated_prefix(prefix, layer, chunk)
            cost = (self.model.n_layers - layer) * sum(len(list(node.sets())) for node in chunk)
            for state in states:
                for heads, (blp, bgreedy) in self._score_chunk(state, layer, chunk, prefix_kv):
                    lp[heads][state.batch.request_ids] = blp.numpy()
                    greedy[heads][state.batch.request_ids] = bgreedy.numpy()
                if tick:
                    tick(cost)
        return {s: aggregate(self.prepared, lp[s], greedy[s]) for s in sets}

    def _per_pass(self) -> int:
        """Tree nodes whose rows share one forward (a batch's examples under each)."""
        return max(1, self.rows_per_pass // self.batch_size)

    def _ablated_prefix(self, prefix: _Prefix | None, layer: int, nodes: list[Node]) -> _TreeKV | None:
        """The shared prefix's keys/values under every node below ``nodes``, at every layer each runs,
        walked as the batches will walk the tree (one row per node)."""
        if prefix is None:
            return None
        if self.ablation.positions == "example":  # the prefix's positions keep their intact z, so its keys/values
            return _TreeKV(intact=prefix)
        kv = _TreeKV()

        def step(group: _Group, hidden: Float[Tensor, "rows_g pos d_model"], index: int
                 ) -> Float[Tensor, "rows_g pos d_model"]:
            record = _RecordKV()
            out = self._layer(index, hidden, prefix.layer_kwargs[index], 1, len(group.nodes), record,
                              group.masks.get(index))
            kv.keys[group.key, index], kv.values[group.key, index] = record.keys[index], record.values[index]
            return out

        def specs(masks: dict[int, Bool[Tensor, "rows_g head_index"]], g: int
                  ) -> dict[int, Bool[Tensor, "rows_g head_index"] | RowSpec]:
            return self._specs(masks, None, g, prefix.length)

        self._walk(self._group(nodes, 1, specs), prefix.resid[layer].expand(len(nodes), -1, -1), layer, step,
                   lambda *_: None)
        return kv

    def _score_chunk(self, state: _BatchState, layer: int, nodes: list[Node],
                     prefix_kv: _TreeKV | None
                     ) -> list[tuple[HeadSet, tuple[Float64[Tensor, " request"], Bool[Tensor, " request"]]]]:
        """One batch through the subtrees of ``nodes``: ``(set, (log-probabilities, greedy))`` per set below them."""
        rows, scored = state.resid.shape[0], []

        def step(group: _Group, hidden: Float[Tensor, "rows_g pos d_model"], index: int
                 ) -> Float[Tensor, "rows_g pos d_model"]:
            cache = None
            if prefix_kv is not None:  # row b·g + j attends to node j's prefix
                keys, values = prefix_kv.at(group.key, index)
                cache = _PrefixKV({index: keys}, {index: values})
            return self._layer(index, hidden, state.layer_kwargs[index], rows, len(group.nodes), cache,
                               group.masks.get(index))

        def finish(group: _Group, hidden: Float[Tensor, "rows_g pos d_model"]) -> None:
            final, g = self.model.arch.final_norm(hidden), len(group.nodes)
            for j, node in enumerate(group.nodes):
                assert node.set is not None  # only requested sets run through the last layer
                scored.append((node.set, score_hidden(self.model, final, state.batch, rows=state.batch.rows * g + j)))

        def specs(masks: dict[int, Bool[Tensor, "rows_g head_index"]], g: int
                  ) -> dict[int, Bool[Tensor, "rows_g head_index"] | RowSpec]:
            return self._specs(masks, state.batch, g, state.resid.shape[1])

        hidden = repeat(state.resid, "batch pos d_model -> (batch g) pos d_model", g=len(nodes))
        self._walk(self._group(nodes, rows, specs), hidden, layer, step, finish)
        return scored

    def _group(self, nodes: list[Node], rows: int, specs: _Specs) -> _Group:
        masks = specs(_row_masks(self.model, [n.heads for n in nodes], rows), len(nodes))
        return _Group(nodes, tuple(n.index for n in nodes), masks, rows, specs)

    def _walk(self, group: _Group, hidden: Float[Tensor, "rows_g pos d_model"], layer: int,
              step: Callable[[_Group, Float[Tensor, "rows_g pos d_model"], int], Float[Tensor, "rows_g pos d_model"]],
              finish: Callable[[_Group, Float[Tensor, "rows_g pos d_model"]], None]) -> None:
        """Run ``group`` (tree nodes whose states, ``(rows g)`` rows, are at the input of ``layer``, the
        layer each branches at) through the layers each needs, and its subtrees depth first.

        After each layer ``l`` the children that branch at ``l + 1`` split off, ``per`` to a group,
        with their parents' rows; a node no longer needed leaves the group, or hands its rows to
        one of its children (so a chain of single children does not deepen the recursion). Held at
        once: one group per depth. ``step(group, hidden, l)`` runs layer ``l``; ``finish`` scores a
        group after the last layer, where only requested sets remain."""
        per, n_layers = self._per_pass(), self.model.n_layers
        while True:
            hidden = step(group, hidden, layer)
            layer += 1
            if layer == n_layers:
                finish(group, hidden)
                return
            kids = [(j, kid) for j, node in enumerate(group.nodes) for kid in node.children.get(layer, ())]
            stay: list[tuple[int, Node]] = []
            for j, node in enumerate(group.nodes):
                if node.end > layer:
                    stay.append((j, node))
                else:
                    heir = next((kid for kid in kids if kid[0] == j), None)
                    if heir is not None:  # its last use: a child takes its rows
                        kids.remove(heir)
                        stay.append(heir)
            for start in range(0, len(kids), per):
                chunk = kids[start:start + per]
                self._walk(self._group([kid for _, kid in chunk], group.rows, group.specs),
                           _rows_of(hidden, group, [j for j, _ in chunk]), layer, step, finish)
            if not stay:
                return
            if [node for _, node in stay] != group.nodes:
                hidden = _rows_of(hidden, group, [j for j, _ in stay])
                group = self._group([node for _, node in stay], group.rows, group.specs)


@dataclass
class _Group:
    """Tree nodes replayed together: row ``b·g + j`` of a pass is example ``b`` under ``nodes[j]``."""

    nodes: list[Node]
    key: tuple[int, ...]  # the nodes' preorder indices: names the group in the prefix's keys/values
    # _row_masks of the nodes' heads, as the screener's ablation kind says
    masks: dict[int, Bool[Tensor, "rows_g head_index"] | RowSpec]
    rows: int
    specs: _Specs  # how a group's boolean masks become what _layer takes (for its batch and width)


@dataclass
class _TreeKV:
    """The shared prefix's keys/values of each group of the tree at each layer it runs,
    ``[g, kv_head, prefix, d_head]``; or, with ``intact``, the intact prefix's for every group
    (``[1, kv_head, prefix, d_head]``, broadcast: ablation at the example's positions only)."""

    keys: dict[tuple[tuple[int, ...], int], Tensor] = field(default_factory=dict)
    values: dict[tuple[tuple[int, ...], int], Tensor] = field(default_factory=dict)
    intact: _Prefix | None = None

    def at(self, key: tuple[int, ...], layer: int) -> tuple[Tensor, Tensor]:
        """Group ``key``'s prefix keys and values at ``layer``."""
        if self.intact is not None:
            return self.intact.keys[layer], self.intact.values[layer]
        return self.keys[key, layer], self.values[key, layer]


def _rows_of(hidden: Float[Tensor, "rows_g pos d_model"], group: _Group, members: list[int]
             ) -> Float[Tensor, "rows_m pos d_model"]:
    """The rows of ``group``'s members ``members``, in ``(batch g)`` layout."""
    per_node = hidden.unflatten(0, (group.rows, len(group.nodes)))
    return per_node[:, members].reshape(group.rows * len(members), *hidden.shape[1:])


def screen_plain(model: Model, prepared: Prepared, sets: Iterable[HeadSet], *, batch_size: int = 16,
                 ablation: Ablation | AblationKind | str | None = None) -> tuple[EvalResult, dict[HeadSet, EvalResult]]:
    """The reference path: a full forward under :func:`ablate` for every set (resample: per batch, each
    row reading its own reference from position 0)."""
    batches = make_batches(prepared.requests, batch_size, model.tokenizer.pad_token_id)
    intact = aggregate(prepared, *score_requests(model, prepared, batches))
    results = {heads: aggregate(prepared, *score_requests(model, prepared, batches,
                                                          around=ablated(model, prepared, heads, ablation)))
               for heads in sets}
    return intact, results
