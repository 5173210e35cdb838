"""What each stage needs of its run directory, as one table keyed by the stage's name (:data:`RULES`).

A stage asks its :class:`~celtk.store.directory.RunDirectory` twice: ``require(stage)`` before any model loads, which
checks the stage's :attr:`StageRule.needs` in order, and ``admit(stage, session, document)`` once its session is
drawn, which makes its :attr:`StageRule.model` checks. A new stage is one line here (and its driver).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from celtk.errors import RunStoreError
from celtk.store.documents import SelectionDocument, TestDocument
from celtk.store.heldout import Look

# every stage that reads a run directory
Stage = Literal["select", "test", "stability", "transfer", "calibrate", "ablations", "eval", "altscreen", "attributes"]

# what ``require`` reads and checks, each in its turn (RunDirectory.require)
Need = Literal[
    "no-look",  # no look at the held-out set yet, unless forced: the looks a forced stage follows are returned
    "selection",  # the frozen selection (selection.json)
    "on-screen",  # the selection was searched on this directory's screen, where it has one
    "untested",  # no test yet, unless forced: the first test a forced one repeats is returned
    "tested",  # the run's first test: the stage reads the frozen selection's held-out outcomes
    "tested-if-any",  # the run's first test, where there is one
    "tests-selection",  # the test (where there is one) tested the selection's heads, on its held-out set
    "test-of-selection",  # the test is of this selection (heads, task, model), on its held-out set
]


@dataclass(frozen=True)
class ModelChecks:
    """The model-side same-run checks a stage makes once its session is drawn (:meth:`RunDirectory.admit`)."""

    heldout: bool = False  # it looks: the held-out set drawn is the contract's, disjoint from the discovery set
    # "intact": the intact discovery outcomes are screen.json's; "null": and no ablation's
    baseline: Literal["intact", "null"] | None = None
    frozen: bool = False  # it scores the frozen selection: the discovery set's hash and the shots are the selection's
    tested: bool = False  # it rescores the test's examples: the held-out set drawn is the one test.json scored


@dataclass(frozen=True)
class StageRule:
    """One stage's row: ``needs``, checked in order before a model loads; ``model``, checked once the session is
    drawn; ``verb``, how a refusal names the stage (``transfer``, ``celtk ablations``)."""

    needs: tuple[Need, ...] = ()
    model: ModelChecks = ModelChecks()
    verb: str = ""


RULES: dict[Stage, StageRule] = {
    "select": StageRule(("no-look",), ModelChecks(baseline="null")),
    "test": StageRule(("selection", "on-screen", "untested"),
                      ModelChecks(heldout=True, baseline="intact", frozen=True)),
    "stability": StageRule((), ModelChecks(heldout=True, baseline="null")),
    "transfer": StageRule(("tested", "selection", "tests-selection"), ModelChecks(heldout=True), "transfer"),
    # its nulls mix the selection's statistic with the screen's scores
    "calibrate": StageRule(("selection", "on-screen", "tested-if-any", "tests-selection"), ModelChecks(heldout=True),
                           "calibrate"),
    "ablations": StageRule(("selection", "tested", "test-of-selection"),
                           ModelChecks(heldout=True, baseline="intact", frozen=True, tested=True), "celtk ablations"),
    "eval": StageRule((), ModelChecks(heldout=True)),
    "altscreen": StageRule(),
    "attributes": StageRule(),
}
STAGES: tuple[Stage, ...] = get_args(Stage)
MODEL_CHECKS: dict[Stage, ModelChecks] = {stage: rule.model for stage, rule in RULES.items()}  # RULES' model column


@dataclass(frozen=True)
class Admission:
    """What a stage's same-run checks read before it loads a model (:meth:`RunDirectory.require`)."""

    selection: SelectionDocument | None = None  # the frozen selection, for stages that score it
    test: TestDocument | None = None  # the run's first test: the result a stage reads, or one a forced test repeats
    prior_looks: list[Look] = field(default_factory=list)  # select: the looks a forced selection follows

    @property
    def frozen(self) -> SelectionDocument:
        """The selection, for the stages whose requirement includes one."""
        if self.selection is None:
            raise RunStoreError("This stage was admitted without a selection; require it for a stage that scores one.")
        return self.selection

    @property
    def tested(self) -> TestDocument:
        """The run's first test, for the stages whose requirement includes one."""
        if self.test is None:
            raise RunStoreError("This stage was admitted without a test; require it for a stage that reads one.")
        return self.test
