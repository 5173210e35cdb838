"""Presentation helpers for the CLI: rich console, progress bars, config precedence."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

MODEL_OPTION = click.option("--model", default=None, help="Packaged alias, hub id, HF directory or .gguf file (default smollm2-135m).")
TASK_OPTION = click.option("--task", default=None, help="Task name, e.g. arithmetic:2da, boolq, jsonl:PATH (see `celtk tasks`).")


def quiet_libraries() -> None:
    """Silence transformers' load bars and deprecation chatter; the CLI draws its own progress."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)


@contextmanager
def progress_bar() -> Iterator[Any]:
    """A rich progress bar with ETA; yields a ``progress(stage, done, total)`` callback."""
    quiet_libraries()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn()]
    tasks: dict[str, Any] = {}
    with Progress(*columns, console=console(stderr=True), transient=False) as bar:
        def update(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield update


def load_config_file(path: str | None) -> dict[str, Any]:
    if path is None:
        return {}
    from celtk.errors import ConfigError

    file = Path(path)
    try:
        text = file.read_text()
    except OSError as error:
        raise ConfigError(f"Cannot read config file {path}: {error.strerror}.") from None
    try:
        data = tomllib.loads(text) if file.suffix == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"Config file {path} is not valid {'TOML' if file.suffix == '.toml' else 'JSON'}: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {path} must hold a table/object of settings.")
    return data


def resolve_config(config_file: str | None, flags: dict[str, Any]):
    """defaults < config file < CLI flags (flags left unset are None and do not override)."""
    from celtk.pipeline import RunConfig

    values = load_config_file(config_file)
    values.update({k: v for k, v in flags.items() if v is not None})
    return RunConfig.from_dict(values, where=config_file or "flags")
