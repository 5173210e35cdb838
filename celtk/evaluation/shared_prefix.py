"""Streamed teacher-forced passes that share the few-shot prefix: the tokens every request's context begins
with (the shots, a chat template's opening) run once per pass, under that pass's ablation, and each batch
scores only its examples' own tokens, attending to the prefix's keys and values as a KV cache holds them.

With three fixed shots about 66 of a prompt's 80 tokens are that prefix, so a pass computes a fifth of
the tokens the plain path (:func:`celtk.evaluation.scoring.score_requests`, every prompt whole) computes.

Exact, not approximate: a prefix position reads only earlier prefix positions (causal attention), so its keys and
values are the same in every row, and every ablation kind replaces a prefix position's ``z`` with the same value in
every row: zero, ``scale:α`` and mean do not depend on the row; resample's references all store one ``z`` for the
positions they share and every row reads them unmoved (the prefix is cut to those, and to the positions every row's
prompt shares with its reference's, :meth:`celtk.ablation_kinds.Ablation.alignment`), and ``prefix`` / ``example``
positions have every prefix position before every row's boundary (the prefix is cut to the earliest boundary). An
ablated head changes the prefix's own keys and values in the layers above it, so the prefix runs under the same
ablation as the examples: one prefix pass per ablation setting. The examples' tokens keep their absolute positions
(rotary and learned position embeddings, resample's alignment, each row's boundary); a batch holds the same
requests, in the same order and width, as the plain path's. On CPU the per-example log-probabilities came out equal
to the plain path's bit for bit on tiny Llama, Qwen2, Qwen3, Mistral, SmolLM3, Gemma-3, GPT-2 and GPT-NeoX models
and on SmolLM2-135M; the tests (tests/integration/test_prefix_scoring.py) hold them to 1e-5 with identical verdicts,
and a tiny run's ``test.json`` and ``ablation-kinds.json`` to the byte. The fused replay
(:mod:`celtk.screening.fused`) is not used here: it groups its products differently from the bridge, which would
move the last bits.

The plain path remains where a prefix cannot be shared or its exactness is not established: prompts
sharing fewer than :data:`MIN_SHARED_PREFIX` tokens (no shots, varying shots), generation-graded tasks
(:mod:`celtk.evaluation.generation`), a model carrying hooks of its own (a probe, an outer ``ablate``,
which would see only the examples' positions), a decoder that does not fill the KV cache it is given,
and whenever :data:`PLAIN_ENV` is ``1`` (or ``share_prefix=False``).

Memory stays bounded by one batch: the prefix's keys and values (``[1, kv_head, prefix, d_head]`` per layer)
are copied into each batch's cache, ``[batch, kv_head, prefix + own, d_head]``, the size of the keys and
values the plain path holds for that batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from celtk.ablation import as_ablation, hook_z_hooks
from celtk.ablation_hooks import ZHook
from celtk.ablation_kinds import Ablation, AblationKind, RowSpec
from celtk.errors import KVCacheIgnoredError
from celtk.evaluation.prompts import MIN_SHARED_PREFIX, Prepared, Request, shared_prefix_length
from celtk.evaluation.results import EvalResult
from celtk.evaluation.scoring import Batch, ablated, aggregate, make_batches, score_hidden, score_requests
from celtk.heads import HeadSet, as_head_set
from celtk.models import Model

PLAIN_ENV = "CELTK_PLAIN_SCORING"
"""Set to ``1`` to score every request whole (the plain path), as a check of the shared-prefix passes."""

_PrefixKV = tuple[list[Float[Tensor, "1 kv_head prefix d_head"]], list[Float[Tensor, "1 kv_head prefix d_head"]]]


def prefix_to_share(model: Model, prepared: Prepared, heads: HeadSet | str = "",
                    ablation: Ablation | AblationKind | str | None = None, share_prefix: bool = True) -> int:
    """How many leading tokens a pass of ``heads`` under ``ablation`` runs once for every request: 0 (the plain
    path) when they share fewer than :data:`MIN_SHARED_PREFIX`, when :data:`PLAIN_ENV` is ``1`` or
    ``share_prefix`` is false, or when the model carries hooks of its own. Resample cuts it to the positions
    its references share and every row shares with its own reference (:meth:`Ablation.alignment`: positions
    read unmoved), ``prefix``/``example`` positions to the earliest row boundary."""
    if not share_prefix or os.environ.get(PLAIN_ENV, "") == "1" or _carries_hooks(model):
        return 0
    n = shared_prefix_length(prepared.requests)
    kind = as_ablation(ablation)
    if len(as_head_set(heads)):
        if kind.reference is not None:
            n = min(n, kind.reference.common)
            aligns = _Rows(prepared, as_head_set(heads), kind).aligns
            if aligns is not None and len(aligns):
                n = min(n, int(aligns[:, 0].min()))
        if not kind.everywhere and prepared.requests:
            n = min(n, int(kind.boundaries([r.context for r in prepared.requests]).min()))
    return n if n >= MIN_SHARED_PREFIX else 0


def score_pass(model: Model, prepared: Prepared, batch_size: int, heads: HeadSet | str = "",
               ablation: Ablation | AblationKind | str | None = None,
               progress: Callable[[int, int], None] | None = None, share_prefix: bool = True) -> EvalResult:
    """One streamed pass over ``prepared``'s requests with ``heads`` removed as ``ablation`` says (none: the intact
    model), ``batch_size`` requests resident at a time: the shared prefix once (:func:`prefix_to_share`), each
    batch's own tokens against it; the plain path where no prefix is shared. Per-example results as
    :func:`celtk.evaluation.scoring.score_requests` gives them; ``progress(done, batches)`` after each batch."""
    heads = as_head_set(heads)
    model.validate_heads(heads)
    kind = as_ablation(ablation)
    pad = model.tokenizer.pad_token_id
    shared = prefix_to_share(model, prepared, heads, kind, share_prefix)
    if shared:
        result = _score_shared(model, prepared, shared, batch_size, heads, kind, progress)
        if result is not None:
            return result
    batches = make_batches(prepared.requests, batch_size, pad)
    around = ablated(model, prepared, heads, kind) if len(heads) else None
    return aggregate(prepared, *score_requests(model, prepared, batches, progress, around=around))


def _carries_hooks(model: Model) -> bool:
    """Whether a hook point of the bridge carries a hook (a probe, an outer ``ablate``): it would see only the
    examples' own positions, so such a model is scored whole."""
    return any(bool(point._forward_hooks or point._forward_pre_hooks) for point in model.bridge.hook_dict.values())


def _score_shared(model: Model, prepared: Prepared, shared: int, batch_size: int, heads: HeadSet, kind: Ablation,
                  progress: Callable[[int, int], None] | None) -> EvalResult | None:
    """The pass with the first ``shared`` tokens run once; ``None`` when the decoder leaves the prefix's KV
    cache unfilled (the caller then scores whole prompts)."""
    own = [Request(r.example, r.context[shared:], r.continuation) for r in prepared.requests]
    batches = make_batches(own, batch_size, model.tokenizer.pad_token_id)
    rows = _Rows(prepared, heads, kind)
    n = len(prepared.requests)
    lp, greedy = np.zeros(n), np.zeros(n, dtype=bool)
    with torch.no_grad():
        prefix = _prefix_kv(model, prepared.requests[0].context[:shared], rows)
        if prefix is None:
            return None
        for done, batch in enumerate(batches, start=1):
            hidden = _batch_hidden(model, batch, prefix, rows)
            blp, bgreedy = score_hidden(model, hidden, batch)
            lp[batch.request_ids], greedy[batch.request_ids] = blp.numpy(), bgreedy.numpy()
            if progress:
                progress(done, len(batches))
    return aggregate(prepared, lp, greedy)


class _Rows:
    """The ablation's per-row inputs: each request's resample reference and alignment, and ``prefix``/``example``
    boundary."""

    def __init__(self, prepared: Prepared, heads: HeadSet, kind: Ablation) -> None:
        self.heads, self.kind = heads, kind
        self.examples = [r.example for r in prepared.requests]
        self.references = kind.assign([e.content_hash for e in prepared.examples]) \
            if kind.per_row and len(heads) else None
        self.aligns = None if self.references is None else kind.alignment(
            self.references[self.examples], [r.context for r in prepared.requests])
        self.boundaries = kind.boundaries([r.context for r in prepared.requests]) \
            if not kind.everywhere and len(heads) else None

    @contextmanager
    def hooks(self, model: Model, requests: Sequence[int] | None, start: int, pos: int) -> Iterator[None]:
        """``heads`` replaced in rows ``requests`` (``None``: the shared prefix's one row) at absolute positions
        ``start … start + pos − 1``, as :func:`celtk.ablation.ablate` replaces them in whole prompts."""
        if not len(self.heads):
            yield
            return
        references = boundaries = aligns = None
        if self.references is not None:  # the prefix's positions are stored once for every reference
            references = self.references[[self.examples[r] for r in requests]] if requests is not None \
                else torch.zeros(1, dtype=torch.long)
            assert self.aligns is not None  # made with the references
            # the prefix lies within what every row shares with its reference: read unmoved
            aligns = self.aligns[list(requests)] if requests is not None \
                else torch.tensor([[start + pos, 0]], dtype=torch.long)
        if self.boundaries is not None:  # the prefix lies before every row's boundary
            boundaries = self.boundaries[list(requests)] if requests is not None \
                else torch.tensor([start + pos], dtype=torch.long)
        specs = {}
        for layer, hs in self.heads.by_layer().items():
            mask = torch.zeros(1, model.n_heads, dtype=torch.bool)
            mask[0, hs] = True
            specs[layer] = self.kind.spec(layer, mask, references, start, pos, boundaries, aligns)
        with hook_z_hooks(model, {layer: _replace(spec) for layer, spec in specs.items()}):
            yield


def _replace(spec: RowSpec) -> ZHook:
    def hook(z: Float[Tensor, "batch pos head_index d_head"], hook: object
             ) -> Float[Tensor, "batch pos head_index d_head"]:
        return spec.apply(z)

    return hook


def _prefix_kv(model: Model, tokens: Sequence[int], rows: _Rows) -> _PrefixKV | None:
    """The prefix's keys and values at every layer, under the pass's ablation (``None``: the decoder did not
    fill the cache it was given)."""
    from transformers import DynamicCache  # transformers: loaded only where a pass shares a prefix

    ids = torch.tensor([list(tokens)], device=model.device)
    cache = DynamicCache()  # full layers: a sliding-window layer's own cache would drop what the mask then reads
    with rows.hooks(model, None, 0, len(tokens)):
        model.arch.decoder(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=cache, use_cache=True)
    if any(cache.get_seq_length(layer) != len(tokens) for layer in range(model.n_layers)):
        return None
    layers: list[Any] = list(cache.layers)  # DynamicLayer: keys, values [1, kv_head, prefix, d_head]
    return [layers[i].keys for i in range(model.n_layers)], [layers[i].values for i in range(model.n_layers)]


def _batch_hidden(model: Model, batch: Batch, prefix: _PrefixKV, rows: _Rows
                  ) -> Float[Tensor, "batch pos d_model"]:
    """The final-normed residuals of ``batch``'s own tokens, each row attending to the prefix first."""
    from transformers import DynamicCache  # transformers: loaded only where a pass shares a prefix

    keys, values = prefix
    n_rows, width = batch.input_ids.shape
    shared = keys[0].shape[2]
    cache = DynamicCache()
    for layer in range(model.n_layers):
        cache.update(keys[layer].expand(n_rows, -1, -1, -1), values[layer].expand(n_rows, -1, -1, -1), layer)
    mask: Int[Tensor, "batch prefix_pos"] = torch.cat(
        [torch.ones(n_rows, shared, dtype=batch.attention_mask.dtype), batch.attention_mask], dim=1)
    with rows.hooks(model, batch.request_ids, shared, width):
        out = model.arch.decoder(input_ids=batch.input_ids.to(model.device), attention_mask=mask.to(model.device),
                                 past_key_values=cache, use_cache=True)
    for layer in range(model.n_layers):
        if cache.get_seq_length(layer) != shared + width:
            raise KVCacheIgnoredError(
                f"Decoder layer {layer} of {model.architecture} ran without the shared prefix's keys and values "
                "(it filled the prefix's cache, then not this batch's): its scores would drop the prefix. Score "
                f"whole prompts with {PLAIN_ENV}=1, or install the transformers version celtk pins (pyproject.toml).")
    return cast(Tensor, out.last_hidden_state)
