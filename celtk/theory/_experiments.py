"""The numerical checks of Theorems 4.2 and 4.3; each returns plain data."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats

from celtk.theory._model import Setting
from celtk.theory._train import delete_head, event_e, init, train, winners


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(centre - half), float(centre + half)


@dataclass(frozen=True)
class SettingReport:
    setting: dict
    alpha: float
    lr: float
    n_seeds: int
    converged_fraction: float
    diverged_fraction: float
    median_steps: float
    w_max_error: float  # over converged seeds, max |w - w*|
    winner_counts: list[list[int]]  # per feature, per head
    uniform_p: list[float]  # chi-square goodness of fit, per feature
    independence_p: dict[str, float]  # chi-square contingency, per feature pair
    pr_e: dict  # estimate, ci, n_seeds, predicted
    deletion: dict  # on E: mean changes and predictions
    no_clear_winner_fraction: float


def run_setting(setting: Setting, n_seeds: int, alpha: float, lr: float, seed: int = 0,
                max_steps: int = 200_000) -> tuple[SettingReport, object]:
    result = train(init(n_seeds, setting, alpha, seed), setting, lr, max_steps=max_steps, record_every=0)
    ok = result.converged
    c = result.c[ok]
    win, share = winners(c)
    counts = [[int((win[:, j] == h).sum()) for h in range(setting.n_heads)] for j in range(3)]
    uniform_p = [float(stats.chisquare(cnt).pvalue) for cnt in counts]
    pairs = {}
    for a, b in ((0, 1), (0, 2), (1, 2)):
        table = np.array([[int(((win[:, a] == i) & (win[:, b] == j)).sum()) for j in range(setting.n_heads)]
                          for i in range(setting.n_heads)])
        pairs[f"{'UVW'[a]}-{'UVW'[b]}"] = float(stats.chi2_contingency(table).pvalue)
    e = event_e(win)
    k = setting.n_heads
    predicted_e = ((k - 1) / k) ** 2
    lo, hi = wilson(int(e.sum()), len(e))
    d = delete_head(c[e], win[e, 0], setting)
    t2 = setting.t ** 2
    report = SettingReport(
        setting=asdict(setting), alpha=alpha, lr=lr, n_seeds=n_seeds,
        converged_fraction=float(ok.mean()), diverged_fraction=float(result.diverged.mean()),
        median_steps=float(np.median(result.steps)),
        w_max_error=float(np.abs(c.sum(axis=-2) - setting.optimum).max()) if ok.any() else float("nan"),
        winner_counts=counts, uniform_p=uniform_p, independence_p=pairs,
        pr_e={"estimate": float(e.mean()), "ci": [lo, hi], "n_seeds": int(len(e)), "predicted": predicted_e,
              "ci_contains_predicted": bool(lo <= predicted_e <= hi)},
        deletion={"n": int(e.sum()), "t2": t2,
                  "before_a_mean": float(d.before_a.mean()), "before_b_mean": float(d.before_b.mean()),
                  "after_a_mean": float(d.after_a.mean()), "after_b_mean": float(d.after_b.mean()),
                  "delta_a_mean": float(d.delta_a.mean()), "delta_a_predicted": -t2,
                  "delta_b_mean": float(d.delta_b.mean()), "delta_b_predicted": 3 * t2,
                  "delta_joint_mean": float(d.delta_joint.mean()), "delta_joint_predicted": t2 / 2,
                  "delta_a_max_abs_residual": float(np.abs(d.delta_a + t2).max()),
                  "delta_b_max_abs_residual": float(np.abs(d.delta_b - 3 * t2).max())},
        no_clear_winner_fraction=float((share < 0.95).mean()),
    )
    return report, (result, c, win, e, d)


@dataclass(frozen=True)
class AlphaSweep:
    alphas: list[float]
    lr: float
    n_seeds: int
    loser_median: list[float]  # median |c| of non-winning head-feature pairs, per alpha
    slope: float
    slope_ci: list[float]
    residual_a: list[float]  # mean |ΔR_A + t²| on E, per alpha
    residual_b: list[float]  # mean |ΔR_B − 3t²| on E
    no_clear_winner: list[float]
    converged: list[float]
    loser_samples: list[list[float]] = field(repr=False, default_factory=list)


def _loser_magnitudes(c: np.ndarray, win: np.ndarray) -> np.ndarray:
    mag = np.abs(c)  # [S, H, F]
    mask = np.ones_like(mag, dtype=bool)
    s_idx, f_idx = np.meshgrid(np.arange(len(c)), np.arange(3), indexing="ij")
    mask[s_idx, win, f_idx] = False
    return np.nanmedian(np.where(mask, mag, np.nan), axis=(1, 2))  # per seed: median loser magnitude


def alpha_sweep(setting: Setting, alphas: list[float], lr: float, n_seeds: int, seed: int = 0,
                n_boot: int = 1000) -> AlphaSweep:
    per_seed, res_a, res_b, unclear, conv = [], [], [], [], []
    t2 = setting.t ** 2
    for alpha in alphas:
        r = train(init(n_seeds, setting, alpha, seed), setting, lr)
        c = r.c[r.converged]
        win, share = winners(c)
        per_seed.append(_loser_magnitudes(c, win))
        e = event_e(win)
        d = delete_head(c[e], win[e, 0], setting)
        res_a.append(float(np.abs(d.delta_a + t2).mean()))
        res_b.append(float(np.abs(d.delta_b - 3 * t2).mean()))
        unclear.append(float((share < 0.95).mean()))
        conv.append(float(r.converged.mean()))
    x = np.log(alphas)
    medians = [float(np.median(s)) for s in per_seed]
    slope = float(np.polyfit(x, np.log(medians), 1)[0])
    rng = np.random.default_rng(seed)
    boots = [np.polyfit(x, np.log([np.median(rng.choice(s, len(s))) for s in per_seed]), 1)[0] for _ in range(n_boot)]
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return AlphaSweep(list(alphas), lr, n_seeds, medians, slope, [float(lo), float(hi)], res_a, res_b, unclear, conv,
                      [list(map(float, s)) for s in per_seed])


def max_stable_lr(setting: Setting, alpha: float, lrs: list[float], n_seeds: int = 200, seed: int = 0,
                  max_steps: int = 40_000, threshold: float = 0.99) -> dict:
    """Fraction of seeds converging at each step size; the largest with ≥ ``threshold``."""
    fractions = {}
    for lr in lrs:
        r = train(init(n_seeds, setting, alpha, seed), setting, lr, max_steps=max_steps)
        fractions[lr] = float(r.converged.mean())
    stable = [lr for lr, f in fractions.items() if f >= threshold]
    return {"alpha": alpha, "fractions": {str(k): v for k, v in fractions.items()},
            "largest_converging_lr": max(stable) if stable else None, "threshold": threshold, "n_seeds": n_seeds}
