"""What each row of the cached screener's passes ablates, under the screener's ablation kind
(:class:`celtk.ablation_kinds.Ablation`): under resample, the reference example each request reads and where
(aligned on its last prompt token); under ``prefix`` or ``example`` positions, where each request's own positions
begin. Both bound the shared prefix the screener may run once (:attr:`RowAblations.prefix_len`), and each layer's
boolean mask becomes the :class:`celtk.ablation_kinds.RowSpec` its rows need (:meth:`RowAblations.specs`)."""

from __future__ import annotations

import torch
from einops import repeat
from jaxtyping import Bool
from torch import Tensor

from celtk.ablation_kinds import Ablation, RowSpec, common_prefix
from celtk.evaluation.prompts import MIN_SHARED_PREFIX, Prepared
from celtk.evaluation.scoring import Batch


class RowAblations:
    """The per-request references, alignments and boundaries of ``ablation`` on ``prepared``, and the shared prefix
    (``prefix_len`` tokens, at most the ``prefix_len`` given; 0 below :data:`MIN_SHARED_PREFIX`) they leave."""

    def __init__(self, ablation: Ablation, prepared: Prepared, prefix_len: int) -> None:
        self.ablation, self.prepared = ablation, prepared
        self.references: Tensor | None = None
        self.aligns: Tensor | None = None
        if ablation.reference is not None:  # resample: each example's reference, and a prefix they all share
            self.references = ablation.assign([e.content_hash for e in prepared.examples])
            # per request: its reference's positions it reads, aligned on its last prompt token
            self.aligns = ablation.alignment(self.references[[r.example for r in prepared.requests]],
                                             [r.context for r in prepared.requests])
            if prefix_len:
                ours = prepared.requests[0].context[:prefix_len]
                prefix_len = common_prefix([ours, ablation.reference.tokens[:prefix_len]])
                if len(self.aligns):  # every row reads the prefix's positions unmoved
                    prefix_len = min(prefix_len, int(self.aligns[:, 0].min()))
        self.boundaries: Tensor | None = None
        if not ablation.everywhere:  # prefix/example positions: the cached prefix lies before every boundary
            self.boundaries = ablation.boundaries([r.context for r in prepared.requests])
            if prefix_len and len(self.boundaries):
                prefix_len = min(prefix_len, int(self.boundaries.min()))
        self.prefix_len = prefix_len if prefix_len >= MIN_SHARED_PREFIX else 0

    def specs(self, masks: dict[int, Bool[Tensor, "rows_g head_index"]], batch: Batch | None, copies: int, pos: int
              ) -> dict[int, Bool[Tensor, "rows_g head_index"] | RowSpec]:
        """What each layer's boolean mask (rows ``(batch g)``, ``g = copies``) stands for under the screener's
        ablation: the masks themselves for zero at every position; else each layer's :class:`RowSpec` for the
        ``pos`` positions the rows hold: ``batch``'s own tokens after the shared prefix, or (``batch=None``) the
        prefix itself, where every reference's ``z`` is the prefix's own (so reference 0 stands for all) and
        every position lies before every example's boundary (so ``prefix`` positions replace all of them; under
        ``example`` positions the prefix is never replayed: its intact keys/values are the right ones)."""
        if self.ablation.is_zero and self.ablation.everywhere:
            return dict(masks)
        references, aligns, start = None, None, 0 if batch is None else self.prefix_len
        if self.references is not None and self.aligns is not None:
            if batch is None:  # every row reads the prefix's positions unmoved
                references = torch.zeros(copies, dtype=torch.long)
                aligns = torch.tensor([[start + pos, 0]] * copies, dtype=torch.long)
            else:
                mine = self.references[[self.prepared.requests[r].example for r in batch.request_ids]]
                references = repeat(mine, "batch -> (batch g)", g=copies)
                aligns = repeat(self.aligns[batch.request_ids], "batch two -> (batch g) two", g=copies)
        boundaries = None
        if self.boundaries is not None:
            if batch is None:
                if self.ablation.positions != "prefix":
                    raise AssertionError("the shared prefix is replayed under prefix positions only")
                boundaries = torch.full((copies,), start + pos, dtype=torch.long)
            else:
                boundaries = repeat(self.boundaries[batch.request_ids], "batch -> (batch g)", g=copies)
        return {layer: self.ablation.spec(layer, mask, references, start, pos, boundaries, aligns)
                for layer, mask in masks.items()}
