"""Paired statistics for intact vs ablated outcomes on the same examples (numpy/scipy only).

Nothing here returns NaN: a statistic that is undefined for the data (no examples; no errors
to reduce) is ``None``, and :attr:`PairedComparison.undefined` says why, so a caller can record it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from jaxtyping import Bool, Float
from scipy.stats import binom

from celtk.boundary import public
from celtk.errors import ConfigError, SplitError

BOOTSTRAP_CHUNK_ELEMENTS = 1 << 22  # resampled indices held at once (32 MiB of int64)
T = TypeVar("T")


@dataclass(frozen=True)
class PairedComparison:
    """Intact vs ablated on the same ``n`` examples; ``None`` marks an undefined statistic."""

    n: int
    intact_accuracy: float | None  # None when n == 0
    ablated_accuracy: float | None  # None when n == 0
    gain: float | None  # fraction; None when n == 0
    relative_error_reduction: float | None  # None when n == 0 or intact accuracy is 100 %
    fixes: int  # intact wrong -> ablated right
    damage: int  # intact right -> ablated wrong
    mcnemar_p: float | None  # None when n == 0
    gain_ci: tuple[float, float] | None  # None when n == 0
    ci_level: float
    undefined: dict[str, str] = field(default_factory=dict)  # statistic name -> why it is None


def defined(value: T | None, name: str) -> T:
    """``value``, which a caller needs defined; a :class:`SplitError` if it is ``None`` (no examples compared)."""
    if value is None:
        raise SplitError(f"The {name} is undefined on an empty comparison; compare at least one example.")
    return value


@public
def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for discordant counts ``b`` and ``c``."""
    n = b + c
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom.cdf(min(b, c), n, 0.5)))


def relative_error_reduction(intact_accuracy: float, gain: float) -> float | None:
    """gain / (1 − intact accuracy), the paper's Table 1 column; ``None`` when intact is perfect (no errors)."""
    return gain / (1.0 - intact_accuracy) if intact_accuracy < 1.0 else None


def holm(pvalues: object) -> Float[np.ndarray, " m"]:  # any array-like: checked below
    """Holm–Bonferroni step-down adjusted p-values, in the input's order.

    With p sorted ascending, adjusted p_(i) = max_{j ≤ i} min(1, (m − j + 1) · p_(j)):
    monotone in the sorted order, capped at 1, ties adjusted alike.

    Args:
        pvalues: 1-D sequence of m p-values in [0, 1].

    Returns:
        the adjusted p-values, one per input.
    """
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1 or not np.all((p >= 0) & (p <= 1)):  # NaN fails the range test too
        raise ConfigError(f"holm needs a 1-D sequence of p-values in [0, 1], got {pvalues!r}.")
    m = len(p)
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled) if m else scaled
    return adjusted


def bootstrap_chunks(n_boot: int, n: int, max_elements: int = BOOTSTRAP_CHUNK_ELEMENTS) -> Iterator[int]:
    """Rows per chunk of the n_boot × n resample matrix, each chunk ≤ max(max_elements, n) indices."""
    rows = max(1, max_elements // max(n, 1))
    for start in range(0, n_boot, rows):
        yield min(rows, n_boot - start)


def bootstrap_gains(intact: Bool[np.ndarray, " n"], ablated: Bool[np.ndarray, " n"], *, n_boot: int = 10_000,
                    seed: int = 0, max_elements: int = BOOTSTRAP_CHUNK_ELEMENTS) -> Float[np.ndarray, " n_boot"]:
    """Mean paired gain of each of ``n_boot`` resamples of the examples, drawn in row chunks.

    Each chunk draws its rows' indices from one generator in row order, so the result equals
    drawing the whole n_boot × n matrix in one call with the same seed (tested), in bounded memory.

    ``n`` ≥ 1.
    """
    diff = np.asarray(ablated, dtype=np.int8) - np.asarray(intact, dtype=np.int8)
    rng = np.random.default_rng(seed)
    gains = np.empty(n_boot)
    start = 0
    for rows in bootstrap_chunks(n_boot, len(diff), max_elements):
        idx = rng.integers(0, len(diff), size=(rows, len(diff)))
        gains[start:start + rows] = diff[idx].mean(axis=1)
        start += rows
    return gains


def paired_bootstrap_ci(intact: Bool[np.ndarray, " n"], ablated: Bool[np.ndarray, " n"], *, n_boot: int = 10_000,
                        level: float = 0.95, seed: int = 0, max_elements: int = BOOTSTRAP_CHUNK_ELEMENTS
                        ) -> tuple[float, float] | None:
    """Percentile CI of the accuracy gain, resampling examples (pairs) with replacement; ``None`` when n == 0."""
    if len(intact) == 0:
        return None
    gains = bootstrap_gains(intact, ablated, n_boot=n_boot, seed=seed, max_elements=max_elements)
    lo, hi = np.quantile(gains, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


@public
def compare_paired(intact: Bool[np.ndarray, " _n"], ablated: Bool[np.ndarray, " _n"], *, n_boot: int = 10_000,
                   level: float = 0.95, seed: int = 0) -> PairedComparison:
    """Both accuracies, gain, relative error reduction, exact McNemar and a bootstrap CI.

    Args:
        intact, ablated: per-example correctness on the same examples (n may be 0); unequal lengths are this
            function's own ConfigError, so the shared length is named ``_n`` (not checked by jaxtyping).
    """
    intact, ablated = np.asarray(intact, dtype=bool), np.asarray(ablated, dtype=bool)
    if intact.shape != ablated.shape or intact.ndim != 1:
        raise ConfigError(f"need two equal-length 1-D outcome vectors, got shapes {intact.shape} and {ablated.shape}")
    if len(intact) == 0:
        why = "no examples (n = 0)"
        return PairedComparison(0, None, None, None, None, 0, 0, None, None, level,
                                {name: why for name in ("intact_accuracy", "ablated_accuracy", "gain",
                                                        "relative_error_reduction", "mcnemar_p", "gain_ci")})
    fixes, damage = int((~intact & ablated).sum()), int((intact & ~ablated).sum())
    a0, a1 = float(intact.mean()), float(ablated.mean())
    rer = relative_error_reduction(a0, a1 - a0)
    undefined = {} if rer is not None else {"relative_error_reduction": "intact accuracy is 100 %: no errors to reduce"}
    return PairedComparison(len(intact), a0, a1, a1 - a0, rer, fixes, damage, mcnemar_exact(fixes, damage),
                            paired_bootstrap_ci(intact, ablated, n_boot=n_boot, level=level, seed=seed), level,
                            undefined)


def discordance_noise(fixes: int, damage: int, z: float = 1.96) -> float:
    """z × the standard error of a paired count difference (fixes − damage): ~sqrt(fixes + damage)."""
    return z * float(np.sqrt(max(fixes + damage, 1)))
