"""The paper's Section 4 theory, checked numerically (numpy/scipy only; no models)."""

from celtk.theory._experiments import AlphaSweep, SettingReport, alpha_sweep, max_stable_lr, run_setting, wilson
from celtk.theory._model import Setting, coefficients, grad_joint, joint, literal_risks, risks
from celtk.theory._report import TheoryConfig, run_theory
from celtk.theory._train import delete_head, event_e, init, train, winners

__all__ = [
    "AlphaSweep", "Setting", "SettingReport", "TheoryConfig", "alpha_sweep", "coefficients", "delete_head", "event_e",
    "grad_joint", "init", "joint", "literal_risks", "max_stable_lr", "risks", "run_setting", "run_theory", "train",
    "wilson", "winners",
]
