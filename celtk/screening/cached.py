"""Cached-activation scoring of head-set ablations (stage 1 of Algorithm 1, and the
subset evaluations of stage 2).

For each batch the intact model runs once and the screener keeps what each decoder
layer receives (its residual-stream input and the keyword arguments the model passes
it: attention mask, rotary embeddings; :mod:`celtk.screening.layer_replay`). An ablation whose earliest head is
in layer ``l`` then needs only layers ``l … L−1``, run from the cached input. Layers are visited
in order and each batch's intact residual is advanced one layer at a time, so memory
holds one layer's residuals of the intact model.

Sets are walked as a prefix tree (:mod:`celtk.screening.prefix_tree`, :mod:`celtk.screening.tree_walk`): sorted
by layer, the sets that share their lower heads share the residual those heads leave, so it is computed once
and branched, batch by batch and depth first (one group of states per depth is held).
Several tree nodes run together as copies of the batch (row ``b·g + j`` of a pass is example ``b`` under node
``j``: einops ``(batch g)``), each copy with its own heads
ablated (zeroed, or replaced as the screener's :class:`celtk.ablation_kinds.Ablation` says: each
layer's per-row mask becomes a :class:`celtk.ablation_kinds.RowSpec` on its way to the layer).
Which rows share a forward changes; the arithmetic of a row does not, so a set
scored in the tree gets the numbers it gets scored alone (tests/integration/test_prefix_tree.py).

Shared prefix: when every request starts with the same tokens (the few-shot shots),
those tokens are run once per ablation, not once per example. Their keys and values
(intact, or under each tree node from its layer on, walked once before the batches) are
prepended in attention to the examples' own tokens, as a KV cache would (:mod:`celtk.screening.kv_stand_ins`).
Every layer must consult the cache it is given; one that does not (a renamed cache keyword in a newer
transformers) raises :class:`celtk.errors.KVCacheIgnoredError` instead of silently dropping the prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from einops import repeat
from jaxtyping import Bool, Float, Float64
from torch import Tensor

from celtk.ablation import ablate, ablate_rows, as_ablation
from celtk.ablation_kinds import Ablation, AblationKind, RowSpec
from celtk.boundary import public
from celtk.errors import ConfigError
from celtk.evaluation.memory import auto_batch as auto_batch  # re-exported: the run's session imports it here
from celtk.evaluation.prompts import Prepared, Request, shared_prefix_length
from celtk.evaluation.results import EvalResult
from celtk.evaluation.scoring import Batch, aggregate, make_batches, score_hidden
from celtk.heads import HeadSet
from celtk.models import CACHE_KEYWORDS, Model
from celtk.screening.fused import FUSED_LAYERS, FusedLayer, fused_layers, has_hooks
from celtk.screening.kv_stand_ins import PrefixKV, RecordKV, StandInCache, TreeKV
from celtk.screening.layer_replay import (
    LayerKwargs,
    call_layer,
    capture_forward,
    capture_inputs,
    check_cache_filled,
    expand_rows,
)
from celtk.screening.plain import screen_plain as screen_plain  # re-exported: the benchmarks import it from here
from celtk.screening.prefix_tree import Node, prefix_tree
from celtk.screening.row_ablations import RowAblations
from celtk.screening.tree_walk import Group, group_of, walk

REPLAYS = ("auto", "fused", "bridge")


@dataclass
class _Prefix:
    length: int
    resid: list[Float[Tensor, "1 prefix d_model"]]  # the input of each layer
    layer_kwargs: list[LayerKwargs]
    keys: dict[int, Float[Tensor, "1 kv_head prefix d_head"]]  # intact
    values: dict[int, Float[Tensor, "1 kv_head prefix d_head"]]


@dataclass
class _BatchState:
    batch: Batch
    resid: Float[Tensor, "batch pos d_model"]  # input to the current layer
    layer_kwargs: list[LayerKwargs]


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
        self.row_ablations = RowAblations(self.ablation, prepared,
                                          shared_prefix_length(prepared.requests) if share_prefix else 0)
        self.prefix_len = self.row_ablations.prefix_len

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

    def _layer(self, index: int, hidden: Float[Tensor, "rows pos d_model"], kwargs: LayerKwargs, rows: int,
               copies: int, cache: StandInCache | None, mask: Bool[Tensor, "rows_g head_index"] | RowSpec | None = None
               ) -> Float[Tensor, "rows pos d_model"]:
        """Block ``index`` on ``hidden`` (``rows`` examples × ``copies`` ablations), heads ``mask`` marks zeroed
        (a :class:`RowSpec`: replaced as its kind says; :meth:`RowAblations.specs` makes them from boolean masks)."""
        if self.fused is None:
            with ablate_rows(self.model, index, mask) if mask is not None else nullcontext():
                return call_layer(self.model, index, hidden, kwargs, rows, copies, cache)
        return self.fused[index](hidden, expand_rows(kwargs.get("attention_mask"), rows, copies),
                                 expand_rows(kwargs.get("position_embeddings"), rows, copies), cache, mask)

    # -- intact passes -------------------------------------------------------------
    def _prefix(self) -> _Prefix | None:
        if not self.prefix_len:
            return None
        ids = torch.tensor([self.prepared.requests[0].context[: self.prefix_len]])
        resid, kwargs, _ = capture_forward(self.model, input_ids=ids, attention_mask=torch.ones_like(ids),
                                           use_cache=False)
        record, hidden = RecordKV(), resid[0]
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
            # the fused replay computes every layer from layer 0's input: the decoder's own layers need not run
            captured = capture_inputs(self.model, **inputs) if self.fused is not None else None
            if captured is not None:
                first, kwargs = captured
            else:
                resid, kwargs, final = capture_forward(self.model, **inputs)
                first = resid[0]
                if prefix is not None:
                    check_cache_filled(self.model, cache, prefix.length + batch.input_ids.shape[1])
            for kw in kwargs:
                for keyword in (*CACHE_KEYWORDS, "use_cache"):
                    kw.pop(keyword, None)
            if self.fused is not None:  # intact and ablated scores from one arithmetic (see CachedScreener)
                final = self._replay_intact(prefix, first, kwargs)
            blp, bgreedy = score_hidden(self.model, final, batch)
            lp[batch.request_ids], greedy[batch.request_ids] = blp.numpy(), bgreedy.numpy()
            states.append(_BatchState(batch, first, kwargs))
        return states, aggregate(self.prepared, lp, greedy)

    def _replay_intact(self, prefix: _Prefix | None, resid: Float[Tensor, "batch pos d_model"],
                       kwargs: list[LayerKwargs]) -> Float[Tensor, "batch pos d_model"]:
        cache = None if prefix is None else PrefixKV(prefix.keys, prefix.values)
        for index in range(len(kwargs)):
            resid = self._layer(index, resid, kwargs[index], resid.shape[0], 1, cache)
        return cast(Tensor, self.model.arch.final_norm(resid))

    def _advance(self, prefix: _Prefix | None, state: _BatchState, layer: int) -> None:
        rows = state.resid.shape[0]
        cache = None
        if prefix is not None:
            cache = PrefixKV({layer: prefix.keys[layer]}, {layer: prefix.values[layer]})
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

    def _ablated_prefix(self, prefix: _Prefix | None, layer: int, nodes: list[Node]) -> TreeKV | None:
        """The shared prefix's keys/values under every node below ``nodes``, at every layer each runs,
        walked as the batches will walk the tree (one row per node)."""
        if prefix is None:
            return None
        if self.ablation.positions == "example":  # the prefix's positions keep their intact z, so its keys/values
            return TreeKV(intact=(prefix.keys, prefix.values))
        kv = TreeKV()

        def step(group: Group, hidden: Float[Tensor, "rows_g pos d_model"], index: int
                 ) -> Float[Tensor, "rows_g pos d_model"]:
            record = RecordKV()
            out = self._layer(index, hidden, prefix.layer_kwargs[index], 1, len(group.nodes), record,
                              group.masks.get(index))
            kv.keys[group.key, index], kv.values[group.key, index] = record.keys[index], record.values[index]
            return out

        def specs(masks: dict[int, Bool[Tensor, "rows_g head_index"]], g: int
                  ) -> dict[int, Bool[Tensor, "rows_g head_index"] | RowSpec]:
            return self.row_ablations.specs(masks, None, g, prefix.length)

        walk(self.model, group_of(self.model, nodes, 1, specs), prefix.resid[layer].expand(len(nodes), -1, -1),
             layer, self._per_pass(), step, lambda *_: None)
        return kv

    def _score_chunk(self, state: _BatchState, layer: int, nodes: list[Node],
                     prefix_kv: TreeKV | None
                     ) -> list[tuple[HeadSet, tuple[Float64[Tensor, " request"], Bool[Tensor, " request"]]]]:
        """One batch through the subtrees of ``nodes``: ``(set, (log-probabilities, greedy))`` per set below them."""
        rows, scored = state.resid.shape[0], []

        def step(group: Group, hidden: Float[Tensor, "rows_g pos d_model"], index: int
                 ) -> Float[Tensor, "rows_g pos d_model"]:
            cache = None
            if prefix_kv is not None:  # row b·g + j attends to node j's prefix
                keys, values = prefix_kv.at(group.key, index)
                cache = PrefixKV({index: keys}, {index: values})
            return self._layer(index, hidden, state.layer_kwargs[index], rows, len(group.nodes), cache,
                               group.masks.get(index))

        def finish(group: Group, hidden: Float[Tensor, "rows_g pos d_model"]) -> None:
            final, g = self.model.arch.final_norm(hidden), len(group.nodes)
            for j, node in enumerate(group.nodes):
                assert node.set is not None  # only requested sets run through the last layer
                scored.append((node.set, score_hidden(self.model, final, state.batch, rows=state.batch.rows * g + j)))

        def specs(masks: dict[int, Bool[Tensor, "rows_g head_index"]], g: int
                  ) -> dict[int, Bool[Tensor, "rows_g head_index"] | RowSpec]:
            return self.row_ablations.specs(masks, state.batch, g, state.resid.shape[1])

        hidden = repeat(state.resid, "batch pos d_model -> (batch g) pos d_model", g=len(nodes))
        walk(self.model, group_of(self.model, nodes, rows, specs), hidden, layer, self._per_pass(), step, finish)
        return scored
