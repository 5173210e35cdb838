"""Greedy-generation screening of head-set ablations, for generation-graded tasks.

The contract is :class:`celtk.screening.cached.CachedScreener`'s: many head sets scored on one prepared
prompt list, ``run(sets) -> (intact, {set: EvalResult})``, per-example verdicts, and each
example's generation in ``extra["generation"]``.

Prompts: the intact model reads every prompt once (right-padded batches; a few-shot prefix
shared by every prompt is read once for all). The screener keeps each layer's input and the
intact keys and values. An ablation whose earliest head is in layer ``l`` reruns only layers
``l … L−1`` of the prompt (and of the shared prefix, once per ablation), from the kept input;
layers below ``l`` reuse the intact keys and values. Several ablations run together as rows of
one batch (row ``b·g + j`` = example ``b`` under set ``j``), each row with its own heads zeroed (or, under
a mean or scale ablation, replaced: the same value at every position, prompt and decoding alike; resample
ablation is refused for generation, see :func:`celtk.evaluation.generation.refuse_resample_generation`).

Decoding: the prompt's keys and values are laid out as HF's left-padded generation lays them
out (pads first), then every row decodes greedily with a KV cache through the whole model until
its own stop (:class:`celtk.evaluation.generation.StopRule`); finished rows leave the batch. Verdicts are
graded in a thread pool beside decoding (sandboxed code runs in child processes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from celtk.ablation import ablate, as_ablation
from celtk.ablation_kinds import Ablation, AblationKind, refuse_positions_generation
from celtk.errors import ConfigError
from celtk.evaluation.generation import StopRule, decode_step, generation_result, new_cache, refuse_resample_generation
from celtk.evaluation.prompts import MIN_SHARED_PREFIX, Prepared, Request, prompt_ids, shared_prefix_length
from celtk.evaluation.results import EvalResult, ExampleResult
from celtk.evaluation.scoring import unembed
from celtk.heads import HeadSet
from celtk.models import Model
from celtk.screening.layer_replay import LayerKwargs, call_layer, capture_forward, check_cache_filled, with_masks
from celtk.tasks import Task, require_opt_in


class _KV:
    """A stand-in layer cache: records each layer's new keys/values and prepends fixed ones (if any)."""

    def __init__(self, before: dict[int, tuple[Float[Tensor, "row kv_head prefix d_head"],
                                               Float[Tensor, "row kv_head prefix d_head"]]] | None = None) -> None:
        self.before = before or {}
        self.new: dict[int, tuple[Tensor, Tensor]] = {}
        self.consulted: set[int] = set()  # checked by celtk.screening.layer_replay.call_layer

    def update(self, k: Float[Tensor, "row kv_head pos d_head"], v: Float[Tensor, "row kv_head pos d_head"],
               layer_idx: int, *args: object, **kwargs: object
               ) -> tuple[Float[Tensor, "row kv_head seen d_head"], Float[Tensor, "row kv_head seen d_head"]]:
        """These tokens' keys/values recorded; returned after the fixed ones (``seen`` = theirs + these)."""
        self.consulted.add(layer_idx)
        self.new[layer_idx] = (k, v)
        if layer_idx in self.before:
            pk, pv = self.before[layer_idx]
            return torch.cat([pk, k], dim=-2), torch.cat([pv, v], dim=-2)
        return k, v


@dataclass
class _Pass:
    """One intact read of some tokens: each layer's input and keyword arguments, keys/values, final hidden."""

    resid: list[Tensor]  # [rows, S, d] per layer
    layer_kwargs: list[LayerKwargs]
    kv: dict[int, tuple[Tensor, Tensor]]  # [rows, kv_heads, S, d_head] per layer: these tokens' own
    final: Tensor  # [rows, S, d], final-normed


@dataclass
class _Batch:
    examples: list[int]  # indices into the prepared examples
    lengths: list[int]  # tokens after the shared prefix
    intact: _Pass


def _read(model: Model, cache: Any, **inputs: Tensor) -> _Pass:
    """A whole-decoder forward into ``cache`` (a ``DynamicCache``, whose layers transformers types as a union of kinds
    without the keys/values read here) that keeps each layer's input, keyword arguments and new keys/values."""
    before = [cache.get_seq_length(i) for i in range(model.n_layers)]
    resid, layer_kwargs, final = capture_forward(model, past_key_values=cache, use_cache=True, **inputs)
    check_cache_filled(model, cache, before[0] + inputs["input_ids"].shape[1])
    kv = {i: (layer.keys[:, :, before[i]:], layer.values[:, :, before[i]:]) for i, layer in enumerate(cache.layers)}
    return _Pass(resid, layer_kwargs, kv, final)


def _read_cache() -> DynamicCache:
    """A plain growing cache for reading prompts (no sliding-window cropping: every key is kept)."""
    return DynamicCache()


def run_layers(model: Model, start: int, hidden: Float[Tensor, "rows pos d_model"], kwargs: list[LayerKwargs],
               rows: int, copies: int, cache: _KV) -> Float[Tensor, "rows pos d_model"]:
    """Decoder layers ``start …`` on ``hidden`` (``rows × copies`` rows) with the kept keyword arguments."""
    for index in range(start, len(kwargs)):
        hidden = call_layer(model, index, hidden, kwargs[index], rows, copies, cache)
    return hidden


def row_masks(model: Model, row_sets: Sequence[HeadSet], ablation: Ablation | None = None) -> ExitStack:
    """Hooks zeroing (or replacing as ``ablation`` says, a kind whose value is the same at every position),
    in row ``r``, the heads of ``row_sets[r]`` (entered as one context)."""
    masks: dict[int, Tensor] = {}
    for r, heads in enumerate(row_sets):
        for head in heads:
            masks.setdefault(head.layer,
                             torch.zeros(len(row_sets), model.n_heads, dtype=torch.bool))[r, head.head] = True
    if ablation is not None and not ablation.is_zero:
        return with_masks(model, {layer: ablation.spec(layer, mask) for layer, mask in masks.items()})
    return with_masks(model, masks)


def left_padded(kv: Float[Tensor, "row head width d"], lengths: Sequence[int], prefix: int, room: int = 0
                ) -> Float[Tensor, "row head column d"]:
    """Keys or values ``[rows, heads, prefix + S, d]`` of right-padded prompts, moved so that each row's
    padding comes first (HF's left-padded layout, in which decoding appends at the end), at the front
    of a buffer with ``room`` spare columns (``[rows, heads, prefix + S + room, d]``, the spare ones unset)."""
    rows, heads, width, d = kv.shape
    shift = torch.tensor([width - prefix - n for n in lengths])[:, None]
    index = (torch.arange(width)[None, :] - shift) % width
    out = kv.new_empty(rows, heads, width + room, d)
    torch.gather(kv, 2, index[:, None, :, None].expand_as(kv).to(kv.device), out=out[:, :, :width])
    return out


ROOM = 32  # decode columns reserved up front per row and layer


# transformers' DynamicLayer ships no annotations (unused-ignore: plain mypy lets this module call untyped code)
class RoomyLayer(DynamicLayer):  # type: ignore[no-untyped-call, unused-ignore]
    """A full-attention cache layer whose keys/values sit at the front of buffers with ``room`` spare
    columns: each decoding step writes its column in place, where HF's ``DynamicLayer`` concatenates
    (a copy of the whole cache per layer and step, most of a CPU decode step's time). The keys/values
    it returns hold the same numbers as ``DynamicLayer``'s; past ``room`` the buffers double. It serves
    the screener's decode loop (``update``, ``batch_select_indices``, ``crop``); the other cache
    operations (beam reordering, repeats, reset, offloading) are refused. The views it returns share
    the buffers: after a ``crop``, the next ``update`` overwrites columns an earlier view still covers."""

    def __init__(self, keys: Float[Tensor, "row kv_head column d_head"],
                 values: Float[Tensor, "row kv_head column d_head"], width: int) -> None:
        """``keys``/``values``: buffers ``[rows, heads, columns, d]`` whose first ``width`` columns are set."""
        super().__init__()  # type: ignore[no-untyped-call, unused-ignore]  # DynamicLayer's, unannotated
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._keys, self._values = keys, values
        self._expose(width)

    def _expose(self, width: int
                ) -> tuple[Float[Tensor, "row kv_head pos d_head"], Float[Tensor, "row kv_head pos d_head"]]:
        self.width = width
        self.keys, self.values = keys, values = self._keys[:, :, :width], self._values[:, :, :width]
        return keys, values

    def update(self, key_states: Float[Tensor, "row kv_head new d_head"],
               value_states: Float[Tensor, "row kv_head new d_head"], *args: object, **kwargs: object
               ) -> tuple[Float[Tensor, "row kv_head pos d_head"], Float[Tensor, "row kv_head pos d_head"]]:
        start, end = self.width, self.width + key_states.shape[-2]
        if end > self._keys.shape[-2]:
            self._keys, self._values = (_with_room(t[:, :, :start], max(end, 2 * start) - start)
                                        for t in (self._keys, self._values))
        self._keys[:, :, start:end] = key_states
        self._values[:, :, start:end] = value_states
        return self._expose(end)

    def batch_select_indices(self, indices: Int[Tensor, " kept"]) -> None:
        self._keys, self._values = self._keys[indices], self._values[indices]
        self._expose(self.width)

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)  # HF's meaning of the argument, and its bounds
        assert self.keys is not None  # set by every _expose
        self._expose(self.keys.shape[-2])

    def get_seq_length(self) -> int:
        return self.width

    def _refused(self, *args: object, **kwargs: object) -> None:
        raise NotImplementedError("RoomyLayer serves the generation screener's decode loop only; "
                                  "use transformers' DynamicLayer for beam search, repeats, reset or offloading.")

    reorder_cache = batch_repeat_interleave = reset = offload = prefetch = _refused


def _with_room(t: Float[Tensor, "row head width d"], room: int) -> Float[Tensor, "row head column d"]:
    """``t`` copied to the front of a buffer with ``room`` more columns."""
    out = t.new_empty(t.shape[0], t.shape[1], t.shape[2] + room, t.shape[3])
    out[:, :, :t.shape[2]] = t
    return out


class GenerationScreener:
    """Scores many head-set ablations of one generation-graded prompt list by greedy decoding.

    Args:
        model: the model (hooks added here are removed before each call returns).
        prepared: the prompts (:func:`celtk.evaluation.prompts.prepare` of a ``generate`` task).
        task: grades each generation and says when to stop (``stop_strings``, ``max_new_tokens``).
        allow_code: passed to the task's grader (MBPP runs code only when True).
        batch_size: examples per batch.
        rows_per_pass: the largest number of rows (examples × ablations) decoded together.
        share_prefix: read a prefix shared by all prompts once per ablation.
        workers: grading threads.
        ablation: what replaces an ablated head's ``z``: zero (default), mean or ``scale:α`` (resample is refused).
    """

    def __init__(self, model: Model, prepared: Prepared, task: Task, *, allow_code: bool = False, batch_size: int = 16,
                 rows_per_pass: int = 64, share_prefix: bool = True, workers: int = 4,
                 ablation: Ablation | AblationKind | str | None = None) -> None:
        if prepared.kind != "generate":
            raise ConfigError(f"The generation screener needs a generation-graded task; {task.full_name} is "
                              f"{prepared.kind!r}, "
                              "which the cached screener (celtk.screening.cached.CachedScreener) scores.")
        if batch_size < 1:
            raise ConfigError(f"Batch size must be at least 1, got {batch_size}.")
        if task.runs_code:  # refuse before the prompts are read, not at the first graded generation
            require_opt_in(allow_code)
        self.model, self.prepared, self.task, self.allow_code = model, prepared, task, allow_code
        self.ablation = as_ablation(ablation)
        refuse_resample_generation(self.ablation)
        refuse_positions_generation(self.ablation)
        self.batch_size, self.rows_per_pass, self.workers = batch_size, max(rows_per_pass, batch_size), workers
        self.rule = StopRule.for_task(model, task)
        self.ids = prompt_ids(model, prepared.prompts, prepared.examples, self.rule.max_new_tokens)
        prefix = (shared_prefix_length([Request(i, tuple(ids), ()) for i, ids in enumerate(self.ids)])
                  if share_prefix else 0)
        self.prefix_len = prefix if prefix >= MIN_SHARED_PREFIX else 0
        self.new_tokens = 0  # tokens generated by the last run, intact included

    def run(self, sets: Iterable[HeadSet], on_layer: Callable[[int, dict[HeadSet, EvalResult]], None] | None = None,
            on_intact: Callable[[EvalResult], None] | None = None,
            on_work: Callable[[int, int], None] | None = None) -> tuple[EvalResult, dict[HeadSet, EvalResult]]:
        """Score every set; ``on_intact`` fires once the intact generations are graded, ``on_layer(l, results)``
        as the sets whose earliest head is in layer ``l`` finish, and ``on_work(done, total)`` (as the cached
        screener's) with them, counting the intact pass and each set as one unit of work."""
        sets = list(sets)
        by_start: dict[int, list[HeadSet]] = {}
        for heads in dict.fromkeys(sets):
            self.model.validate_heads(heads)
            if len(heads):
                by_start.setdefault(heads.heads[0].layer, []).append(heads)
        self.new_tokens = 0
        results: dict[HeadSet, EvalResult] = {}
        with torch.no_grad(), ablate(self.model, HeadSet()), ThreadPoolExecutor(self.workers) as pool:
            prefix = self._read_prefix()
            batches = [self._read_batch(prefix, group) for group in self._groups()]
            graded: list[Future[ExampleResult] | None] = [None] * len(self.ids)
            for batch in batches:
                self._decode_intact(pool, prefix, batch, graded)
            intact = EvalResult([f.result() for f in graded if f is not None])
            if on_intact:
                on_intact(intact)
            work = 1 + sum(len(group) for group in by_start.values())
            if on_work:
                on_work(1, work)
            for layer, done in self._ablated(pool, prefix, batches, by_start):
                results.update(done)
                if on_layer:
                    on_layer(layer, done)
                if on_work:
                    on_work(1 + len(results), work)
        if HeadSet() in set(sets):
            results[HeadSet()] = intact
        return intact, results

    def _ablated(self, pool: ThreadPoolExecutor, prefix: _Pass | None, batches: list[_Batch],
                 by_start: dict[int, list[HeadSet]]) -> Iterator[tuple[int, dict[HeadSet, EvalResult]]]:
        """Decode chunks of ``rows_per_pass // batch_size`` sets in start-layer order; yield each layer's
        results once its last set is graded. A chunk may span start layers: its rows decode together."""
        order = [heads for layer in sorted(by_start) for heads in by_start[layer]]
        futures: dict[HeadSet, list[Future[ExampleResult] | None]] = {s: [None] * len(self.ids) for s in order}
        per = max(1, self.rows_per_pass // self.batch_size)
        for start in range(0, len(order), per):
            groups: dict[int, list[HeadSet]] = {}
            for heads in order[start:start + per]:
                groups.setdefault(heads.heads[0].layer, []).append(heads)
            prefix_kv = {layer: self._ablated_prefix(prefix, layer, group) for layer, group in groups.items()}
            for batch in batches:
                parts = [self._prompt_rows(prefix, prefix_kv[layer], batch, layer, group)
                         for layer, group in groups.items()]
                self._decode_rows(pool, batch, parts, futures)
            for layer in groups:
                if by_start[layer][-1] in order[:start + per]:
                    yield layer, {s: EvalResult([f.result() for f in futures[s] if f is not None])
                                  for s in by_start[layer]}

    # -- intact reads --------------------------------------------------------------
    def _groups(self) -> list[list[int]]:
        order = sorted(range(len(self.ids)), key=lambda i: (-len(self.ids[i]), i))
        return [order[s:s + self.batch_size] for s in range(0, len(order), self.batch_size)]

    def _read_prefix(self) -> _Pass | None:
        if not self.prefix_len:
            return None
        ids = torch.tensor([self.ids[0][:self.prefix_len]])
        return _read(self.model, _read_cache(), input_ids=ids, attention_mask=torch.ones_like(ids))

    def _read_batch(self, prefix: _Pass | None, group: list[int]) -> _Batch:
        p, pad = self.prefix_len, self.model.tokenizer.pad_token_id or 0
        rows = [self.ids[i][p:] for i in group]
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        cache = _read_cache()
        if prefix is not None:
            for index, (k, v) in prefix.kv.items():
                cache.update(k.expand(len(rows), -1, -1, -1), v.expand(len(rows), -1, -1, -1), index)
            mask = torch.cat([torch.ones(len(rows), p, dtype=torch.long), mask], dim=1)
        read = _read(self.model, cache, input_ids=ids, attention_mask=mask)
        return _Batch(group, [len(r) for r in rows], read)

    # -- decoding ------------------------------------------------------------------
    def _full_kv(self, prefix: _Pass | None, index: int,
                 suffix: tuple[Float[Tensor, "row kv_head pos d_head"], Float[Tensor, "row kv_head pos d_head"]],
                 prefix_kv: tuple[Float[Tensor, "row kv_head prefix d_head"],
                                  Float[Tensor, "row kv_head prefix d_head"]] | None
                 ) -> tuple[Float[Tensor, "row kv_head prompt d_head"], Float[Tensor, "row kv_head prompt d_head"]]:
        """One layer's prompt keys/values for every row: the prefix's (intact or per-row ablated),
        then the row's own."""
        if prefix is None:
            return suffix
        rows = suffix[0].shape[0]
        pk, pv = prefix_kv if prefix_kv is not None else (t.expand(rows, -1, -1, -1) for t in prefix.kv[index])
        return torch.cat([pk, suffix[0]], dim=-2), torch.cat([pv, suffix[1]], dim=-2)

    def _decode_intact(self, pool: ThreadPoolExecutor, prefix: _Pass | None, batch: _Batch,
                       out: list[Future[ExampleResult] | None]) -> None:
        kv = {i: self._full_kv(prefix, i, batch.intact.kv[i], None) for i in batch.intact.kv}
        last = batch.intact.final[torch.arange(len(batch.lengths)), torch.tensor(batch.lengths) - 1]
        first = unembed(self.model, last).argmax(dim=-1).cpu()
        self._decode(pool, kv, first, batch.lengths, [HeadSet()] * len(batch.lengths), list(batch.examples),
                     lambda r, fut: out.__setitem__(batch.examples[r], fut))

    def _ablated_prefix(self, prefix: _Pass | None, layer: int, sets: list[HeadSet]) -> _KV | None:
        """The prefix's keys/values from ``layer`` on under each set (one row per set)."""
        if prefix is None:
            return None
        record, g = _KV(), len(sets)
        with row_masks(self.model, sets, self.ablation):
            run_layers(self.model, layer, prefix.resid[layer].expand(g, -1, -1), prefix.layer_kwargs, 1, g, record)
        return record

    def _prompt_rows(self, prefix: _Pass | None, prefix_kv: _KV | None, batch: _Batch, layer: int,
                     sets: list[HeadSet]) -> tuple[dict[int, tuple[Float[Tensor, "row kv_head prompt d_head"],
                                                                   Float[Tensor, "row kv_head prompt d_head"]]],
                                                   Int[Tensor, " row"], list[HeadSet]]:
        """Rows ``b·g + j`` (example ``b`` under ``sets[j]``, all starting at ``layer``): the prompt's
        keys/values per layer (intact below ``layer``) and each row's first generated token."""
        b, g = len(batch.lengths), len(sets)
        before = {} if prefix_kv is None else {i: (k.repeat(b, 1, 1, 1), v.repeat(b, 1, 1, 1))
                                               for i, (k, v) in prefix_kv.new.items()}
        record, row_sets = _KV(before), [sets[r % g] for r in range(b * g)]
        with row_masks(self.model, row_sets, self.ablation):
            hidden = run_layers(self.model, layer, batch.intact.resid[layer].repeat_interleave(g, dim=0),
                                batch.intact.layer_kwargs, b, g, record)
        last = torch.tensor(batch.lengths).repeat_interleave(g) - 1
        first = unembed(self.model, self.model.arch.final_norm(hidden[torch.arange(b * g), last])).argmax(dim=-1).cpu()
        kv = {}
        for i, (k, v) in batch.intact.kv.items():
            if i < layer:
                kv[i] = self._full_kv(prefix, i, (k.repeat_interleave(g, dim=0), v.repeat_interleave(g, dim=0)), None)
            else:
                kv[i] = self._full_kv(prefix, i, record.new[i], before.get(i))
        return kv, first, row_sets

    def _decode_rows(self, pool: ThreadPoolExecutor, batch: _Batch,
                     parts: list[tuple[dict[int, tuple[Float[Tensor, "_row kv_head prompt d_head"],
                                                       Float[Tensor, "_row kv_head prompt d_head"]]],
                                       Int[Tensor, " _row"], list[HeadSet]]],
                     futures: dict[HeadSet, list[Future[ExampleResult] | None]]) -> None:
        """Decode the rows of every start layer's part of a chunk as one batch (parts differ in rows, so their row
        count is left unchecked)."""
        kv = {i: (torch.cat([p[0][i][0] for p in parts]), torch.cat([p[0][i][1] for p in parts])) for i in parts[0][0]}
        first = torch.cat([p[1] for p in parts])
        row_sets = [s for p in parts for s in p[2]]
        b = len(batch.lengths)
        where = [r // (len(p[2]) // b) for p in parts for r in range(len(p[2]))]  # row b·g + j → example b
        examples, lengths = [batch.examples[w] for w in where], [batch.lengths[w] for w in where]
        self._decode(pool, kv, first, lengths, row_sets, examples,
                     lambda r, fut: futures[row_sets[r]].__setitem__(examples[r], fut))

    def _decode(self, pool: ThreadPoolExecutor,
                kv: dict[int, tuple[Float[Tensor, "row kv_head prompt d_head"],
                                    Float[Tensor, "row kv_head prompt d_head"]]],
                first: Int[Tensor, " row"], lengths: list[int], row_sets: list[HeadSet], examples: list[int],
                emit: Callable[[int, Future[ExampleResult]], None]) -> None:
        """Greedy decoding of every row from its prompt keys/values; each finished row is graded and leaves."""
        tok, p = self.model.tokenizer, self.prefix_len
        cache, width = new_cache(self.model), kv[0][0].shape[-2]
        room = min(self.rule.max_new_tokens, ROOM)  # long limits (code tasks) grow by doubling
        for index in sorted(kv):
            if type(cache.layers[index]) is DynamicLayer:  # sliding-window layers keep their own update
                cache.layers[index] = RoomyLayer(left_padded(kv[index][0], lengths, p, room),
                                                 left_padded(kv[index][1], lengths, p, room), width)
            else:
                cache.update(left_padded(kv[index][0], lengths, p), left_padded(kv[index][1], lengths, p), index)
        mask = torch.tensor([[0] * (width - p - n) + [1] * (p + n) for n in lengths])
        positions = torch.tensor([p + n for n in lengths])
        made: list[list[int]] = [[] for _ in lengths]
        active, nxt = list(range(len(lengths))), first
        while True:
            keep = []
            for slot, (r, t) in enumerate(zip(active, nxt.tolist(), strict=True)):
                made[r].append(t)
                if self.rule.done(tok, made[r]):
                    text = self.rule.text(tok, made[r])
                    emit(r, pool.submit(generation_result, self.task, self.prepared.examples[examples[r]], text,
                                        len(made[r]), self.allow_code))
                    self.new_tokens += len(made[r])
                else:
                    keep.append(slot)
            if not keep:
                return
            if len(keep) < len(active):  # finished rows leave the batch
                kept = torch.tensor(keep)
                cache.batch_select_indices(kept.to(self.model.device))
                mask, positions, nxt = mask[kept], positions[kept], nxt[kept]
                active = [active[s] for s in keep]
            mask = torch.cat([mask, torch.ones(len(active), 1, dtype=mask.dtype)], dim=1)
            with row_masks(self.model, [row_sets[r] for r in active], self.ablation):
                nxt = decode_step(self.model, nxt, mask, positions, cache)
            positions = positions + 1
