"""Pass/fail checks of Theorems 4.2 and 4.3 on any coefficients c ``[seed, head_index, feature]``,
and the null controls they are run against.

Two kinds of check. *Discriminating* ones look at what training produced: whether one head
carries each feature (localisation) and what deleting it does (deletion). *Symmetric* ones look
only at which head is largest (Pr(E) = 4/9, winners uniform and independent); they hold for any
coefficients whose heads are exchangeable, trained or not, so they cannot tell training apart
from the nulls below. ``null_controls`` shows both on the same seeds.

Each check returns a record (:class:`celtk.store.documents.Record`): the fields are the keys it
has in ``theory.json``, in that order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from jaxtyping import Bool, Float, Int
from scipy import stats

from celtk.stats import holm
from celtk.store.documents import Record, optional, record
from celtk.store.documents import rows as record_rows  # the document has a field named rows
from celtk.theory._model import Setting
from celtk.theory._train import delete_head, event_e, winners

MIN_SEEDS = 20  # fewer qualifying seeds than this and a check reports "insufficient", never a pass
SHARE = 0.95  # a winner carries at least this share of Σ_h |c_hj|
RELATIVE_TOL = 0.10  # localised: |c_win − w*_j| ≤ this · w*_j; deletion: mean effect within this of the prediction
TIE_BREAK = 1e-6  # relative perturbation that decides the winner among exactly shared heads


@dataclass(frozen=True, kw_only=True)
class PrE(Record):
    """Pr(E), the probability that U's winner wins neither task-specific feature, against ((H−1)/H)²."""

    estimate: float | None  # None: no seeds
    ci: list[float]  # Wilson 95 %
    predicted: float
    ci_contains_predicted: bool
    n_seeds: int | None = optional()  # a setting's report: the converged seeds E was read on


@dataclass(frozen=True, kw_only=True)
class Localisation(Record):
    """Theorem 4.2: the fraction of seeds whose every feature has one head carrying it."""

    n_seeds: int
    localised_fraction: float | None
    ci: list[float]
    required_fraction: float
    passes: bool


@dataclass(frozen=True, kw_only=True)
class DeletionCheck(Record):
    """Theorem 4.3 on E: the mean risk changes on deleting U's winner, against −t² and +3t²."""

    n_on_e: int
    t2: float
    delta_a_predicted: float
    delta_b_predicted: float
    delta_a_mean: float | None  # None: no seed on E
    delta_b_mean: float | None
    passes: bool
    reason: str | None = optional()  # why it cannot pass (too few seeds)


@dataclass(frozen=True, kw_only=True)
class SymmetryCheck(Record):
    """What exchangeable heads give whether trained or not: Pr(E) and uniform, independent winners."""

    n_seeds: int
    winner_counts: list[list[int]]  # per feature, per head
    pr_e: PrE = record(PrE)
    uniform_p: list[float] | None  # χ² goodness of fit per feature (None: too few seeds)
    independence_p: dict[str, float] | None  # χ² contingency per feature pair ("U-V", "U-W", "V-W")
    holm_min_p: float | None
    passes: bool
    reason: str | None = optional()


@dataclass(frozen=True, kw_only=True)
class CheckVerdicts(Record):
    localisation: bool
    deletion: bool
    symmetry: bool


@dataclass(frozen=True, kw_only=True)
class CheckSet(Record):
    """Every check on one population of coefficients."""

    localisation: Localisation = record(Localisation)
    deletion: DeletionCheck = record(DeletionCheck)
    symmetry: SymmetryCheck = record(SymmetryCheck)

    def verdicts(self) -> CheckVerdicts:
        return CheckVerdicts(localisation=self.localisation.passes, deletion=self.deletion.passes,
                             symmetry=self.symmetry.passes)


@dataclass(frozen=True, kw_only=True)
class Verdicts(Record):
    """Which checks pass, per population: a check that passes on a null is no evidence for training."""

    trained: CheckVerdicts = record(CheckVerdicts)
    untrained: CheckVerdicts = record(CheckVerdicts)
    shared: CheckVerdicts = record(CheckVerdicts)


@dataclass(frozen=True, kw_only=True)
class NullControls(Record):
    """Every check on the trained coefficients and on two nulls of as many seeds (see :func:`null_controls`)."""

    trained: CheckSet = record(CheckSet)
    untrained: CheckSet = record(CheckSet)
    shared: CheckSet = record(CheckSet)

    def populations(self) -> dict[str, CheckSet]:
        """``{"trained": …, "untrained": …, "shared": …}``, in that order."""
        return {"trained": self.trained, "untrained": self.untrained, "shared": self.shared}


@dataclass(frozen=True, kw_only=True)
class TrajectoryRow(Record):
    """The deletion check at one checkpoint, with winners and E read there."""

    step: int
    n_on_e: int
    t2: float
    delta_a_predicted: float
    delta_b_predicted: float
    delta_a_mean: float | None
    delta_b_mean: float | None
    passes: bool
    reason: str | None = optional()
    winners_final_fraction: float | None  # seeds whose winners are already the converged ones
    w_error_mean: float | None  # mean over seeds of max_j |w_j − w*_j|


@dataclass(frozen=True, kw_only=True)
class Trajectory(Record):
    """The deletion check along training; ``settled_step``: the first checkpoint from which it passes
    at every later one (None if it never settles), the theorem's "after a checkpoint"."""

    rows: list[TrajectoryRow] = record_rows(TrajectoryRow)
    settled_step: int | None
    relative_tol: float


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(centre - half), float(centre + half)


def localisation(c: Float[np.ndarray, "seed head_index feature"], setting: Setting) -> Localisation:
    """Theorem 4.2: per seed, every feature's winner carries ≥ SHARE of |c| and ≈ w*_j."""
    win, share = winners(c)
    carried = np.take_along_axis(c, win[:, None, :], axis=1)[:, 0, :]  # [seed, feature]
    near = np.abs(carried - setting.optimum) <= RELATIVE_TOL * np.abs(setting.optimum)
    ok = ((share >= SHARE) & near).all(axis=1)
    n = len(c)
    lo, hi = wilson(int(ok.sum()), n)
    return Localisation(n_seeds=n, localised_fraction=float(ok.mean()) if n else None, ci=[lo, hi],
                        required_fraction=0.8, passes=bool(n >= MIN_SEEDS and lo >= 0.8))


def deletion(c: Float[np.ndarray, "seed head_index feature"], setting: Setting) -> DeletionCheck:
    """Theorem 4.3: on E, deleting U's winner moves R_A by −t² and R_B by +3t² (means within RELATIVE_TOL)."""
    win, _ = winners(c)
    e = event_e(win)
    d = delete_head(c[e], win[e, 0], setting)
    t2 = setting.t ** 2
    n = int(e.sum())
    a_mean = float(d.delta_a.mean()) if n else None
    b_mean = float(d.delta_b.mean()) if n else None
    check = DeletionCheck(n_on_e=n, t2=t2, delta_a_predicted=-t2, delta_b_predicted=3 * t2, delta_a_mean=a_mean,
                          delta_b_mean=b_mean, passes=False)
    if a_mean is None or b_mean is None or n < MIN_SEEDS:
        return replace(check, reason=f"insufficient: {n} seeds on E, need {MIN_SEEDS}")
    close_a = abs(a_mean + t2) <= RELATIVE_TOL * t2
    close_b = abs(b_mean - 3 * t2) <= RELATIVE_TOL * 3 * t2
    return replace(check, passes=bool(close_a and close_b))


def _independence_p(win: Int[np.ndarray, "seed feature"], a: int, b: int, n_heads: int) -> float:
    """χ² contingency p of feature a's winner against feature b's, over heads that won either at least once."""
    table = np.array([[int(((win[:, a] == i) & (win[:, b] == j)).sum()) for j in range(n_heads)]
                      for i in range(n_heads)])
    table = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    return float(stats.chi2_contingency(table).pvalue) if min(table.shape) > 1 else 1.0


def symmetry(c: Float[np.ndarray, "seed head_index feature"], setting: Setting, level: float = 0.05) -> SymmetryCheck:
    """Pr(E)'s Wilson CI contains ((H−1)/H)², and no Holm-adjusted χ² test of winner uniformity
    (per feature) or independence (per feature pair) rejects at ``level``."""
    win, _ = winners(c)
    h, n = setting.n_heads, len(c)
    e = event_e(win)
    predicted = ((h - 1) / h) ** 2
    lo, hi = wilson(int(e.sum()), n)
    counts = [[int((win[:, j] == k).sum()) for k in range(h)] for j in range(3)]
    pr_e = PrE(estimate=float(e.mean()) if n else None, ci=[lo, hi], predicted=predicted,
               ci_contains_predicted=bool(lo <= predicted <= hi))
    if n < MIN_SEEDS:
        return SymmetryCheck(n_seeds=n, winner_counts=counts, pr_e=pr_e, uniform_p=None, independence_p=None,
                             holm_min_p=None, passes=False, reason=f"insufficient: {n} seeds, need {MIN_SEEDS}")
    uniform_p = [float(stats.chisquare(cnt).pvalue) for cnt in counts]
    independence_p = {f"{'UVW'[a]}-{'UVW'[b]}": _independence_p(win, a, b, h) for a, b in ((0, 1), (0, 2), (1, 2))}
    holm_min = float(holm(uniform_p + list(independence_p.values())).min())
    return SymmetryCheck(n_seeds=n, winner_counts=counts, pr_e=pr_e, uniform_p=uniform_p, independence_p=independence_p,
                         holm_min_p=holm_min, passes=bool(lo <= predicted <= hi and holm_min >= level))


def all_checks(c: Float[np.ndarray, "seed head_index feature"], setting: Setting) -> CheckSet:
    return CheckSet(localisation=localisation(c, setting), deletion=deletion(c, setting), symmetry=symmetry(c, setting))


def shared_coefficients(n_seeds: int, setting: Setting, seed: int) -> Float[np.ndarray, "seed head_index feature"]:
    """Each feature split equally, c_hj = w*_j / H, times (1 + TIE_BREAK · N(0, 1)) so the
    largest head is a random one. Gradient descent from a head-tied start keeps every head equal
    (the gradient is the same for each), so this is where it ends; the joint objective is at its
    optimum here too, since it fixes only the per-feature sums."""
    rng = np.random.default_rng(seed)
    equal = np.broadcast_to(setting.optimum / setting.n_heads, (n_seeds, setting.n_heads, 3))
    return equal * (1 + TIE_BREAK * rng.standard_normal(equal.shape))


def null_controls(setting: Setting, trained: Float[np.ndarray, "seed head_index feature"],
                  initial: Float[np.ndarray, "initial_seed head_index feature"], seed: int = 0) -> NullControls:
    """Every check on the ``trained`` (converged) coefficients and on two nulls of the same number of
    seeds: ``untrained`` (the ``initial`` coefficients, at step 0) and ``shared`` (each feature split
    equally by the heads)."""
    return NullControls(trained=all_checks(trained, setting), untrained=all_checks(initial, setting),
                        shared=all_checks(shared_coefficients(len(trained), setting, seed), setting))


def verdicts(checks: NullControls) -> Verdicts:
    """Which checks pass, per population of ``null_controls``' result."""
    return Verdicts(trained=checks.trained.verdicts(), untrained=checks.untrained.verdicts(),
                    shared=checks.shared.verdicts())


def deletion_trajectory(snapshots: dict[int, Float[np.ndarray, "seed head_index feature"]], setting: Setting,
                        converged: Bool[np.ndarray, " seed"]) -> Trajectory:
    """The deletion check at each checkpoint of training (``snapshots``: step -> coefficients of every
    seed), on the seeds kept (those that ``converged``), with winners and E read at that checkpoint."""
    final = snapshots[max(snapshots)][converged]
    final_win, _ = winners(final)
    rows = []
    for step in sorted(snapshots):
        c = snapshots[step][converged]
        win, _ = winners(c)
        check = deletion(c, setting)
        rows.append(TrajectoryRow(step=step, n_on_e=check.n_on_e, t2=check.t2,
                                  delta_a_predicted=check.delta_a_predicted,
                                  delta_b_predicted=check.delta_b_predicted, delta_a_mean=check.delta_a_mean,
                                  delta_b_mean=check.delta_b_mean, passes=check.passes, reason=check.reason,
                                  winners_final_fraction=float((win == final_win).all(axis=1).mean())
                                  if len(c) else None,
                                  w_error_mean=float(np.abs(c.sum(axis=-2) - setting.optimum).max(axis=-1).mean())
                                  if len(c) else None))
    settled = None
    for row in reversed(rows):
        if not row.passes:
            break
        settled = row.step
    return Trajectory(rows=rows, settled_step=settled, relative_tol=RELATIVE_TOL)
