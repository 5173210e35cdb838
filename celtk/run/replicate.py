"""The whole pipeline over several split seeds of one model and task: would the search find its heads again?

Each seed is a run directory of its own under one parent (``OUT/seed-S``: screen, select, test, exactly
``celtk run --seed S --out OUT/seed-S``), so every seed resumes, reruns as stored, and can be made by another
process (a Slurm array task per seed) before :func:`run_replicate` reads it. Across seeds: the mean held-out gain
with a t interval over seeds, each seed's McNemar p Holm-adjusted over the seeds, and how often each head was
selected. A seed whose search found no gain freezes nothing (:class:`~celtk.errors.NothingToFreezeError`) and is
a row that says so, not a test.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
from scipy.stats import t as student

from celtk.boundary import public
from celtk.errors import ConfigError, NothingToFreezeError
from celtk.heads import Head, HeadSet
from celtk.models import Model, load_model
from celtk.run.config import RunConfig, preflight
from celtk.run.full import run_all, stored_run
from celtk.run.options import REPLICATE
from celtk.stats import holm
from celtk.store.documents import (
    HEAD,
    HEADS,
    KEYS,
    MODEL_NAME,
    SET_NAME,
    TASK_NAME,
    Document,
    ModelName,
    Record,
    ScreenDocument,
    TaskName,
    coded,
    optional,
    rows,
)
from celtk.store.files import JsonObject, locked

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, kw_only=True)
class ReplicateRow(Record):
    """One seed: its selection and held-out test, or why it has none (``status``)."""

    seed: int
    run: str  # the seed's run directory, relative to the replicate directory
    status: str  # "tested", or "no gain" (the search found no set that gains on discovery; nothing frozen)
    intact_discovery_accuracy: float | None = optional()
    heads: HeadSet | None = coded(HEADS, omit_none=True)
    discovery_gain: float | None = optional()
    intact_accuracy: float | None = optional()  # held-out
    ablated_accuracy: float | None = optional()
    gain: float | None = optional()  # held-out, a fraction
    gain_ci: list[float] | None = optional()
    mcnemar_p: float | None = optional()
    holm_p: float | None = optional()  # Holm over the tested seeds
    significant: bool | None = optional()  # holm_p < alpha


@dataclass(frozen=True, kw_only=True)
class ReplicateDocument(Document):
    """``replicate.json``: every seed's row and what holds across them."""

    FILE: ClassVar[str] = "replicate.json"
    model: ModelName = coded(MODEL_NAME)  # as the replication was given it (an alias, hub id or path)
    task: TaskName = coded(TASK_NAME)
    seeds: list[int]
    config: JsonObject  # the settings every seed shares (its own seed aside)
    per_seed: list[ReplicateRow] = rows(ReplicateRow)
    alpha: float
    n_tested: int
    mean_gain: float | None  # over the tested seeds
    mean_gain_ci: list[float] | None  # a t interval over seeds (None below two tested seeds)
    n_significant: int  # seeds whose Holm-adjusted McNemar p is below alpha
    # head → share of the seeds that froze a selection holding it (most often first, then by name)
    head_frequency: dict[Head, float] = coded(HEAD, depth=KEYS)
    set_frequency: dict[HeadSet, float] = coded(SET_NAME, depth=KEYS)  # selection → share of those seeds


def parse_seeds(text: str | Sequence[int]) -> list[int]:
    """``"1,2,3"``, ``"1-5"`` or a list → distinct non-negative seeds in the order given."""
    if not isinstance(text, str):
        seeds = [int(s) for s in text]
    else:
        seeds = []
        for part in (p.strip() for p in text.split(",") if p.strip()):
            low, dash, high = part.partition("-")
            try:
                seeds += list(range(int(low), int(high) + 1)) if dash else [int(part)]
            except ValueError:
                raise ConfigError(f"Seeds {text!r}: write whole numbers separated by commas, or a range, e.g. "
                                  "'1,2,3' or '1-5'.") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"Seeds {text!r}: give at least one seed, each a distinct whole number ≥ 0.")
    return seeds


@public
def run_replicate(config: RunConfig, out: Path, seeds: Sequence[int], *, model: Model | None = None,
                  alpha: float = REPLICATE.alpha, progress: Progress | None = None) -> ReplicateDocument:
    """Screen, select and test ``config`` once per seed in ``seeds`` (``config.seed`` is replaced), each in
    ``out/seed-S``, then summarise them in ``out/replicate.json`` (rewritten only when it changes). The model is
    loaded once, and only if some seed still has work to do."""
    out, seeds = Path(out), parse_seeds(seeds)
    if not 0 < alpha < 1:
        raise ConfigError(f"alpha must lie strictly between 0 and 1, got {alpha}.")
    for seed in seeds:
        preflight(replace(config, seed=seed), out / f"seed-{seed}")
    if model is None and any(stored_run(replace(config, seed=seed), out / f"seed-{seed}") is None for seed in seeds):
        model = load_model(config.model, device=config.device, dtype=config.dtype)  # once, for every seed
    found: list[ReplicateRow] = []
    for index, seed in enumerate(seeds):
        if progress:
            progress("replicate", index, len(seeds))
        directory = out / f"seed-{seed}"
        try:
            result = run_all(replace(config, seed=seed), directory, model=model, progress=progress)
        except NothingToFreezeError:
            found.append(_untested(directory, seed))
            continue
        t = result.test
        found.append(ReplicateRow(seed=seed, run=directory.name, status="tested",
                                  intact_discovery_accuracy=result.selection.intact_discovery_accuracy,
                                  heads=t.heads, discovery_gain=result.selection.discovery_gain,
                                  intact_accuracy=t.intact_accuracy, ablated_accuracy=t.ablated_accuracy, gain=t.gain,
                                  gain_ci=list(t.gain_ci), mcnemar_p=t.mcnemar_p))
    if progress:
        progress("replicate", len(seeds), len(seeds))
    document = summarise(config, seeds, found, alpha)
    with locked(out):
        path = out / ReplicateDocument.FILE
        if not (path.exists() and json.loads(path.read_text(encoding="utf-8")) == document.to_json()):
            document.save(out)
    return document


def _untested(directory: Path, seed: int) -> ReplicateRow:
    screen = ScreenDocument.load(directory)
    return ReplicateRow(seed=seed, run=directory.name, status="no gain",
                        intact_discovery_accuracy=screen.intact_accuracy)


def summarise(config: RunConfig, seeds: list[int], found: list[ReplicateRow], alpha: float) -> ReplicateDocument:
    """The across-seed figures of the rows."""
    tested = [r for r in found if r.status == "tested"]
    adjusted = holm([r.mcnemar_p for r in tested]) if tested else np.array([])
    by_seed = {r.seed: (float(p), bool(p < alpha)) for r, p in zip(tested, adjusted, strict=True)}
    final = [replace(r, holm_p=by_seed[r.seed][0], significant=by_seed[r.seed][1]) if r.seed in by_seed else r
             for r in found]
    gains = np.array([r.gain for r in tested], dtype=float)
    mean = float(gains.mean()) if len(gains) else None
    ci = None
    if len(gains) >= 2:
        half = float(student.ppf(1 - alpha / 2, len(gains) - 1) * gains.std(ddof=1) / math.sqrt(len(gains)))
        ci = [mean - half, mean + half] if mean is not None else None
    frozen = [r.heads for r in tested if r.heads is not None]
    heads = Counter(h for s in frozen for h in s.heads)
    sets = Counter(frozen)
    recorded = {k: v for k, v in config.recorded().items() if k != "seed"}
    return ReplicateDocument(
        model=ModelName(config.model), task=TaskName(config.task), seeds=seeds, config=recorded, per_seed=final,
        alpha=alpha,
        n_tested=len(tested), mean_gain=mean, mean_gain_ci=ci, n_significant=sum(sig for _, sig in by_seed.values()),
        head_frequency={h: c / len(frozen) for h, c in sorted(heads.items(), key=lambda kv: (-kv[1], str(kv[0])))},
        set_frequency={s: c / len(frozen) for s, c in sorted(sets.items(), key=lambda kv: (-kv[1], str(kv[0])))})
