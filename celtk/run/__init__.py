"""The CEL stages on a run directory, one module per concept:

* :mod:`~celtk.run.config` — :class:`RunConfig`, :func:`resolve_config` (defaults < file < overrides)
* :mod:`~celtk.run.session` — :func:`open_run` (reopen a screened run), :class:`Session`
* :mod:`~celtk.run.memo` — :class:`SetMemo`, the resumable store of head-set outcomes
* :mod:`~celtk.run.documents` — typed result documents (``screen.json``, ``selection.json``, …)
* stages: :mod:`~celtk.run.screen` (+ merge; :mod:`~celtk.run.racescreen`, the racing screen),
  :mod:`~celtk.run.select`, :mod:`~celtk.run.test`,
  :mod:`~celtk.run.ablations` (does the tested selection survive other ablation kinds?),
  :mod:`~celtk.run.transfer`, :mod:`~celtk.run.calibrate`, :mod:`~celtk.run.altscreen`,
  :mod:`~celtk.run.stability`, :mod:`~celtk.run.eval`, :func:`~celtk.analysis.run_attributes` and
  :func:`~celtk.analysis.run_compare`, and :mod:`~celtk.run.full` (screen → select → test)
* :mod:`~celtk.run.handle` — :class:`Run`, one handle on a run directory for notebooks: one loaded
  model, one method per CLI verb, each returning the stage's document

Each stage reads what the previous one wrote, writes its own files atomically, and can be
rerun: finished work is kept, and a changed model, task, data or setting is refused.
Names load on first use, so importing :mod:`celtk.run` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "RunConfig": "config", "load_config_file": "config", "resolve_config": "config",
    "Session": "session", "ScreenedRun": "session", "open_run": "session", "session_for": "session",
    "load_screen": "session",
    "SetMemo": "memo",
    "AltscreenDocument": "documents", "DiagnosticsDocument": "documents", "ScreenDocument": "documents",
    "SelectionDocument": "documents", "StabilityDocument": "documents", "TestDocument": "documents",
    "merge_shards": "screen", "parse_shard": "config", "run_screen": "screen", "stored_screen": "screen",
    "run_select": "select", "stored_selection": "select", "run_test": "test", "stored_test": "test",
    "run_altscreen": "altscreen", "run_stability": "stability",
    "run_eval": "eval", "EvalDocument": "documents", "RunResult": "full", "run_all": "full",
    "run_ablation_kinds": "ablations", "AblationKindsDocument": "documents",
    "run_transfer": "transfer", "variant_grid": "transfer", "Variant": "transfer", "TransferDocument": "documents",
    "run_calibration": "calibrate", "CalibrationDocument": "documents",
    "run_attributes": "celtk.analysis", "run_compare": "celtk.analysis",
    "Run": "handle",
    "run_replicate": "replicate", "ReplicateDocument": "replicate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = _EXPORTS[name] if "." in _EXPORTS[name] else f"celtk.run.{_EXPORTS[name]}"
        value = globals()[name] = getattr(importlib.import_module(module), name)
        return value
    raise AttributeError(f"module 'celtk.run' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    from celtk.analysis import run_attributes, run_compare
    from celtk.run.ablations import run_ablation_kinds
    from celtk.run.altscreen import run_altscreen
    from celtk.run.calibrate import run_calibration
    from celtk.run.config import RunConfig, load_config_file, parse_shard, resolve_config
    from celtk.run.documents import (
        AblationKindsDocument,
        AltscreenDocument,
        CalibrationDocument,
        DiagnosticsDocument,
        EvalDocument,
        ScreenDocument,
        SelectionDocument,
        StabilityDocument,
        TestDocument,
        TransferDocument,
    )
    from celtk.run.eval import run_eval
    from celtk.run.full import RunResult, run_all
    from celtk.run.handle import Run
    from celtk.run.memo import SetMemo
    from celtk.run.replicate import ReplicateDocument, run_replicate
    from celtk.run.screen import merge_shards, run_screen, stored_screen
    from celtk.run.select import run_select, stored_selection
    from celtk.run.session import ScreenedRun, Session, load_screen, open_run, session_for
    from celtk.run.stability import run_stability
    from celtk.run.test import run_test, stored_test
    from celtk.run.transfer import Variant, run_transfer, variant_grid
