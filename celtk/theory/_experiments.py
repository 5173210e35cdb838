"""The numerical experiments on Theorems 4.2 and 4.3: one setting trained on many seeds, the α sweep,
the largest stable step. Each returns a record (:class:`celtk.store.documents.Record`) whose fields are
its keys in ``theory.json``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from jaxtyping import Bool, Float, Int

from celtk.store.documents import Record, optional, record
from celtk.theory._checks import PrE, symmetry
from celtk.theory._model import Setting, coefficients
from celtk.theory._train import Deletion, TrainResult, delete_head, event_e, init, train, winners


@dataclass(frozen=True, kw_only=True)
class DeletionSummary(Record):
    """Deleting U's winner on E at convergence: mean risks before and after, against the predictions."""

    n: int  # seeds on E
    t2: float
    delta_a_predicted: float
    delta_b_predicted: float
    delta_joint_predicted: float
    undefined: str | None = optional()  # why the means are absent (no seed on E)
    before_a_mean: float | None = optional()
    before_b_mean: float | None = optional()
    after_a_mean: float | None = optional()
    after_b_mean: float | None = optional()
    delta_a_mean: float | None = optional()
    delta_b_mean: float | None = optional()
    delta_joint_mean: float | None = optional()
    delta_a_max_abs_residual: float | None = optional()
    delta_b_max_abs_residual: float | None = optional()


@dataclass(frozen=True, kw_only=True)
class SettingReport(Record):
    setting: Setting = record(Setting)
    alpha: float
    lr: float
    n_seeds: int
    converged_fraction: float
    diverged_fraction: float
    median_steps: float
    w_max_error: float | None  # over converged seeds, max |w - w*| (None: none converged)
    winner_counts: list[list[int]]  # per feature, per head
    uniform_p: list[float] | None  # chi-square goodness of fit, per feature (None: too few seeds)
    independence_p: dict[str, float] | None  # chi-square contingency, per feature pair
    pr_e: PrE = record(PrE)  # n_seeds: the converged seeds
    deletion: DeletionSummary = record(DeletionSummary)  # on E: mean changes and predictions
    no_clear_winner_fraction: float


def _deletion_summary(d: Deletion, t2: float) -> DeletionSummary:
    n = len(d.delta_a)
    predicted = DeletionSummary(n=n, t2=t2, delta_a_predicted=-t2, delta_b_predicted=3 * t2,
                                delta_joint_predicted=t2 / 2)
    if n == 0:  # no seed on E: every mean is undefined
        return replace(predicted, undefined="no seed on event E")
    return replace(predicted, before_a_mean=float(d.before_a.mean()), before_b_mean=float(d.before_b.mean()),
                   after_a_mean=float(d.after_a.mean()), after_b_mean=float(d.after_b.mean()),
                   delta_a_mean=float(d.delta_a.mean()), delta_b_mean=float(d.delta_b.mean()),
                   delta_joint_mean=float(d.delta_joint.mean()),
                   delta_a_max_abs_residual=float(np.abs(d.delta_a + t2).max()),
                   delta_b_max_abs_residual=float(np.abs(d.delta_b - 3 * t2).max()))


def run_setting(setting: Setting, n_seeds: int, alpha: float, lr: float, seed: int = 0,
                max_steps: int = 200_000, checkpoints: tuple[int, ...] = ()
                ) -> tuple[SettingReport, tuple[TrainResult, Float[np.ndarray, "seed head_index feature"],
                                                Int[np.ndarray, "seed feature"], Bool[np.ndarray, " seed"], Deletion]]:
    """Train ``n_seeds`` seeds; winners, Pr(E) and deletion on E at convergence.

    Returns the report and (train result, the converged seeds' coefficients, their winners, E, Deletion).
    """
    result = train(init(n_seeds, setting, alpha, seed), setting, lr, max_steps=max_steps, checkpoints=checkpoints)
    ok = result.converged
    c = result.c[ok]
    win, share = winners(c)
    sym = symmetry(c, setting)
    e = event_e(win)
    d = delete_head(c[e], win[e, 0], setting)
    report = SettingReport(
        setting=setting, alpha=alpha, lr=lr, n_seeds=n_seeds,
        converged_fraction=float(ok.mean()), diverged_fraction=float(result.diverged.mean()),
        median_steps=float(np.median(result.steps)),
        w_max_error=float(np.abs(c.sum(axis=-2) - setting.optimum).max()) if ok.any() else None,
        winner_counts=sym.winner_counts, uniform_p=sym.uniform_p, independence_p=sym.independence_p,
        pr_e=replace(sym.pr_e, n_seeds=int(len(e))),
        deletion=_deletion_summary(d, setting.t ** 2),
        no_clear_winner_fraction=float((share < 0.95).mean()) if ok.any() else 0.0,
    )
    return report, (result, c, win, e, d)


@dataclass(frozen=True)
class AlphaSweep(Record):
    alphas: list[float]
    lr: float
    n_seeds: int
    loser_median: list[float]  # median |c| of non-winning head-feature pairs, per alpha
    slope: float  # log-log slope of loser_median against α (4 = O(α⁴))
    slope_ci: list[float]
    residual_a: list[float | None]  # mean |ΔR_A + t²| on E, per alpha (None: no seed on E)
    residual_b: list[float | None]  # mean |ΔR_B − 3t²| on E
    no_clear_winner: list[float]
    converged: list[float]
    init_slope: float  # the same slope for the losers' initial |c|: 4 by construction (θ₀ = α·Z, c ≈ α⁴·oqvk)
    growth_median: list[float]  # median over seeds of the seed's median loser |c_final| / |c_initial|, per alpha
    growth_quartiles: list[list[float]]  # 25 %, 75 %, 90 % of that ratio over every loser pair, per alpha
    growth_slope: float  # log-log slope of growth_median against α: 0 = an α-independent factor
    growth_slope_ci: list[float]
    # per alpha, each seed's median loser |c|: kept in memory, not written to theory.json
    loser_samples: list[list[float]] = field(repr=False, compare=False, default_factory=list,
                                             metadata={"stored": False})


@dataclass(frozen=True, kw_only=True)
class StepSize(Record):
    """The fraction of seeds converging at each step size, and the largest with at least ``threshold``."""

    alpha: float
    fractions: dict[str, float]  # str(step size) -> fraction converged
    largest_converging_lr: float | None
    threshold: float
    n_seeds: int


def _loser_mask(c: Float[np.ndarray, "seed head_index feature"], win: Int[np.ndarray, "seed feature"]
                ) -> Bool[np.ndarray, "seed head_index feature"]:
    mask = np.ones(c.shape, dtype=bool)
    s_idx, f_idx = np.meshgrid(np.arange(len(c)), np.arange(3), indexing="ij")
    mask[s_idx, win, f_idx] = False
    return mask


def _per_seed_median(values: Float[np.ndarray, "seed head_index feature"],
                     mask: Bool[np.ndarray, "seed head_index feature"]) -> Float[np.ndarray, " seed"]:
    return np.nanmedian(np.where(mask, values, np.nan), axis=(1, 2))


def _slope_with_ci(x: Float[np.ndarray, " alpha"], per_seed: list[Float[np.ndarray, " _seed"]],
                   rng: np.random.Generator, n_boot: int) -> tuple[float, list[float]]:
    """Least-squares slope of log(median per α) on x, and a percentile CI resampling seeds (each α's
    seeds are its converged ones, so their number differs between α)."""
    slope = float(np.polyfit(x, np.log([np.median(s) for s in per_seed]), 1)[0])
    boots = [np.polyfit(x, np.log([np.median(rng.choice(s, len(s))) for s in per_seed]), 1)[0] for _ in range(n_boot)]
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return slope, [float(lo), float(hi)]


def alpha_sweep(setting: Setting, alphas: list[float], lr: float, n_seeds: int, seed: int = 0,
                n_boot: int = 1000) -> AlphaSweep:
    """Train at each α from θ₀ = α·Z (the same Z), and follow the losing head–feature pairs.

    The final losers' slope against α is 4 partly by construction (they start ∝ α⁴), so the sweep
    also reports each loser's growth |c_final| / |c_initial|: "stays at initial scale" predicts a
    ratio near 1, "grows by an α-independent factor" a ratio that does not change with α.
    """
    per_seed, initial, growth, quartiles, res_a, res_b, unclear, conv = [], [], [], [], [], [], [], []
    t2 = setting.t ** 2
    for alpha in alphas:
        theta0 = init(n_seeds, setting, alpha, seed)
        r = train(theta0, setting, lr)
        c, c0 = r.c[r.converged], coefficients(theta0)[r.converged]
        win, share = winners(c)
        mask = _loser_mask(c, win)
        per_seed.append(_per_seed_median(np.abs(c), mask))
        initial.append(_per_seed_median(np.abs(c0), mask))
        ratio = np.abs(c) / np.abs(c0)
        growth.append(_per_seed_median(ratio, mask))
        quartiles.append([float(q) for q in np.quantile(ratio[mask], [0.25, 0.75, 0.9])])
        e = event_e(win)
        d = delete_head(c[e], win[e, 0], setting)
        res_a.append(float(np.abs(d.delta_a + t2).mean()) if e.any() else None)
        res_b.append(float(np.abs(d.delta_b - 3 * t2).mean()) if e.any() else None)
        unclear.append(float((share < 0.95).mean()))
        conv.append(float(r.converged.mean()))
    x = np.log(alphas)
    rng = np.random.default_rng(seed)
    slope, slope_ci = _slope_with_ci(x, per_seed, rng, n_boot)
    growth_slope, growth_ci = _slope_with_ci(x, growth, rng, n_boot)
    init_slope = float(np.polyfit(x, np.log([np.median(s) for s in initial]), 1)[0])
    return AlphaSweep(list(alphas), lr, n_seeds, [float(np.median(s)) for s in per_seed], slope, slope_ci, res_a, res_b,
                      unclear, conv, init_slope, [float(np.median(g)) for g in growth], quartiles, growth_slope,
                      growth_ci, [list(map(float, s)) for s in per_seed])


def max_stable_lr(setting: Setting, alpha: float, lrs: list[float], n_seeds: int = 200, seed: int = 0,
                  max_steps: int = 40_000, threshold: float = 0.99) -> StepSize:
    """Fraction of seeds converging at each step size; the largest with ≥ ``threshold``."""
    fractions = {}
    for lr in lrs:
        r = train(init(n_seeds, setting, alpha, seed), setting, lr, max_steps=max_steps)
        fractions[lr] = float(r.converged.mean())
    stable = [lr for lr, f in fractions.items() if f >= threshold]
    return StepSize(alpha=alpha, fractions={str(k): v for k, v in fractions.items()},
                    largest_converging_lr=max(stable) if stable else None, threshold=threshold, n_seeds=n_seeds)
