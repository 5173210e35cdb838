"""The paper's Section 4 theory, checked numerically (numpy/scipy; no models). Results are records
(:class:`celtk.store.documents.Record`); :func:`run_theory` returns the whole ``theory.json`` as a
:class:`TheoryDocument`. ``literal_risks`` (the literal attention form, torch) loads on first use, so
importing this package does not import torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celtk.theory._checks import (
    CheckSet,
    CheckVerdicts,
    DeletionCheck,
    Localisation,
    NullControls,
    PrE,
    SymmetryCheck,
    Trajectory,
    TrajectoryRow,
    Verdicts,
    all_checks,
    deletion,
    deletion_trajectory,
    localisation,
    null_controls,
    shared_coefficients,
    symmetry,
    verdicts,
    wilson,
)
from celtk.theory._experiments import (
    AlphaSweep,
    DeletionSummary,
    SettingReport,
    StepSize,
    alpha_sweep,
    max_stable_lr,
    run_setting,
)
from celtk.theory._model import Setting, coefficients, grad_joint, joint, risks
from celtk.theory._report import LoserGrowth, LoserSlope, SettingEntry, TheoryConfig, TheoryDocument, run_theory
from celtk.theory._train import Deletion, TrainResult, delete_head, event_e, init, train, winners

if TYPE_CHECKING:
    from celtk.theory._literal import literal_risks

__all__ = [
    "AlphaSweep", "CheckSet", "CheckVerdicts", "Deletion", "DeletionCheck", "DeletionSummary", "Localisation",
    "LoserGrowth", "LoserSlope", "NullControls", "PrE", "Setting", "SettingEntry", "SettingReport", "StepSize",
    "SymmetryCheck", "TheoryConfig", "TheoryDocument", "TrainResult", "Trajectory", "TrajectoryRow", "Verdicts",
    "all_checks", "alpha_sweep", "coefficients", "delete_head", "deletion", "deletion_trajectory", "event_e",
    "grad_joint", "init", "joint", "literal_risks", "localisation", "max_stable_lr", "null_controls", "risks",
    "run_setting", "run_theory", "shared_coefficients", "symmetry", "train", "verdicts", "wilson", "winners",
]


def __getattr__(name: str) -> Any:
    if name == "literal_risks":  # torch: loaded on first use
        from celtk.theory._literal import literal_risks

        return literal_risks
    raise AttributeError(f"module 'celtk.theory' has no attribute {name!r}")
