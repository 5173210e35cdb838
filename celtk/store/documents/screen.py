"""The screen's documents: ``screen.json`` (one row per head, racing records) and ``altscreen.json``."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from jaxtyping import Float

from celtk.errors import ConfigError
from celtk.heads import Head, HeadSet, head_order
from celtk.store.documents.base import Document, Record
from celtk.store.documents.codecs import (
    CORRECTNESS,
    HEAD,
    MODEL,
    SPLITS,
    TASK,
    Correctness,
    ModelRecord,
    TaskRecord,
    coded,
    optional,
    optional_record,
    rows,
)
from celtk.store.files import JsonObject, read_json
from celtk.tasks import SplitManifest


@dataclass(frozen=True, kw_only=True)
class ScreenRow(Record):
    head: Head = coded(HEAD)
    accuracy: float
    gain: float
    gain_count: int
    damage: int
    fixes: int
    correct: Correctness = coded(CORRECTNESS)  # per example ('-': not scored, racing screens only)
    # racing screens: a head dropped early was scored on n_scored examples, and its accuracy, gain,
    # damage and fixes are on those examples only (gain as a fraction of them); None = every example
    n_scored: int | None = optional()

    @property
    def complete(self) -> bool:
        """Scored on every discovery example: every head, except those a racing screen dropped early."""
        return self.n_scored is None


@dataclass(frozen=True, kw_only=True)
class RacingRecord(Record):
    """How a racing screen (:mod:`celtk.run.racescreen`) went: heads were scored chunk by chunk and
    dropped once they could not enter the top-p pool; ``pool`` heads were scored on every example."""

    mode: str  # "exact" (the exhaustive pool by construction) or "confidence" (with probability ≥ 1 − delta)
    p: int
    delta: float | None  # confidence mode's failure probability
    schedule: list[int]  # chunk sizes, in examples
    racing_after: list[int]  # heads still racing after each chunk
    order: list[int] | None  # the order examples were revealed in; None = discovery order
    pool: list[Head] = coded(HEAD, depth=1)  # the top p, best first
    uncertified: list[Head] = coded(HEAD, depth=1)  # dropped by the confidence bound alone (always empty in exact mode)
    evaluations: int  # (head, example) evaluations made
    exhaustive_evaluations: int  # heads × examples
    saved_fraction: float


@dataclass(frozen=True, kw_only=True)
class ScreenDocument(Document):
    """Stage 1: every single head ablated on the discovery set (or one shard's slice), or raced
    (``racing``): then only the heads scored on every example (``n_scored`` unset) are complete."""

    FILE: ClassVar[str] = "screen.json"
    model: ModelRecord = coded(MODEL)
    task: TaskRecord = coded(TASK)
    n: int
    intact_accuracy: float
    intact_correct: Correctness = coded(CORRECTNESS)
    discovery_ids: list[str]
    discovery_hashes: list[str]
    splits: SplitManifest = coded(SPLITS)
    shard: list[int] | None
    config: dict[str, Any]  # RunConfig fields and celtk_version
    heads: list[ScreenRow] = rows(ScreenRow)
    null_ablation: JsonObject | None = optional()  # fixes, damage, max_abs_logprob_diff (0, 0, ~0 expected)
    layers: list[int] | None = optional()  # a quick look screened only these layers (run_screen(layers=...))
    racing: RacingRecord | None = optional_record(RacingRecord)  # a racing screen (config screen = "racing")

    def complete_rows(self) -> list[ScreenRow]:
        """The heads scored on every discovery example: all of them, except those a racing screen dropped."""
        return [r for r in self.heads if r.complete]

    def dropped_rows(self) -> list[ScreenRow]:
        """The heads a racing screen dropped early (scored on ``n_scored`` examples only); empty otherwise."""
        return [r for r in self.heads if not r.complete]

    def ranked_rows(self, tie_break: str | None = None) -> list[ScreenRow]:
        """The complete rows, best first, by the one ranking key (:func:`celtk.search.scores.head_order`), ties in
        every measure ordered by ``tie_break`` (default: the run's, ``numeric`` unless it recorded another)."""
        tie_break = self.config.get("tie_break", "numeric") if tie_break is None else tie_break
        return sorted(self.complete_rows(),
                      key=lambda r: head_order(HeadSet((r.head,)), r.gain_count, r.damage, r.accuracy, tie_break))

    def pool(self, p: int, tie_break: str | None = None) -> list[Head]:
        """The top ``p`` heads among those scored on every example, best first: what Algorithm 1 searches (and,
        on a racing screen, what it raced for); ties by ``tie_break`` as in :meth:`ranked_rows`."""
        return [r.head for r in self.ranked_rows(tie_break)[:p]]

    GRID_METRICS: ClassVar[tuple[str, ...]] = ("accuracy", "gain", "gain_count", "damage", "fixes")

    def grid(self, metric: str = "gain") -> Float[np.ndarray, "layer head"]:
        """``metric`` of each head alone (one of :attr:`GRID_METRICS`; ``gain`` as a fraction) as a
        ``[n_layers, n_heads]`` array; NaN where a head was not scored on every example (not screened here, or
        dropped early by a racing screen)."""
        if metric not in self.GRID_METRICS:
            raise ConfigError(f"Unknown screen metric {metric!r}; choose one of {', '.join(self.GRID_METRICS)}.")
        grid = np.full((self.n_layers, self.n_heads), np.nan)
        for row in self.complete_rows():
            grid[row.head.layer, row.head.head] = float(getattr(row, metric))
        return grid

    def to_pandas(self) -> Any:
        """One row per head (``head``, ``layer``, ``head_index``, ``accuracy``, ``gain``, ``gain_count``, ``damage``,
        ``fixes``, ``n_scored``), in head order: a ``pandas.DataFrame`` for a notebook."""
        import pandas as pd

        return pd.DataFrame([{"head": str(r.head), "layer": r.head.layer, "head_index": r.head.head,
                              "accuracy": r.accuracy, "gain": r.gain, "gain_count": r.gain_count, "damage": r.damage,
                              "fixes": r.fixes, "n_scored": len(r.correct) if r.complete else r.n_scored}
                             for r in self.heads])

    @property
    def n_layers(self) -> int:
        return self.model.n_layers

    @property
    def n_heads(self) -> int:
        return self.model.n_heads

    @property
    def model_name(self) -> str:
        return self.model.name

    @property
    def weight_hash(self) -> str:
        return self.model.weight_hash

    @property
    def task_name(self) -> str:
        return self.task.name

    def results_digest(self) -> str:
        """SHA-256 of what the screen found, what a selection records it was searched on: the model, task, splits
        and every outcome. Not ``config`` (batch size or device may differ between two calls that screen the same
        run) nor ``null_ablation`` (a float diagnostic of the two paths' agreement, not a result a search reads)."""

        results = {k: v for k, v in self.to_json().items() if k not in ("config", "null_ablation")}
        return hashlib.sha256(json.dumps(results, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# altscreen-METHOD.json


@dataclass(frozen=True, kw_only=True)
class AltscreenDocument(Document):
    """An alternative screener's ranking beside the exhaustive screen's (``altscreen-METHOD.json``);
    ``seconds`` lives in ``altscreen-METHOD-timing.json`` so the document stays deterministic."""

    method: str
    comparison: dict[str, Any]  # overlap, chance_overlap, jaccard, spearman, pools, n_evaluations
    details: dict[str, object]
    scores: dict[str, float]
    exhaustive_evaluations: int
    seconds: float = field(default=0.0, metadata={"stored": False})

    @staticmethod
    def file(method: str) -> str:
        return f"altscreen-{method}.json"

    def file_name(self) -> str:
        return self.file(self.method)

    def beside(self) -> dict[str, object]:
        return {f"altscreen-{self.method}-timing.json": {"seconds": round(self.seconds, 1)}}

    @classmethod
    def load_method(cls, directory: Path, method: str) -> AltscreenDocument:
        document = cls.load(directory, cls.file(method))
        timing = Path(directory) / f"altscreen-{method}-timing.json"
        return replace(document, seconds=read_json(timing)["seconds"]) if timing.exists() else document
