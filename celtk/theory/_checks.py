"""Pass/fail checks of Theorems 4.2 and 4.3 on any coefficients c [S, H, F], and the null
controls they are run against.

Two kinds of check. *Discriminating* ones look at what training produced: whether one head
carries each feature (localisation) and what deleting it does (deletion). *Symmetric* ones look
only at which head is largest (Pr(E) = 4/9, winners uniform and independent); they hold for any
coefficients whose heads are exchangeable, trained or not, so they cannot tell training apart
from the nulls below. ``null_controls`` shows both on the same seeds.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from celtk.stats import holm
from celtk.theory._model import Setting
from celtk.theory._train import delete_head, event_e, winners

MIN_SEEDS = 20  # fewer qualifying seeds than this and a check reports "insufficient", never a pass
SHARE = 0.95  # a winner carries at least this share of Σ_h |c_hj|
RELATIVE_TOL = 0.10  # localised: |c_win − w*_j| ≤ this · w*_j; deletion: mean effect within this of the prediction
TIE_BREAK = 1e-6  # relative perturbation that decides the winner among exactly shared heads


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(centre - half), float(centre + half)


def localisation(c: np.ndarray, setting: Setting) -> dict:
    """Theorem 4.2: per seed, every feature's winner carries ≥ SHARE of |c| and ≈ w*_j.

    Args:
        c: [S, H, F] coefficients.
    """
    win, share = winners(c)
    carried = np.take_along_axis(c, win[:, None, :], axis=1)[:, 0, :]  # [S, F]
    near = np.abs(carried - setting.optimum) <= RELATIVE_TOL * np.abs(setting.optimum)
    ok = ((share >= SHARE) & near).all(axis=1)
    n = len(c)
    lo, hi = wilson(int(ok.sum()), n)
    return {"n_seeds": n, "localised_fraction": float(ok.mean()) if n else None, "ci": [lo, hi],
            "required_fraction": 0.8, "passes": bool(n >= MIN_SEEDS and lo >= 0.8)}


def deletion(c: np.ndarray, setting: Setting) -> dict:
    """Theorem 4.3: on E, deleting U's winner moves R_A by −t² and R_B by +3t² (means within RELATIVE_TOL)."""
    win, _ = winners(c)
    e = event_e(win)
    d = delete_head(c[e], win[e, 0], setting)
    t2 = setting.t ** 2
    n = int(e.sum())
    doc = {"n_on_e": n, "t2": t2, "delta_a_predicted": -t2, "delta_b_predicted": 3 * t2,
           "delta_a_mean": float(d.delta_a.mean()) if n else None, "delta_b_mean": float(d.delta_b.mean()) if n else None}
    if n < MIN_SEEDS:
        return {**doc, "passes": False, "reason": f"insufficient: {n} seeds on E, need {MIN_SEEDS}"}
    close_a = abs(float(d.delta_a.mean()) + t2) <= RELATIVE_TOL * t2
    close_b = abs(float(d.delta_b.mean()) - 3 * t2) <= RELATIVE_TOL * 3 * t2
    return {**doc, "passes": bool(close_a and close_b)}


def _independence_p(win: np.ndarray, a: int, b: int, n_heads: int) -> float:
    """χ² contingency p of feature a's winner against feature b's, over heads that won either at least once."""
    table = np.array([[int(((win[:, a] == i) & (win[:, b] == j)).sum()) for j in range(n_heads)] for i in range(n_heads)])
    table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    return float(stats.chi2_contingency(table).pvalue) if min(table.shape) > 1 else 1.0


def symmetry(c: np.ndarray, setting: Setting, level: float = 0.05) -> dict:
    """Pr(E)'s Wilson CI contains ((H−1)/H)², and no Holm-adjusted χ² test of winner uniformity
    (per feature) or independence (per feature pair) rejects at ``level``."""
    win, _ = winners(c)
    h, n = setting.n_heads, len(c)
    e = event_e(win)
    predicted = ((h - 1) / h) ** 2
    lo, hi = wilson(int(e.sum()), n)
    counts = [[int((win[:, j] == k).sum()) for k in range(h)] for j in range(3)]
    doc = {"n_seeds": n, "winner_counts": counts,
           "pr_e": {"estimate": float(e.mean()) if n else None, "ci": [lo, hi], "predicted": predicted,
                    "ci_contains_predicted": bool(lo <= predicted <= hi)}}
    if n < MIN_SEEDS:
        return {**doc, "uniform_p": None, "independence_p": None, "holm_min_p": None, "passes": False,
                "reason": f"insufficient: {n} seeds, need {MIN_SEEDS}"}
    uniform_p = [float(stats.chisquare(cnt).pvalue) for cnt in counts]
    independence_p = {f"{'UVW'[a]}-{'UVW'[b]}": _independence_p(win, a, b, h) for a, b in ((0, 1), (0, 2), (1, 2))}
    holm_min = float(holm(uniform_p + list(independence_p.values())).min())
    return {**doc, "uniform_p": uniform_p, "independence_p": independence_p, "holm_min_p": holm_min,
            "passes": bool(lo <= predicted <= hi and holm_min >= level)}


def all_checks(c: np.ndarray, setting: Setting) -> dict:
    return {"localisation": localisation(c, setting), "deletion": deletion(c, setting), "symmetry": symmetry(c, setting)}


def shared_coefficients(n_seeds: int, setting: Setting, seed: int) -> np.ndarray:
    """[S, H, F]: each feature split equally, c_hj = w*_j / H, times (1 + TIE_BREAK · N(0, 1)) so the
    largest head is a random one. Gradient descent from a head-tied start keeps every head equal
    (the gradient is the same for each), so this is where it ends; the joint objective is at its
    optimum here too, since it fixes only the per-feature sums."""
    rng = np.random.default_rng(seed)
    equal = np.broadcast_to(setting.optimum / setting.n_heads, (n_seeds, setting.n_heads, 3))
    return equal * (1 + TIE_BREAK * rng.standard_normal(equal.shape))


def null_controls(setting: Setting, trained: np.ndarray, initial: np.ndarray, seed: int = 0) -> dict:
    """Every check on the trained coefficients and on two nulls of the same number of seeds:
    ``untrained`` (the initial coefficients) and ``shared`` (each feature split equally by the heads).

    Args:
        trained: [S, H, F] converged coefficients; initial: [S0, H, F] coefficients at step 0.
    """
    populations = {"trained": trained, "untrained": initial, "shared": shared_coefficients(len(trained), setting, seed)}
    return {name: all_checks(c, setting) for name, c in populations.items()}


def deletion_trajectory(snapshots: dict[int, np.ndarray], setting: Setting, converged: np.ndarray) -> dict:
    """The deletion check at each checkpoint of training, with winners and E read at that checkpoint.

    ``settled_step``: the first checkpoint from which the check passes at every later one (None if
    it never settles); the theorem's "after a checkpoint".

    Args:
        snapshots: step -> c [S, H, F]; converged: bool [S], the seeds kept (those that converged).
    """
    final = snapshots[max(snapshots)][converged]
    final_win, _ = winners(final)
    rows = []
    for step in sorted(snapshots):
        c = snapshots[step][converged]
        win, _ = winners(c)
        rows.append({"step": step, **deletion(c, setting),
                     "winners_final_fraction": float((win == final_win).all(axis=1).mean()) if len(c) else None,
                     "w_error_mean": float(np.abs(c.sum(axis=-2) - setting.optimum).max(axis=-1).mean()) if len(c) else None})
    settled = None
    for row in reversed(rows):
        if not row["passes"]:
            break
        settled = row["step"]
    return {"rows": rows, "settled_step": settled, "relative_tol": RELATIVE_TOL}
