"""Documents of transfer and calibration: ``transfer.json`` and ``calibration.json``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from celtk.heads import HeadSet
from celtk.store.documents.base import Document, Record
from celtk.store.documents.codecs import (
    CORRECTNESS,
    HEADS,
    MODEL_NAME,
    TASK_NAME,
    Correctness,
    ModelName,
    TaskName,
    coded,
    optional,
    rows,
)


@dataclass(frozen=True, kw_only=True)
class TransferRow(Record):
    """The frozen selection against the intact model under one variant, on held-out examples.
    Fields the statistics leave undefined (n = 0) are ``None``, with the reason in ``undefined``."""

    variant: str
    kind: str  # original / shots / zero-shot / subtask / task / chat / model
    task: TaskName = coded(TASK_NAME)
    model: ModelName = coded(MODEL_NAME)
    fewshot: int
    shot_seed: int
    chat: bool
    n: int
    intact_accuracy: float | None
    ablated_accuracy: float | None
    gain: float | None
    gain_ci: list[float] | None
    fixes: int
    damage: int
    mcnemar_p: float | None
    holm_p: float | None  # Holm-adjusted across the distinct rows of the grid
    heldout_hash: str
    data: str | None = None  # where the examples came from: the data path, or generator / hub / file
    from_test: bool = False  # the original row: the test's comparison, read from test.json (not a second look)
    intact_correct: Correctness = coded(CORRECTNESS)
    ablated_correct: Correctness = coded(CORRECTNESS)
    undefined: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class DroppedVariant(Record):
    """A variant of the grid not scored: it would repeat ``same_as``'s comparison, or cannot apply."""

    variant: str
    same_as: str | None
    reason: str


@dataclass(frozen=True, kw_only=True)
class LanguageModelLoss(Record):
    """Mean next-token negative log-likelihood (nats) on plain text, intact against ablated;
    ``delta_ci`` resamples the text's windows (pairs) with replacement."""

    source: str
    n_windows: int
    n_tokens: int
    intact_nll: float
    ablated_nll: float
    delta: float  # ablated − intact: positive means the ablation costs language modelling
    delta_ci: list[float]
    ci_level: float


@dataclass(frozen=True, kw_only=True)
class TransferDocument(Document):
    """Does the selection hold? Intact against ablated under a grid of variants (``transfer.json``)."""

    FILE: ClassVar[str] = "transfer.json"
    heads: HeadSet = coded(HEADS)
    model: ModelName = coded(MODEL_NAME)
    task: TaskName = coded(TASK_NAME)
    discovery_gain: float  # selection-biased (see SelectionDocument)
    n_boot: int
    ci_level: float
    variants: list[TransferRow] = rows(TransferRow)
    dropped: list[DroppedVariant] = field(default_factory=list, metadata={"rows": DroppedVariant})
    lm_loss: LanguageModelLoss | None = optional()

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "") -> TransferDocument:
        data = dict(data)
        if data.get("lm_loss") is not None:
            data["lm_loss"] = LanguageModelLoss.from_json(data["lm_loss"], where)
        return super().from_json(data, where)


@dataclass(frozen=True, kw_only=True)
class CalibrationDocument(Document):
    """The best discovery gain a search finds under a null of no effect, and its held-out
    counterpart, over ``repeats`` draws (``calibration-NULL.json``); gains are fractions."""

    null: str  # random-heads / permutation
    repeats: int
    seed: int
    n_candidates: int  # candidate sets the best is taken over, per repeat
    set_size: int
    null_discovery_gains: list[float]  # per repeat: the best candidate's discovery gain
    null_heldout_gains: list[float]  # per repeat: that candidate's held-out gain
    observed_discovery_gain: float
    observed_heldout_gain: float | None  # from test.json, where it exists
    p_value: float | None  # (1 + #{null best >= observed}) / (1 + repeats); None: not the same statistic (p_value_note)
    validity: str
    p_value_note: str | None = optional()  # why there is no p-value
    null_sets: list[HeadSet] | None = coded(HEADS, depth=1, omit_none=True)  # random-heads: each repeat's best set

    @staticmethod
    def file(null: str) -> str:
        return f"calibration-{null}.json"

    def file_name(self) -> str:
        return self.file(self.null)
