"""The task registry: ``get_task("arithmetic:2da")``, ``get_task("jsonl:PATH")``."""

from __future__ import annotations

from pathlib import Path

from celtk.boundary import public
from celtk.errors import TaskError, suggest
from celtk.tasks._base import Task

_REGISTRY: dict[str, type[Task]] = {}


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: make a task available by its ``name``."""
    _REGISTRY[cls.name] = cls
    return cls


def task_names() -> list[str]:
    return sorted(_REGISTRY)


def task_classes() -> dict[str, type[Task]]:
    return dict(_REGISTRY)


@public
def get_task(spec: str, data_path: str | Path | None = None) -> Task:
    """Look a task up by ``name`` or ``name:option`` (``arithmetic:2da``, ``jsonl:/path/file.jsonl``).

    ``data_path`` points a hub task at a local copy of its data (a file or directory).
    """
    name, _, option = spec.partition(":")
    if name not in _REGISTRY:
        raise TaskError(f"Unknown task {spec!r}.{suggest(name, _REGISTRY)}")
    return _REGISTRY[name](option or None, data_path=data_path)
