"""Paired statistics for intact vs ablated outcomes on the same examples (numpy/scipy only)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binom


@dataclass(frozen=True)
class PairedComparison:
    n: int
    intact_accuracy: float
    ablated_accuracy: float
    gain: float  # fraction
    relative_error_reduction: float
    fixes: int  # intact wrong -> ablated right
    damage: int  # intact right -> ablated wrong
    mcnemar_p: float
    gain_ci: tuple[float, float]
    ci_level: float


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for discordant counts ``b`` and ``c``."""
    n = b + c
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom.cdf(min(b, c), n, 0.5)))


def relative_error_reduction(intact_accuracy: float, gain: float) -> float:
    """gain / (1 − intact accuracy), the paper's Table 1 column (nan when intact is perfect)."""
    return gain / (1.0 - intact_accuracy) if intact_accuracy < 1.0 else float("nan")


def paired_bootstrap_ci(intact: np.ndarray, ablated: np.ndarray, *, n_boot: int = 10_000, level: float = 0.95,
                        seed: int = 0) -> tuple[float, float]:
    """Percentile CI of the accuracy gain, resampling examples (pairs) with replacement."""
    diff = ablated.astype(np.int8) - intact.astype(np.int8)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diff), size=(n_boot, len(diff)))
    gains = diff[idx].mean(axis=1)
    lo, hi = np.quantile(gains, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def compare_paired(intact: np.ndarray, ablated: np.ndarray, *, n_boot: int = 10_000, level: float = 0.95,
                   seed: int = 0) -> PairedComparison:
    """Both accuracies, gain, relative error reduction, exact McNemar and a bootstrap CI."""
    intact, ablated = np.asarray(intact, dtype=bool), np.asarray(ablated, dtype=bool)
    if intact.shape != ablated.shape or intact.ndim != 1 or len(intact) == 0:
        raise ValueError(f"need two equal-length non-empty outcome vectors, got {intact.shape} and {ablated.shape}")
    fixes, damage = int((~intact & ablated).sum()), int((intact & ~ablated).sum())
    a0, a1 = float(intact.mean()), float(ablated.mean())
    return PairedComparison(len(intact), a0, a1, a1 - a0, relative_error_reduction(a0, a1 - a0), fixes, damage,
                            mcnemar_exact(fixes, damage), paired_bootstrap_ci(intact, ablated, n_boot=n_boot, level=level, seed=seed),
                            level)


def discordance_noise(fixes: int, damage: int, z: float = 1.96) -> float:
    """z × the standard error of a paired count difference (fixes − damage): ~sqrt(fixes + damage)."""
    return z * float(np.sqrt(max(fixes + damage, 1)))
