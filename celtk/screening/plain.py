"""The plain reference path the cached screener is held to: every head set scored by full forwards of every
whole prompt under :func:`celtk.ablation.ablate` (the integration tests and the parity benchmarks compare the
two)."""

from __future__ import annotations

from collections.abc import Iterable

from celtk.ablation_kinds import Ablation, AblationKind
from celtk.evaluation.prompts import Prepared
from celtk.evaluation.results import EvalResult
from celtk.evaluation.scoring import ablated, aggregate, make_batches, score_requests
from celtk.heads import HeadSet
from celtk.models import Model


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
