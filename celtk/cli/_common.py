"""Presentation helpers for the CLI: rich console, progress bars, config precedence."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click


def quiet_libraries() -> None:
    """Silence transformers' load bars and deprecation chatter; the CLI draws its own progress."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)


LOG_WIDTH = 160  # columns when writing to a file or pipe, where rich would assume 80 and cut the tables' cells


def console(stderr: bool = False):
    """A rich console; not on a terminal (a log file, a pipe, a Slurm output) it is 160 columns wide
    unless ``COLUMNS`` says otherwise, so wide result tables stay readable."""
    import os
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else LOG_WIDTH
    return Console(stderr=stderr, width=width)


@contextmanager
def progress_bar() -> Iterator[Any]:
    """A rich progress bar with ETA; yields a ``progress(stage, done, total)`` callback."""
    quiet_libraries()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn()]
    tasks: dict[str, Any] = {}
    with Progress(*columns, console=console(stderr=True), transient=False) as bar:
        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield update


def resolve_config(config_file: str | None, flags: dict[str, Any]):
    """defaults < config file < CLI flags (flags left unset are None and do not override)."""
    from celtk.run.config import resolve_config as resolve

    return resolve(config_file, flags)


class FiniteFloatRange(click.FloatRange):
    """A float range that also refuses nan and ±inf, which click's range check lets through (nan compares false)."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if number != number or number in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number
