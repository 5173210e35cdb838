"""The paper's Section 4 theory, checked numerically (numpy/scipy only; no models)."""

from celtk.theory._checks import (
    all_checks,
    deletion,
    deletion_trajectory,
    localisation,
    null_controls,
    shared_coefficients,
    symmetry,
    wilson,
)
from celtk.theory._experiments import AlphaSweep, SettingReport, alpha_sweep, max_stable_lr, run_setting
from celtk.theory._model import Setting, coefficients, grad_joint, joint, literal_risks, risks
from celtk.theory._report import TheoryConfig, run_theory, verdicts
from celtk.theory._train import delete_head, event_e, init, train, winners

__all__ = [
    "AlphaSweep", "Setting", "SettingReport", "TheoryConfig", "all_checks", "alpha_sweep", "coefficients",
    "delete_head", "deletion", "deletion_trajectory", "event_e", "grad_joint", "init", "joint", "literal_risks",
    "localisation", "max_stable_lr", "null_controls", "risks", "run_setting", "run_theory", "shared_coefficients",
    "symmetry", "train", "verdicts", "wilson", "winners",
]
