"""Presentation helpers for the CLI: rich console, progress bars, config precedence."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import click

if TYPE_CHECKING:  # annotations only: rich and the run settings load when a verb needs them
    from rich.console import Console

    from celtk.run.config import RunConfig

Progress = Callable[[str, int, int], None]
"""A stage's ``progress(stage, done, total)`` callback, as the library's stages take it."""


def quiet_libraries() -> None:
    """Silence transformers' load bars and deprecation chatter; the CLI draws its own progress."""
    import warnings

    from transformers.utils import logging as hf_logging

    # switches that transformers leaves unannotated
    switches: tuple[Callable[[], None], ...] = (hf_logging.disable_progress_bar, hf_logging.set_verbosity_error)
    for switch in switches:
        switch()
    warnings.filterwarnings("ignore", category=FutureWarning)


LOG_WIDTH = 160  # columns when writing to a file or pipe, where rich would assume 80 and cut the tables' cells


def console(stderr: bool = False) -> Console:
    """A rich console; not on a terminal (a log file, a pipe, a Slurm output) it is 160 columns wide
    unless ``COLUMNS`` says otherwise, so wide result tables stay readable."""
    import os
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else LOG_WIDTH
    return Console(stderr=stderr, width=width)


@dataclass(frozen=True)
class ProgressSettings:
    """How long stages report progress (the ``celtk`` group's ``--quiet``, ``--log-format``, ``--progress-every``)."""

    quiet: bool = False
    log_format: str = "text"  # text: rich bars on a terminal, plain lines elsewhere; json: JSON lines anywhere
    every: float = 30.0  # seconds between lines off a terminal


# What one step of each stage's ``progress(stage, done, total)`` counts (the library's stage names).
UNITS = {"load": "models", "screen work": "‰ of its work",
         "screen": "heads", "select": "head sets", "select work": "‰ of its work", "stability": "head sets",
         "lasso": "head sets",
         "held-out": "head sets", "held-out work": "‰ of its work", "resamples": "resamples", "test": "passes",
         "eval": "batches", "transfer": "variants", "transfer work": "‰ of its work", "plain-text loss": "windows",
         "calibrate": "head sets", "calibrate held-out": "‰ of its work", "search null": "repeats"}
HEARTBEAT = 30.0  # seconds of silence before a "still working" line when lines are asked for at every step (every = 0)


def progress_settings() -> ProgressSettings:
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get("celtk.progress", ProgressSettings()) if ctx is not None else ProgressSettings()


class _Stage(TypedDict):
    """What :class:`ProgressLines` keeps of one stage: where it started (clock time, steps done), its total, the
    steps done, when it last wrote a line and took a step, and whether its end was written."""

    start: float
    start_done: int
    total: int
    done: int
    last: float | None
    step: NotRequired[float]
    reported_end: NotRequired[bool]


class ProgressLines:
    """``progress(stage, done, total)`` as lines for a log: a stage's first call, then at most one
    line every ``every`` seconds, and its last step, each with the rate and the time left.

    A stage restarts (its rate measured afresh) when its total changes or its count goes back, as a
    search round that scores a new batch of sets does. ``per_unit[stage]`` examples per step add an
    examples-per-second figure; ``clock`` is injectable for tests.

    A step can take longer than ``every`` (a model load, an intact pass, one long batch): :meth:`beat`
    writes a "still working" line, with the elapsed time, once no line has been written for ``every``
    seconds (30 with ``every = 0``), and :meth:`heartbeat` calls it from a background thread, so a log
    gets a line at that cadence however coarse a stage's steps are."""

    def __init__(self, write: Callable[[str], None], *, every: float = 30.0, json_lines: bool = False,
                 units: dict[str, str] | None = None, per_unit: dict[str, int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.write, self.every, self.json_lines, self.clock = write, every, json_lines, clock
        self.units = {**UNITS, **(units or {})}
        self.per_unit = per_unit or {}
        self.stages: dict[str, _Stage] = {}
        self.silence = every if every > 0 else HEARTBEAT  # the longest a log waits for a line
        self.started = self.last_line = clock()
        self.current: str | None = None  # the stage called last
        self._lock = threading.Lock()  # the heartbeat thread writes too: one line at a time, whole

    def __call__(self, stage: str, done: int, total: int) -> None:
        with self._lock:
            now = self.clock()
            state = self.stages.get(stage)
            if state is None or total != state["total"] or done < state["done"]:
                state = self.stages[stage] = {"start": now, "start_done": done, "total": total, "done": done,
                                              "last": None}
            state["done"], state["step"], self.current = done, now, stage
            finished = done >= total
            if state["last"] is not None and not finished and now - state["last"] < self.every:
                return
            if finished and state.get("reported_end"):
                return
            state["last"], state["reported_end"] = now, finished
            self._write(self.line(stage, done, total, now - state["start"], done - state["start_done"]), now)

    def _write(self, text: str, now: float) -> None:
        self.write(text)
        self.last_line = now

    def beat(self) -> bool:
        """Write a "still working" line if no line came for ``every`` seconds (30 with ``every = 0``); ``True`` if
        it wrote one."""
        with self._lock:
            now = self.clock()
            if now - self.last_line < self.silence:
                return False
            self._write(self.still_working(now), now)
            return True

    @contextmanager
    def heartbeat(self) -> Iterator[ProgressLines]:
        """A background thread that calls :meth:`beat` when a line is due, for the ``with`` block's duration (it
        only writes lines; it stops, and is joined, when the block ends, however it ends)."""
        stop = threading.Event()

        def loop() -> None:
            while True:
                with self._lock:
                    wait = self.last_line + self.silence - self.clock()
                if wait <= 0:
                    try:
                        self.beat()
                    except (OSError, ValueError):  # the log is gone (closed, full): the stage's own lines say so
                        return
                    continue
                if stop.wait(min(wait, 1.0)):
                    return

        thread = threading.Thread(target=loop, name="celtk-progress-heartbeat", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=5.0)

    def still_working(self, now: float) -> str:
        """The heartbeat's line: the stage called last, where it stands, how long it has run and since its last
        step (before any stage: how long the command has run)."""
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        stage = self.current
        state = self.stages.get(stage) if stage is not None else None
        if stage is None or state is None:
            if self.json_lines:
                return json.dumps({"time": stamp, "stage": None, "still_working": True,
                                   "elapsed_s": round(now - self.started, 1)})
            return f"{stamp} still working (starting), elapsed {_duration(now - self.started)}"
        done, total = state["done"], state["total"]
        unit = self.units.get(stage, "steps")
        elapsed, idle = now - state["start"], now - state["step"]
        if self.json_lines:
            return json.dumps({"time": stamp, "stage": stage, "still_working": True, "done": done, "total": total,
                               "unit": unit, "elapsed_s": round(elapsed, 1), "since_step_s": round(idle, 1)})
        where = (f"{done}/{total} {unit} done, still working after it" if done >= total else
                 f"still working, {done}/{total} {unit} ({100 * done / total if total else 100:.0f}%)")
        return f"{stamp} {stage}: {where}, elapsed {_duration(elapsed)}, last step {_duration(idle)} ago"

    def line(self, stage: str, done: int, total: int, elapsed: float, advanced: int) -> str:
        unit = self.units.get(stage, "steps")
        rate = advanced / elapsed if advanced > 0 and elapsed > 0 else None
        eta = (total - done) / rate if rate else (0.0 if done >= total else None)
        # a stage that also reports "<stage> work" (the screen: heads cost unequal time, later layers replay less)
        # leaves its time left to that count, which is weighted by cost; a second, unweighted ETA would mislead
        weighted = f"{stage} work" if f"{stage} work" in self.stages and done < total else None
        eta = None if weighted else eta
        examples = rate * self.per_unit[stage] if rate is not None and stage in self.per_unit else None
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.json_lines:
            return json.dumps({"time": stamp, "stage": stage, "done": done, "total": total, "unit": unit,
                               "rate": None if rate is None else round(rate, 4),
                               "examples_per_s": None if examples is None else round(examples, 2),
                               "elapsed_s": round(elapsed, 1), "eta_s": None if eta is None else round(eta, 1)})
        parts = [f"{stamp} {stage}: {done}/{total} {unit} ({100 * done / total if total else 100:.0f}%)",
                 f"{rate:.3g} {unit}/s" if rate is not None else f"- {unit}/s"]
        if examples is not None:
            parts.append(f"{examples:.3g} examples/s")
        parts += [f"elapsed {_duration(elapsed)}",
                  f"ETA: see {weighted}" if weighted else f"ETA {_duration(eta) if eta is not None else '-'}"]
        return ", ".join(parts)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


@contextmanager
def progress_bar(units: dict[str, str] | None = None, per_unit: dict[str, int] | None = None
                 ) -> Iterator[Progress | None]:
    """Progress of long stages as the ``celtk`` options ask: a rich bar with ETA on a terminal, plain
    (or JSON) lines to stderr elsewhere (a log file, a Slurm output) with a "still working" line whenever
    none came for ``--progress-every`` seconds (:meth:`ProgressLines.heartbeat`), nothing with ``--quiet``. Yields
    a ``progress(stage, done, total)`` callback, or ``None`` when quiet. ``units`` and ``per_unit``
    name what a stage's steps count and how many examples each holds (see :class:`ProgressLines`)."""
    import sys

    quiet_libraries()
    settings = progress_settings()
    if settings.quiet:
        yield None
        return
    if settings.log_format == "json" or not sys.stderr.isatty():
        def write(text: str) -> None:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()

        lines = ProgressLines(write, every=settings.every, json_lines=settings.log_format == "json", units=units,
                              per_unit=per_unit)
        with lines.heartbeat():  # a slow step still gets a line every `every` seconds
            yield lines
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn()]
    tasks: dict[str, TaskID] = {}
    with Progress(*columns, console=console(stderr=True), transient=False) as bar:
        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield update


def resolve_config(config_file: str | None, flags: dict[str, object]) -> RunConfig:
    """defaults < config file < CLI flags (flags left unset are None and do not override)."""
    from celtk.run.config import resolve_config as resolve

    return resolve(config_file, flags)


class FiniteFloatRange(click.FloatRange):
    """A float range that also refuses nan and ±inf, which click's range check lets through (nan compares false)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        # Any: click hands over the command line's str or a default's float (its stubs say float)
        number = super().convert(value, param, ctx)
        if number != number or number in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number
