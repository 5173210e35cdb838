"""celtk — Capability Enhancement Localization toolkit.

Find a small set of attention heads whose removal improves a model on a task, prove the
gain on held-out data, and explain it (Nguyen, Bair & Kolter 2026).

The top level is the notebook surface, about twenty names (``dir(celtk)``): :class:`Run`, the handle
on one run directory (one loaded model, one method per CLI verb, each returning the stage's
document), the main documents, :class:`Head`/:class:`HeadSet`, loading a model and a task, ablating
and evaluating, and :class:`CeltkError`. Everything else stays in its package (every stage function in
:mod:`celtk.run`, statistics in :mod:`celtk.stats`, …), and any submodule is reachable as
``celtk.NAME``. Names load on first use, so ``import celtk`` (and ``celtk --help``) does not import
torch. Every public function checks its arguments' types (by beartype) and ranges before any work
(:mod:`celtk.boundary`) and raises a :class:`CeltkError` subclass naming what was wrong.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from celtk._version import __version__

_EXPORTS = {
    "Run": "celtk.run", "RunConfig": "celtk.run",
    "ScreenDocument": "celtk.run", "SelectionDocument": "celtk.run", "TestDocument": "celtk.run",
    "Head": "celtk.heads", "HeadSet": "celtk.heads",
    "Model": "celtk.models", "load_model": "celtk.models",
    "get_task": "celtk.tasks", "make_splits": "celtk.tasks",
    "ablate": "celtk.ablation", "export_ablated": "celtk.ablation",
    "evaluate": "celtk.evaluation", "compare_paired": "celtk.stats",
    "CeltkError": "celtk.errors",
}

_SUBMODULES = ("probe", "report", "run", "tasks")  # listed in dir(celtk); every other submodule loads as celtk.NAME too

__all__ = sorted([*_EXPORTS, *_SUBMODULES, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = globals()[name] = getattr(importlib.import_module(_EXPORTS[name]), name)
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"celtk.{name}") is not None:
        return importlib.import_module(f"celtk.{name}")
    from celtk import run

    home = f"; it is celtk.run.{name} (or a method of celtk.Run)" if name in run.__all__ else ""
    raise AttributeError(f"module 'celtk' has no attribute {name!r}{home}")


def __dir__() -> list[str]:
    return list(__all__)


if TYPE_CHECKING:  # re-exported (`X as X`), each from the module that defines it
    from celtk import probe as probe
    from celtk import report as report
    from celtk import run as run
    from celtk import tasks as tasks
    from celtk.ablation import ablate as ablate
    from celtk.ablation import export_ablated as export_ablated
    from celtk.errors import CeltkError as CeltkError
    from celtk.evaluation import evaluate as evaluate
    from celtk.heads import Head as Head
    from celtk.heads import HeadSet as HeadSet
    from celtk.models import Model as Model
    from celtk.models import load_model as load_model
    from celtk.run.config import RunConfig as RunConfig
    from celtk.run.handle import Run as Run
    from celtk.stats import compare_paired as compare_paired
    from celtk.store.documents import ScreenDocument as ScreenDocument
    from celtk.store.documents import SelectionDocument as SelectionDocument
    from celtk.store.documents import TestDocument as TestDocument
    from celtk.tasks import get_task as get_task
    from celtk.tasks import make_splits as make_splits
