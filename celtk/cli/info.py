"""``celtk models`` and ``celtk tasks``."""

from __future__ import annotations

import click

from celtk.cli._common import console


@click.command("models")
def models_cmd() -> None:
    """List the packaged model aliases and whether each loads offline here."""
    from rich.table import Table

    from celtk.models import ALIASES, DEFAULT_MODEL, alias_available

    table = Table(title="Packaged models (any HF hub id, HF directory or .gguf path also works)")
    for col in ("alias", "architecture", "layers × heads", "GGUF → float32", "offline here", "install"):
        table.add_column(col)
    for alias in ALIASES.values():
        name = alias.name + (" (default)" if alias.name == DEFAULT_MODEL else "")
        table.add_row(name, alias.architecture, alias.shape, alias.size, "yes" if alias_available(alias) else "no",
                      alias.install)
    console().print(table)


@click.command("tasks")
def tasks_cmd() -> None:
    """List the registered tasks, and the subtasks of those that have them (arithmetic:2da, ...)."""
    from rich.table import Table

    from celtk.tasks import task_classes

    table = Table(title="Tasks")
    for col in ("name", "kind", "description"):
        table.add_column(col)
    for name, cls in sorted(task_classes().items()):
        kind = str(cls.kind) if isinstance(cls.kind, str) else "target/choice"
        table.add_row(name, kind, cls.description)
        for option, description in getattr(cls, "option_descriptions", {}).items():
            table.add_row(f"  {name}:{option}", kind, description)
    console().print(table)


COMMANDS = [models_cmd, tasks_cmd]
