"""celtk — Capability Enhancement Localization toolkit.

Find a small set of attention heads whose removal improves a model on a task, prove the
gain on held-out data, and explain it (Nguyen, Bair & Kolter 2026).

The public names below, and the submodules (``celtk.probe``, ``celtk.run``, ``celtk.tasks``, …),
load on first use, so ``import celtk`` (and ``celtk --help``) does not import torch;
``dir(celtk)`` lists them all. Every public function checks its arguments' types and ranges before
any work (:mod:`celtk.validation`) and raises a :class:`CeltkError` subclass naming what was wrong.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from celtk._version import __version__

_EXPORTS = {
    "ablate": "celtk.ablation", "export_ablated": "celtk.ablation",
    "CeltkError": "celtk.errors",
    "EvalConfig": "celtk.evaluation", "EvalResult": "celtk.evaluation", "ExampleResult": "celtk.evaluation",
    "evaluate": "celtk.evaluation", "ablation_for": "celtk.evaluation",
    "Head": "celtk.heads", "HeadSet": "celtk.heads",
    "Model": "celtk.models", "load_model": "celtk.models",
    "RunConfig": "celtk.run", "merge_shards": "celtk.run", "open_run": "celtk.run", "resolve_config": "celtk.run",
    "run_all": "celtk.run", "run_altscreen": "celtk.run", "run_eval": "celtk.run", "run_screen": "celtk.run",
    "run_select": "celtk.run", "run_stability": "celtk.run", "run_test": "celtk.run",
    "CachedScreener": "celtk.screening.cached",
    "HeadScore": "celtk.search.scores", "rank": "celtk.search.scores", "ranking_key": "celtk.search.scores",
    "select": "celtk.search.selection",
    "compare_paired": "celtk.stats", "mcnemar_exact": "celtk.stats",
    "get_task": "celtk.tasks", "make_splits": "celtk.tasks", "task_names": "celtk.tasks",
}

_SUBMODULES = ("ablation", "ablation_kinds", "analysis", "circuits", "errors", "evaluation", "heads", "models", "planning",
               "probe", "registry", "report", "run", "runstore", "screening", "search", "stats", "tasks", "theory")

__all__ = sorted([*_EXPORTS, *_SUBMODULES, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        from celtk.validation import public

        value = globals()[name] = public(getattr(importlib.import_module(_EXPORTS[name]), name))
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"celtk.{name}")
    raise AttributeError(f"module 'celtk' has no attribute {name!r}")


def __dir__() -> list[str]:
    return list(__all__)


if TYPE_CHECKING:
    from celtk import (
        ablation,
        ablation_kinds,
        analysis,
        circuits,
        errors,
        evaluation,
        heads,
        models,
        planning,
        probe,
        registry,
        report,
        run,
        runstore,
        screening,
        search,
        stats,
        tasks,
        theory,
    )
    from celtk.ablation import ablate, export_ablated
    from celtk.errors import CeltkError
    from celtk.evaluation import evaluate
    from celtk.evaluation.results import EvalConfig, EvalResult, ExampleResult
    from celtk.evaluation.scoring import ablation_for
    from celtk.heads import Head, HeadSet
    from celtk.models import Model, load_model
    from celtk.run import (
        RunConfig,
        merge_shards,
        open_run,
        resolve_config,
        run_all,
        run_altscreen,
        run_eval,
        run_screen,
        run_select,
        run_stability,
        run_test,
    )
    from celtk.screening.cached import CachedScreener
    from celtk.search.scores import HeadScore, rank, ranking_key
    from celtk.search.selection import select
    from celtk.stats import compare_paired, mcnemar_exact
    from celtk.tasks import get_task, make_splits, task_names
