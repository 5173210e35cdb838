"""``run_theory``: every experiment at a chosen size, as one JSON-ready document."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from celtk.theory import _plots
from celtk.theory._checks import deletion_trajectory, null_controls
from celtk.theory._experiments import alpha_sweep, max_stable_lr, run_setting
from celtk.theory._model import Setting, coefficients
from celtk.theory._train import init, train


@dataclass(frozen=True)
class TheoryConfig:
    n_seeds: int = 2000
    alpha: float = 0.1
    lr: float = 0.2
    sweep_alphas: tuple[float, ...] = (0.03, 0.06, 0.12, 0.24)
    sweep_seeds: int = 400
    lr_grid: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
    lr_seeds: int = 200
    seed: int = 0
    settings: tuple[tuple[float, float, float], ...] = ((1.0, 1.0, 1.0), (1.5, 1.0, 0.5))
    checkpoints: tuple[int, ...] = (0, 250, 500, 750, 1000, 1500, 2000, 3000, 5000, 10_000, 20_000)

    @classmethod
    def quick(cls) -> TheoryConfig:
        return cls(n_seeds=300, sweep_alphas=(0.06, 0.12, 0.24), sweep_seeds=100, lr_grid=(1.0, 3.0), lr_seeds=50)


def verdicts(checks: dict) -> dict:
    """{population: {check: passes}} from ``null_controls``' document."""
    return {name: {check: doc["passes"] for check, doc in population.items()} for name, population in checks.items()}


def run_theory(config: TheoryConfig = TheoryConfig(), out: Path | None = None) -> dict:
    """Run every check; when ``out`` is given, also save the PNG figures there."""
    doc: dict = {"config": asdict(config), "settings": []}
    for index, (a, b, c) in enumerate(config.settings):
        setting = Setting(a, b, c)
        seed = config.seed + 1000 * index  # independent draws per setting
        report, (result, trained, _, _, deletion) = run_setting(setting, config.n_seeds, config.alpha, config.lr, seed,
                                                                 checkpoints=config.checkpoints)
        checks = null_controls(setting, trained, coefficients(init(config.n_seeds, setting, config.alpha, seed)), seed)
        trajectory = deletion_trajectory(result.snapshots, setting, result.converged)
        sweep = alpha_sweep(setting, list(config.sweep_alphas), config.lr, config.sweep_seeds, seed)
        stable = max_stable_lr(setting, config.alpha, list(config.lr_grid), config.lr_seeds, seed)
        sweep_doc = {k: v for k, v in asdict(sweep).items() if k != "loser_samples"}
        entry = {"name": f"a={a:g}, b={b:g}, c={c:g}", "main": asdict(report), "alpha_sweep": sweep_doc, "step_size": stable,
                 "checks": checks, "verdicts": verdicts(checks), "deletion_trajectory": trajectory}
        if out is not None:
            out = Path(out)
            out.mkdir(parents=True, exist_ok=True)
            tag = f"setting{index}"
            every = 25
            traj = train(init(1, setting, config.alpha, config.seed + 1), setting, config.lr, max_steps=4000,
                         record_every=every, record_seeds=1)
            assert traj.trajectory is not None  # recorded, since record_every is given
            entry["figures"] = [str(p.name) for p in (
                _plots.trajectories(traj.trajectory, every, out / f"{tag}_trajectories.png"),
                _plots.winner_distribution(report.winner_counts, out / f"{tag}_winners.png"),
                _plots.deletion_risks(deletion, setting.t ** 2, out / f"{tag}_deletion.png"),
                _plots.loser_scaling(sweep.alphas, sweep.loser_median, sweep.slope, out / f"{tag}_loser_scaling.png"),
                _plots.deletion_along_training(trajectory["rows"], setting.t ** 2, out / f"{tag}_deletion_trajectory.png"),
            )]
        doc["settings"].append(entry)
    first = doc["settings"][0]
    doc["pr_e"] = first["main"]["pr_e"]
    doc["deletion"] = first["main"]["deletion"]
    sweep = first["alpha_sweep"]
    doc["loser_slope"] = {"slope": sweep["slope"], "ci": sweep["slope_ci"], "predicted": 4.0,
                          "initial_slope": sweep["init_slope"]}
    doc["loser_growth"] = {"alphas": sweep["alphas"], "median_ratio": sweep["growth_median"],
                           "quartiles": sweep["growth_quartiles"], "slope": sweep["growth_slope"],
                           "ci": sweep["growth_slope_ci"]}
    doc["null_controls"] = first["verdicts"]
    doc["deletion_settled_step"] = first["deletion_trajectory"]["settled_step"]
    return doc
