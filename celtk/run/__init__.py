"""The CEL stages on a run directory, one module per concept:

* :mod:`~celtk.run.config` — :class:`RunConfig`, :func:`resolve_config` (defaults < file < overrides)
* :mod:`~celtk.run.session` — :func:`open_run` (reopen a screened run), :class:`Session`
* stages: :mod:`~celtk.run.screen` (+ merge; :mod:`~celtk.run.racescreen`, the racing screen),
  :mod:`~celtk.run.select`, :mod:`~celtk.run.test`,
  :mod:`~celtk.run.ablations` (does the tested selection survive other ablation kinds?),
  :mod:`~celtk.run.transfer`, :mod:`~celtk.run.calibrate`, :mod:`~celtk.run.altscreen`,
  :mod:`~celtk.run.stability`, :mod:`~celtk.run.eval`, :mod:`~celtk.run.analyses` (``run_attributes``,
  ``run_compare``), and :mod:`~celtk.run.full` (screen → select → test)
* :mod:`~celtk.run.handle` — :class:`Run`, one handle on a run directory for notebooks: one loaded
  model, one method per CLI verb, each returning the stage's document

The run store (:mod:`celtk.store`: documents, the run directory, the held-out log, the memo) sits below the
stages; ``SetMemo`` and the documents are re-exported here. Each stage reads what the previous one wrote, writes
its own files atomically, and can be rerun: finished work is kept, and a changed model, task, data or setting is
refused.
Names load on first use, so importing :mod:`celtk.run` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "RunConfig": "config", "load_config_file": "config", "resolve_config": "config",
    "Session": "session", "ScreenedRun": "session", "open_run": "session", "session_for": "session",
    "load_screen": "session",
    "merge_shards": "screen", "parse_shard": "config", "run_screen": "screen", "stored_screen": "screen",
    "run_select": "select", "stored_selection": "select", "run_test": "test", "stored_test": "test",
    "run_altscreen": "altscreen", "run_stability": "stability",
    "run_eval": "eval", "RunResult": "full", "run_all": "full",
    "run_ablation_kinds": "ablations",
    "run_transfer": "transfer", "variant_grid": "transfer", "Variant": "transfer",
    "run_calibration": "calibrate",
    "run_attributes": "analyses", "run_compare": "analyses",
    "Run": "handle",
    "run_replicate": "replicate", "ReplicateDocument": "replicate",
}
_EXPORTS |= {name: "celtk.store.documents" for name in (
    "AblationKindsDocument", "AltscreenDocument", "CalibrationDocument", "DiagnosticsDocument", "EvalDocument",
    "ScreenDocument", "SelectionDocument", "StabilityDocument", "TestDocument", "TransferDocument")}
_EXPORTS["SetMemo"] = "celtk.store.memo"

__all__ = sorted(_EXPORTS)


# modules that moved to the run store (celtk.store), below the stages: an old import says where each went
MOVED = {name: f"celtk.store.{name}" for name in ("documents", "directory", "heldout", "ledger", "integrity", "memo",
                                                   "rules")}


def __getattr__(name: str) -> Any:
    if name in MOVED:  # an ImportError, not an AttributeError: `from celtk.run import documents` shows this message
        raise ImportError(f"celtk.run.{name} moved to {MOVED[name]} (the run store, below the stages); import it from "
                          "there.")
    if name in _EXPORTS:
        module = _EXPORTS[name] if "." in _EXPORTS[name] else f"celtk.run.{_EXPORTS[name]}"
        value = globals()[name] = getattr(importlib.import_module(module), name)
        return value
    raise AttributeError(f"module 'celtk.run' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # re-exported (`X as X`): what __all__ lists, as mypy reads it
    from celtk.run.ablations import run_ablation_kinds as run_ablation_kinds
    from celtk.run.altscreen import run_altscreen as run_altscreen
    from celtk.run.analyses import run_attributes as run_attributes
    from celtk.run.analyses import run_compare as run_compare
    from celtk.run.calibrate import run_calibration as run_calibration
    from celtk.run.config import RunConfig as RunConfig
    from celtk.run.config import load_config_file as load_config_file
    from celtk.run.config import parse_shard as parse_shard
    from celtk.run.config import resolve_config as resolve_config
    from celtk.run.eval import run_eval as run_eval
    from celtk.run.full import RunResult as RunResult
    from celtk.run.full import run_all as run_all
    from celtk.run.handle import Run as Run
    from celtk.run.replicate import ReplicateDocument as ReplicateDocument
    from celtk.run.replicate import run_replicate as run_replicate
    from celtk.run.screen import merge_shards as merge_shards
    from celtk.run.screen import run_screen as run_screen
    from celtk.run.screen import stored_screen as stored_screen
    from celtk.run.select import run_select as run_select
    from celtk.run.select import stored_selection as stored_selection
    from celtk.run.session import ScreenedRun as ScreenedRun
    from celtk.run.session import Session as Session
    from celtk.run.session import load_screen as load_screen
    from celtk.run.session import open_run as open_run
    from celtk.run.session import session_for as session_for
    from celtk.run.stability import run_stability as run_stability
    from celtk.run.test import run_test as run_test
    from celtk.run.test import stored_test as stored_test
    from celtk.run.transfer import Variant as Variant
    from celtk.run.transfer import run_transfer as run_transfer
    from celtk.run.transfer import variant_grid as variant_grid
    from celtk.store.documents import AblationKindsDocument as AblationKindsDocument
    from celtk.store.documents import AltscreenDocument as AltscreenDocument
    from celtk.store.documents import CalibrationDocument as CalibrationDocument
    from celtk.store.documents import DiagnosticsDocument as DiagnosticsDocument
    from celtk.store.documents import EvalDocument as EvalDocument
    from celtk.store.documents import ScreenDocument as ScreenDocument
    from celtk.store.documents import SelectionDocument as SelectionDocument
    from celtk.store.documents import StabilityDocument as StabilityDocument
    from celtk.store.documents import TestDocument as TestDocument
    from celtk.store.documents import TransferDocument as TransferDocument
    from celtk.store.memo import SetMemo as SetMemo
