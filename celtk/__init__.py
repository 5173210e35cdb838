"""celtk — Capability Enhancement Localization toolkit.

Find a small set of attention heads whose removal improves a model on a task, prove the
gain on held-out data, and explain it (Nguyen, Bair & Kolter 2026).

The public names below load on first use, so ``import celtk`` (and ``celtk --help``)
does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "ablate": "celtk.ablation", "export_ablated": "celtk.ablation",
    "CeltkError": "celtk.errors",
    "EvalConfig": "celtk.evaluator", "EvalResult": "celtk.evaluator", "ExampleResult": "celtk.evaluator", "evaluate": "celtk.evaluator",
    "Head": "celtk.heads", "HeadSet": "celtk.heads",
    "Model": "celtk.models", "load_model": "celtk.models",
    "RunConfig": "celtk.pipeline", "merge_shards": "celtk.pipeline", "run_screen": "celtk.pipeline",
    "run_select": "celtk.pipeline", "run_test": "celtk.pipeline",
    "CachedScreener": "celtk.screen", "HeadScore": "celtk.screen",
    "rank": "celtk.selection", "ranking_key": "celtk.selection", "select": "celtk.selection",
    "compare_paired": "celtk.stats", "mcnemar_exact": "celtk.stats",
    "get_task": "celtk.tasks", "make_splits": "celtk.tasks", "task_names": "celtk.tasks",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'celtk' has no attribute {name!r}")


if TYPE_CHECKING:
    from celtk.ablation import ablate, export_ablated
    from celtk.errors import CeltkError
    from celtk.evaluator import EvalConfig, EvalResult, ExampleResult, evaluate
    from celtk.heads import Head, HeadSet
    from celtk.models import Model, load_model
    from celtk.pipeline import RunConfig, merge_shards, run_screen, run_select, run_test
    from celtk.screen import CachedScreener, HeadScore
    from celtk.selection import rank, ranking_key, select
    from celtk.stats import compare_paired, mcnemar_exact
    from celtk.tasks import get_task, make_splits, task_names
