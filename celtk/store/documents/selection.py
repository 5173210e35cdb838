"""The selection's documents: ``selection.json`` (with the held-out contract and the looks it follows),
``diagnostics.json`` and ``stability.json``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from celtk.heads import Head, HeadSet
from celtk.store.documents.base import Document, Record
from celtk.store.documents.codecs import (
    DISCOVERY_GAIN_NOTE,
    HEAD,
    HEADS,
    KEYS,
    MODEL,
    SET_NAME,
    TASK,
    ModelRecord,
    TaskRecord,
    coded,
    optional,
    rows,
)
from celtk.store.files import JsonObject


@dataclass(frozen=True, kw_only=True)
class RankedSet(Record):
    heads: HeadSet = coded(HEADS)
    accuracy: float
    gain: float
    gain_count: int
    damage: int
    fixes: int


@dataclass(frozen=True, kw_only=True)
class Interaction(Record):
    """A subset's gain against the sum of its heads' gains, in examples."""

    heads: HeadSet = coded(HEADS)
    gain_count: int
    additive_gain_count: int
    gap: int  # gain_count − additive_gain_count
    noise: float  # 1.96 · sqrt(fixes + damage)
    kind: str | None = optional()  # "super-additive" / "sub-additive", on flagged subsets only


@dataclass(frozen=True, kw_only=True)
class HeldoutContract(Record):
    """The held-out set every test of a selection scores, fixed when the selection is frozen."""

    n: int
    seed: int
    hash: str  # celtk.tasks.Splits.manifest()'s heldout_hash: the examples' ids and contents, in order
    source: str  # where the examples came from (generator, a data path, the hub)


@dataclass(frozen=True, kw_only=True)
class LookRecord(Record):
    """One use of the held-out set, as ``heldout_log.jsonl`` records it (:class:`celtk.store.heldout.Look`;
    its time stays in the log, so two identical runs write identical documents)."""

    seq: int
    what: str
    heads: list[HeadSet] = coded(HEADS, depth=1)
    n: int | None
    heldout_hash: str
    frozen: bool  # the frozen selection's held-out outcomes were among those scored
    exploratory: bool  # not the run's test
    forced: bool
    complete: bool  # its result was written
    result: str | None  # the file it wrote
    chained: bool = True  # every line of the log is hash-chained: a log holding a line without the chain is refused
    seen_before_test: int | None = optional()  # made before the run's test (this seq), it scored the tested selection
    # the same held-out set (weights, task) tested before in other run directories, as the ledger says ("RUN#seq")
    seen_elsewhere: list[str] | None = optional()


@dataclass(frozen=True, kw_only=True)
class SelectionDocument(Document):
    """Stage 2: the frozen head set and every set the search scored."""

    FILE: ClassVar[str] = "selection.json"
    heads: HeadSet = coded(HEADS)
    discovery_accuracy: float
    discovery_gain: float  # selection-biased: the best of n_evaluations candidates on the examples that chose it
    intact_discovery_accuracy: float
    model: ModelRecord = coded(MODEL)
    task: TaskRecord = coded(TASK)
    config: JsonObject
    discovery_ids: list[str]
    discovery_hashes: list[str]
    discovery_hash: str
    shots: list[str]
    strategy: str
    strategy_options: JsonObject
    k: int
    n_evaluations: int
    rounds: list[list[HeadSet]] = coded(SET_NAME, depth=2)  # per round, the sets kept (greedy, beam)
    ranking: list[RankedSet] = rows(RankedSet)
    p: int | None = optional()  # Algorithm 1 only, from here on
    n_evaluated_subsets: int | None = optional()
    pool: list[Head] | None = coded(HEAD, depth=1, omit_none=True)
    flagged_interactions: list[Interaction] | None = field(default=None,
                                                           metadata={"omit_none": True, "rows": Interaction})
    forced_after_test: bool | None = optional()  # reselected with force=True after a look at the held-out set
    forced_no_gain: bool | None = optional()  # frozen with force=True although its discovery gain is ≤ 0
    discovery_gain_note: str = DISCOVERY_GAIN_NOTE
    heldout: HeldoutContract = field(metadata={"record": HeldoutContract})  # what every test of it scores
    screen_digest: str  # ScreenDocument.results_digest() of the screen it was searched on
    prior_looks: list[LookRecord] | None = field(default=None, metadata={"omit_none": True, "rows": LookRecord})

    def to_pandas(self) -> Any:
        """Every head set the search scored (``heads``, ``size``, ``accuracy``, ``gain``, ``gain_count``, ``damage``,
        ``fixes``), best first: a ``pandas.DataFrame``."""
        import pandas as pd

        return pd.DataFrame([{"heads": str(r.heads), "size": len(r.heads), "accuracy": r.accuracy, "gain": r.gain,
                              "gain_count": r.gain_count, "damage": r.damage, "fixes": r.fixes} for r in self.ranking])


@dataclass(frozen=True, kw_only=True)
class DiagnosticsDocument(Document):
    """How the search went: the rounds (greedy, beam) or Algorithm 1's interaction diagnostics."""

    FILE: ClassVar[str] = "diagnostics.json"
    strategy: str
    rounds: list[list[HeadSet]] = coded(SET_NAME, depth=2)
    pool: list[Head] | None = coded(HEAD, depth=1, omit_none=True)
    subsets: list[Interaction] | None = field(default=None, metadata={"omit_none": True, "rows": Interaction})
    pairwise_interaction: list[list[int | None]] | None = optional()  # gain_count(pair) − gain_count(a) − gain_count(b)
    overlap: dict[str, list[list[int]]] | None = optional()  # shared fixes / damage between pool heads, in examples
    flagged: list[Interaction] | None = field(default=None, metadata={"omit_none": True, "rows": Interaction})
    noise_rule: str | None = optional()


# ---------------------------------------------------------------------------------------------
# stability.json


@dataclass(frozen=True, kw_only=True)
class StableSelection(Record):
    heads: HeadSet = coded(HEADS)
    frequency: float
    is_reference: bool
    discovery_gain: float
    heldout_gain: float
    heldout_gain_ci: list[float]
    heldout_mcnemar_p: float
    exploratory: bool = True  # every row but the tested frozen selection (whose figure repeats the test): not a test


@dataclass(frozen=True, kw_only=True)
class StabilityDocument(Document):
    """Selections on resamples of the discovery set, each distinct one scored on the held-out set."""

    FILE: ClassVar[str] = "stability.json"
    strategy: str
    p: int
    k: int
    resampling: str
    n_resamples: int
    fraction: float | None
    seed: int
    reference_selection: HeadSet = coded(HEADS)
    reference_frequency: float
    head_frequency: dict[Head, float] = coded(HEAD, depth=KEYS)  # most often chosen first
    mean_pairwise_jaccard: float
    n_distinct_selections: int
    heldout_gain_over_resamples: dict[str, float]  # mean, min, q05, median, q95, max
    heldout_intact_accuracy: float
    n_heldout: int
    selections: list[StableSelection] = rows(StableSelection)
    per_resample: list[HeadSet] = coded(HEADS, depth=1, default_factory=list)
    n_discovery_evaluations: int = 0
