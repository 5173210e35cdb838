"""Documents of held-out passes: ``test.json``, ``ablation-kinds.json`` and ``eval.json``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from jaxtyping import Bool

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
from celtk.store.documents.selection import LookRecord
from celtk.store.files import JsonObject


@dataclass(frozen=True, kw_only=True)
class TestExample(Record):
    __test__ = False  # not a pytest class
    id: str
    intact_correct: bool
    ablated_correct: bool
    intact_logprob: float | list[float] | None  # per choice on a multiple-choice task; None: graded by generation
    ablated_logprob: float | list[float] | None
    intact_generation: str | None = optional()  # generation-graded tasks: what each model wrote
    ablated_generation: str | None = optional()


@dataclass(frozen=True, kw_only=True)
class TestDocument(Document):
    """The held-out comparison of the frozen selection with the intact model."""

    __test__ = False  # not a pytest class
    FILE: ClassVar[str] = "test.json"
    heads: HeadSet = coded(HEADS)
    strategy: str
    model: ModelName = coded(MODEL_NAME)
    task: TaskName = coded(TASK_NAME)
    n: int
    intact_accuracy: float
    ablated_accuracy: float
    gain: float
    relative_error_reduction: float | None  # None: the intact model is already perfect
    fixes: int
    damage: int
    mcnemar_p: float
    gain_ci: list[float]
    ci_level: float
    n_boot: int
    heldout_hash: str
    examples: list[TestExample] = rows(TestExample)
    discovery_gain: float | None = optional()  # selection-biased, copied from selection.json
    shrinkage: float | None = optional()  # discovery_gain − gain: how much of the searched gain did not hold
    look: int | None = optional()  # the held-out log's seq of the look that gave this result
    # every look at the held-out set up to the last write of this file (the first test stays the result)
    looks: list[LookRecord] | None = field(default=None, metadata={"omit_none": True, "rows": LookRecord})
    # earlier looks (seq) that already scored this selection on this held-out set: the test is not a first look
    seen_before_test: list[int] | None = optional()

    def to_pandas(self) -> Any:
        """One row per held-out example (``id``, ``intact_correct``, ``ablated_correct``, ``outcome``: ``fix``,
        ``damage`` or ``same``, and the log-probabilities): a ``pandas.DataFrame``."""
        import pandas as pd

        def outcome(e: TestExample) -> str:
            return "fix" if e.ablated_correct and not e.intact_correct else (
                "damage" if e.intact_correct and not e.ablated_correct else "same")

        return pd.DataFrame([{"id": e.id, "intact_correct": e.intact_correct, "ablated_correct": e.ablated_correct,
                              "outcome": outcome(e), "intact_logprob": e.intact_logprob,
                              "ablated_logprob": e.ablated_logprob} for e in self.examples])


# ---------------------------------------------------------------------------------------------
# ablation-kinds.json


@dataclass(frozen=True, kw_only=True)
class KindRow(Record):
    """The frozen selection under one ablation kind against the intact model, on the held-out examples.
    Statistics left undefined (n = 0) are ``None``, with the reason in ``undefined``."""

    kind: str  # zero, mean, resample, scale:α
    alpha: float | None  # scale:α's α (the dose-response axis); None for zero, mean, resample
    positions: str = "all"  # where z was replaced: all, prefix (the shared few-shot prefix), example (its own)
    draws: int = 1  # resample: reference draws per example, averaged per example before the statistics
    ablated_accuracy: float | None
    gain: float | None
    gain_ci: list[float] | None
    fixes: int | float  # a count; over several draws the per-example mean verdicts summed (intact wrong)
    damage: int | float  # likewise, 1 − the mean verdict summed over the examples the intact model gets right
    mcnemar_p: float | None  # one draw: exact McNemar; several: None, see paired_p
    # mean (ablated − intact) target log-probability (the correct choice's); None: generation
    mean_delta_logprob: float | None
    ablated_correct: Correctness = coded(CORRECTNESS)  # several draws: the first (the run's seed)
    undefined: dict[str, str] = field(default_factory=dict)
    # several draws: an exact paired sign-flip test on the per-example mean verdicts (McNemar's with one draw),
    # each draw's outcomes and each draw's gain (their spread is the resampling noise)
    paired_p: float | None = optional()
    draw_correct: list[Correctness] | None = coded(CORRECTNESS, depth=1, omit_none=True)
    draw_gains: list[float] | None = optional()

    @property
    def label(self) -> str:
        """The kind, with where it replaced z unless everywhere (``zero``, ``zero @ example``)."""
        return self.kind if self.positions == "all" else f"{self.kind} @ {self.positions}"


@dataclass(frozen=True, kw_only=True)
class AblationKindsDocument(Document):
    """Does the selection's enhancement survive other ablation kinds? Held-out looks of the frozen selection
    under zero, mean and resample ablation and along a scale sweep (``ablation-kinds.json``); they reselect nothing."""

    FILE: ClassVar[str] = "ablation-kinds.json"
    heads: HeadSet = coded(HEADS)
    model: ModelName = coded(MODEL_NAME)
    task: TaskName = coded(TASK_NAME)
    run_ablation: str  # the kind the run was screened, selected and tested under
    test_gain: float  # test.json's held-out gain: the confirmatory result these rows sit beside
    n: int
    intact_accuracy: float
    intact_correct: Correctness = coded(CORRECTNESS)
    heldout_hash: str
    reference: dict[str, Any]  # what mean and resample were measured on (the discovery set), and how
    n_boot: int
    ci_level: float
    kinds: list[KindRow] = rows(KindRow)
    omitted: dict[str, str] = field(default_factory=dict)  # kind -> why it was not scored


# ---------------------------------------------------------------------------------------------
# eval.json


@dataclass(frozen=True, kw_only=True)
class EvalExample(Record):
    """One example's verdict: ``logprob`` is the target's summed log-probability (per choice on a multiple-choice
    task; ``None`` when graded by generation), ``extra`` what the grader kept (the generation, the program's
    verdict)."""

    id: str
    correct: bool
    logprob: float | list[float] | None
    extra: JsonObject = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class HeldBack(Record):
    """A row of the task that no split holds, and why (the few-shot reserve, a repeat of another row's content)."""

    id: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class EvalDocument(Document):
    """``celtk eval``: the model on a split of a task with ``heads`` ablated (``eval.json``). ``config`` records the
    settings, the model's description, the task's config and the split manifest; with a run (``config["run"]``) it
    was a logged look at that run's held-out set (``config["look"]``), and ``config["exploratory"]`` marks a
    held-out pool scored outside any run."""

    DIGESTED: ClassVar[bool] = False  # eval.json may sit beside no run
    FILE: ClassVar[str] = "eval.json"
    model: ModelName = coded(MODEL_NAME)
    task: TaskName = coded(TASK_NAME)
    heads: HeadSet = coded(HEADS)
    n: int
    accuracy: float
    # the standard error of the accuracy, as lm-eval's acc_stderr: sqrt(acc (1 - acc) / (n - 1)); None for n < 2
    accuracy_stderr: float | None = optional()
    examples: list[EvalExample] = rows(EvalExample)
    config: dict[str, Any]
    held_back: list[HeldBack] = rows(HeldBack)  # rows no split holds, each with its reason (the CLI prints the count)

    def correct(self) -> Bool[np.ndarray, " example"]:
        """Per example, whether it was right (bool ``[n]``)."""
        return np.array([e.correct for e in self.examples], dtype=bool)
