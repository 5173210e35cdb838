"""A persistent memo of head-set outcomes on the discovery set, shared by every search."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
from jaxtyping import Bool

from celtk.boundary import public
from celtk.errors import RunStoreError
from celtk.heads import HeadSet
from celtk.registry import annotation_names
from celtk.store.documents import Correctness
from celtk.store.files import atomic_write_text, read_json, write_json

if TYPE_CHECKING:
    from celtk.evaluation.results import EvalResult

__getattr__ = annotation_names({"EvalResult": "celtk.evaluation.results"})  # resolved by the boundary on first need

Progress = Callable[[str, int, int], None]
WORK_SCALE = 1000  # a stage's progress within its layers, in thousandths of its replay work (the screen's too)


def per_mille(done: int, total: int) -> int:
    """``done`` of ``total`` units of work in :data:`WORK_SCALE` thousandths (all of it when there is none)."""
    return round(WORK_SCALE * done / total) if total else WORK_SCALE



@runtime_checkable  # the jaxtyping import hook beartypes every function here, stubs included
class SetScreener(Protocol):
    """What a memo scores its missing sets with: :class:`celtk.screening.cached.CachedScreener` or
    :class:`celtk.screening.generation.GenerationScreener` (the store imports neither: both load torch)."""

    def run(self, sets: Iterable[HeadSet], on_layer: Callable[[int, dict[HeadSet, EvalResult]], None] | None = None,
            on_intact: Callable[[EvalResult], None] | None = None,
            on_work: Callable[[int, int], None] | None = None) -> tuple[EvalResult, dict[HeadSet, EvalResult]]: ...


class SetMemo:
    """Per-example outcomes of head sets on the discovery set, kept on disk so any search
    (Algorithm 1, greedy, beam, stability resamples) resumes after an interruption and never
    scores a set twice. Files are ``DIR/{batch tag}-L{start layer}.json``, written atomically
    as each start layer finishes. Outcomes hold only for one run's settings: with a ``key``
    (a hash of the fingerprint and intact outcomes), parts stored under another key are moved aside.

    Args:
        directory: where the part files live.
        intact: the intact model's correctness, bool ``[n]`` (checks stored parts' length).
        screener: builds the :class:`celtk.screening.cached.CachedScreener` on first need.
        key: what the outcomes depend on (``DIR.key`` records it); ``None`` keeps any parts.
    """

    @public
    def __init__(self, directory: Path, intact: Bool[np.ndarray, " example"],
                 screener: Callable[[], SetScreener],
                 progress: Progress | None = None, stage: str = "select", key: str | None = None,
                 work: bool = False) -> None:
        directory = Path(directory)
        if key is not None:
            claim_parts(directory, key)
        self.directory, self._screener = directory, screener
        self._instance: SetScreener | None = None
        self.progress, self.stage, self.work = progress, stage, work
        self.known: dict[HeadSet, Bool[np.ndarray, " example"]] = load_subset_parts(directory, intact)

    def __call__(self, sets: list[HeadSet]) -> dict[HeadSet, Bool[np.ndarray, " example"]]:
        """Correctness (bool ``[n]``) of each set in ``sets``, scoring only those not known yet."""
        missing = [s for s in dict.fromkeys(sets) if s not in self.known]
        if missing:
            tag = hashlib.sha1(",".join(str(s) for s in sorted(missing, key=HeadSet.sort_key))
                               .encode()).hexdigest()[:12]
            done = 0

            def on_layer(layer: int, results: dict[HeadSet, EvalResult]) -> None:
                nonlocal done
                rows = [{"heads": str(h), "correct": Correctness.of(r.correct).bits}
                        for h, r in sorted(results.items(), key=lambda kv: kv[0].sort_key())]
                write_json(self.directory / f"{tag}-L{layer}.json",
                           {"layer": layer, "subsets": rows, "digest": part_digest(layer, rows)})
                self.known.update({h: r.correct for h, r in results.items()})
                done += len(results)
                if self.progress:
                    self.progress(self.stage, done, len(missing))

            def on_work(work: int, total: int) -> None:  # within a layer's sets, weighted by what each replays
                if self.progress:
                    self.progress(f"{self.stage} work", per_mille(work, total), WORK_SCALE)

            if self.progress:
                self.progress(self.stage, 0, len(missing))
            if self._instance is None:
                self._instance = self._screener()
            self._instance.run(missing, on_layer=on_layer, on_work=on_work if self.work else None)
        return {s: self.known[s] for s in sets}


def claim_parts(directory: Path, key: str) -> None:
    """Make ``directory`` hold outcomes of ``key`` only: parts of another (or no) key are moved to
    ``DIR-stale-{old key}`` so a search under new settings never reuses them."""
    marker = directory.with_name(directory.name + ".key")
    old = marker.read_text().strip() if marker.exists() else "unkeyed"
    if old == key:
        return
    if directory.is_dir() and any(directory.iterdir()):
        aside = directory.with_name(f"{directory.name}-stale-{old}")
        shutil.rmtree(aside, ignore_errors=True)  # a copy of the same stale outcomes set aside before
        directory.rename(aside)
    atomic_write_text(marker, key + "\n")


def part_digest(layer: object, rows: object) -> str:
    """SHA-256 of a part's layer and outcomes as celtk wrote them: a part edited by hand no longer matches."""
    canonical = json.dumps({"layer": layer, "subsets": rows}, sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def load_subset_parts(parts: Path, intact: Bool[np.ndarray, " example"]
                      ) -> dict[HeadSet, Bool[np.ndarray, " example"]]:
    """Set outcomes finished by an earlier, interrupted search (one file per batch and start layer)."""
    known: dict[HeadSet, Bool[np.ndarray, " example"]] = {}
    for path in sorted(parts.glob("*.json")) if parts.is_dir() else []:
        doc = read_json(path)
        try:
            rows = [(HeadSet.parse(row["heads"]), Correctness(row["correct"]).outcomes()) for row in doc["subsets"]]
        except (KeyError, TypeError, ValueError, AttributeError, RunStoreError):  # HeadError is a ValueError
            raise RunStoreError(f"{path} is not a part celtk wrote (it needs a 'subsets' list of head sets and "
                                "outcomes); delete it and rerun: only its subsets are scored again.") from None
        if doc.get("digest") != part_digest(doc.get("layer"), doc["subsets"]):
            raise RunStoreError(f"{path} does not match its digest: its outcomes changed after celtk wrote them (or "
                                "it has no digest), so they are not reused. Delete it and rerun: only its subsets are "
                                "scored again.")
        for heads, correct in rows:
            if correct.shape != intact.shape:
                raise RunStoreError(f"{path} holds outcomes for {len(correct)} examples, not {len(intact)}; "
                                    f"delete {parts}.")
            known[heads] = correct
    return known
