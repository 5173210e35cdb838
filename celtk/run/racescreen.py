"""Stage 1 by racing (``screen = "racing"``): every head is scored on growing chunks of the
discovery set and dropped once it cannot enter the top-``p`` pool (:func:`celtk.screening.racing.race`).
Pool heads are scored on every example, so select (on the pool) and the held-out test see what
the exhaustive screen gives them; ``screen.json`` records the mode and each head's ``n_scored``.

Resumable: each chunk's outcomes are written per start layer to ``race_parts/`` (claimed for
one mode, p, schedule, reveal order and head list); a rerun replays the race from them, which
drops the same heads, and scores only what is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from jaxtyping import Bool, Int

from celtk.errors import ConfigError, RunStoreError
from celtk.heads import Head, HeadSet
from celtk.run.screen import ScreenOutcome, null_control, screen_row
from celtk.run.session import Session
from celtk.screening.racing import Mode, RaceResult, default_schedule, race, subset_prepared
from celtk.store.documents import Correctness, RacingRecord
from celtk.store.files import fingerprint_key, read_json, write_json
from celtk.store.memo import claim_parts

if TYPE_CHECKING:
    from celtk.evaluation.results import EvalResult

Progress = Callable[[str, int, int], None]
DELTA = 0.05  # the confidence mode's failure probability, recorded in screen.json


def racing_screen(session: Session, directory: Path, heads: list[Head], progress: Progress | None) -> ScreenOutcome:
    """Race ``heads`` for the top ``session.config.p`` in ``session.config.racing_mode``."""
    config = session.config
    if session.task.kind == "generate":
        raise ConfigError(f"The racing screen scores teacher-forced tasks; {session.task.full_name} is graded on "
                          "generations. Screen it exhaustively (screen = 'exhaustive', `--screen exhaustive`).")
    sets = [HeadSet((h,)) for h in heads]
    if not 1 <= config.p <= len(sets):
        raise ConfigError(f"A racing screen keeps the top p = {config.p} of the {len(sets)} heads screened; "
                          f"use 1 ≤ p ≤ {len(sets)} (--p).")
    intact, scored = session.screener("discovery").run([HeadSet()])
    n = len(intact.examples)
    mode: Mode = "confidence" if config.racing_mode == "confidence" else "exact"  # validated by RunConfig
    schedule = default_schedule(n, mode)
    order = np.random.default_rng(config.seed).permutation(n) if mode == "confidence" else np.arange(n)
    parts = directory / "race_parts"
    key = {"mode": mode, "p": config.p, "schedule": schedule, "order": order.tolist(), "heads": [str(s) for s in sets],
           "intact": Correctness.of(intact.correct).bits}
    claim_parts(parts, fingerprint_key(key))
    scorer = ChunkScorer(session, parts, progress, len(sets) * n, intact.correct)
    result = race(scorer, sets, n, intact.correct, config.p, mode, schedule, delta=DELTA, order=order,
                  tie_break=config.tie_break)
    rows = [screen_row(s, result.outcomes[s], intact.correct, result.scored_mask(s)) for s in sets]
    return ScreenOutcome(intact, null_control(intact, scored[HeadSet()]), rows, racing_record(result),
                         evaluated=scorer.evaluated)


def racing_record(result: RaceResult) -> RacingRecord:
    """The ``racing`` entry of ``screen.json``."""
    natural = np.array_equal(result.order, np.arange(result.n))
    return RacingRecord(mode=result.mode, p=result.p, delta=result.delta, schedule=list(result.schedule),
                        racing_after=list(result.racing_after), order=None if natural else result.order.tolist(),
                        pool=[_single(s) for s in result.pool], uncertified=[_single(s) for s in result.uncertified],
                        evaluations=result.evaluations, exhaustive_evaluations=len(result.heads) * result.n,
                        saved_fraction=result.saved_fraction)


def _single(heads: HeadSet) -> Head:
    (head,) = heads.heads  # a racing screen races single heads
    return head


class ChunkScorer:
    """The ``score_chunk`` of :func:`celtk.screening.racing.race` on a run: chunk ``c``'s outcomes are kept in
    ``parts/chunk{c}-L{layer}.json``; a head found there is served, not scored again.

    Args:
        session: the run's session (its screener settings score each chunk).
        parts: the claimed ``race_parts`` directory.
        progress: ``progress("screen", evaluations done, evaluations of an exhaustive screen)``.
        total: heads × examples.
        intact: the intact correctness on the whole discovery set (bool ``[n]``): each chunk's own
            intact pass must agree with it on the chunk's examples (batch shapes differ between the
            two; on a GPU or in bfloat16 that can flip a verdict, and a race must not rank heads
            against another baseline than the screen's).
    """

    def __init__(self, session: Session, parts: Path, progress: Progress | None, total: int,
                 intact: Bool[np.ndarray, " example"]) -> None:
        self.session, self.parts, self.progress, self.total = session, parts, progress, total
        self.intact = np.asarray(intact, dtype=bool)
        self.prepared = session.prepared("discovery")
        self.chunk, self.done, self.evaluated = 0, 0, 0

    def __call__(self, heads: list[HeadSet], indices: Int[np.ndarray, " chunk"]
                 ) -> dict[HeadSet, Bool[np.ndarray, " chunk"]]:
        chunk, self.chunk = self.chunk, self.chunk + 1
        known = self._stored(chunk, indices)
        missing = [h for h in heads if h not in known]
        self.done += (len(heads) - len(missing)) * len(indices)
        self._report()
        if missing:
            screener = self.session.screener_on(subset_prepared(self.prepared, indices.tolist()))

            def on_layer(layer: int, results: dict[HeadSet, EvalResult]) -> None:
                path = self.parts / f"chunk{chunk}-L{layer}.json"
                stored = read_json(path)["heads"] if path.exists() else {}
                stored.update({str(h): Correctness.of(r.correct).bits for h, r in results.items()})
                write_json(path, {"chunk": chunk, "indices": indices.tolist(), "heads": stored})
                known.update({h: r.correct for h, r in results.items()})
                self.done += len(results) * len(indices)
                self._report()

            chunk_intact, _ = screener.run(missing, on_layer=on_layer)
            self._check_intact(chunk, indices, np.asarray(chunk_intact.correct, dtype=bool))
            self.evaluated += len(missing)
        return {h: known[h] for h in heads}

    def _check_intact(self, chunk: int, indices: Int[np.ndarray, " chunk"], correct: Bool[np.ndarray, " chunk"]
                      ) -> None:
        expected = self.intact[indices]
        if not np.array_equal(correct, expected):
            differ = int((correct != expected).sum())
            raise RunStoreError(f"The intact model scores {differ} of chunk {chunk}'s {len(indices)} examples "
                                "differently when they are batched as a chunk than in the screen's intact pass: the "
                                "batch shape changed a verdict (device or dtype numerics), so heads would be raced "
                                "against another baseline. "
                                "Screen exhaustively (--screen exhaustive), or race in float32.")

    def _stored(self, chunk: int, indices: Int[np.ndarray, " chunk"]) -> dict[HeadSet, Bool[np.ndarray, " chunk"]]:
        known: dict[HeadSet, Bool[np.ndarray, " chunk"]] = {}
        for path in sorted(self.parts.glob(f"chunk{chunk}-L*.json")):
            part = read_json(path)
            if part["indices"] != indices.tolist():
                raise RunStoreError(f"{path} holds outcomes of other examples than chunk {chunk} of this race; "
                                    f"delete {self.parts} and screen again.")
            known.update({HeadSet.parse(h): Correctness(b).outcomes() for h, b in part["heads"].items()})
        return known

    def _report(self) -> None:
        if self.progress:
            self.progress("screen", self.done, self.total)
