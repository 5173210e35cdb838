"""Tasks, one module each, registered by name (``celtk tasks`` lists them)."""

from celtk.tasks import arithmetic, boolq, hellaswag, humaneval, jsonl, mbpp  # noqa: F401  (registers the tasks)
from celtk.tasks._base import (
    Example,
    Pools,
    Task,
    build_context,
    continuation_delimiter,
    draw_shots,
    lone_surrogate,
)
from celtk.tasks._registry import get_task, register, task_classes, task_names
from celtk.tasks._sandbox import require_opt_in
from celtk.tasks._splits import FEWSHOT_POOL, SplitManifest, Splits, make_splits, shared_examples

__all__ = ["FEWSHOT_POOL", "Example", "Pools", "SplitManifest", "Splits", "Task", "build_context",
           "continuation_delimiter", "draw_shots", "get_task", "lone_surrogate", "make_splits", "register",
           "require_opt_in", "shared_examples", "task_classes", "task_names"]
