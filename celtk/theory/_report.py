"""``run_theory``: every experiment at a chosen size, as one document (``theory.json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from celtk.store.documents import SCHEMA_VERSION, Document, Record, optional, record
from celtk.theory import _plots
from celtk.theory._checks import (
    NullControls,
    PrE,
    Trajectory,
    Verdicts,
    deletion_trajectory,
    null_controls,
    verdicts,
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
from celtk.theory._model import Setting, coefficients
from celtk.theory._train import init, train


@dataclass(frozen=True)
class TheoryConfig(Record):
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

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "") -> TheoryConfig:
        """The file holds JSON lists where the config holds tuples."""
        def tuples(value: object) -> object:
            return tuple(tuples(v) for v in value) if isinstance(value, list) else value

        return super().from_json({name: tuples(value) for name, value in data.items()}, where)


@dataclass(frozen=True, kw_only=True)
class SettingEntry(Record):
    """Every experiment on one setting (a, b, c)."""

    name: str
    main: SettingReport = record(SettingReport)
    alpha_sweep: AlphaSweep = record(AlphaSweep)
    step_size: StepSize = record(StepSize)
    checks: NullControls = record(NullControls)
    verdicts: Verdicts = record(Verdicts)
    deletion_trajectory: Trajectory = record(Trajectory)
    figures: list[str] | None = optional()  # PNG file names, when run_theory was given a directory


@dataclass(frozen=True, kw_only=True)
class LoserSlope(Record):
    """Log-log slope of the losing heads' |c| against α (the paper: O(α⁴)), and of their initial |c|."""

    slope: float
    ci: list[float]
    predicted: float
    initial_slope: float


@dataclass(frozen=True, kw_only=True)
class LoserGrowth(Record):
    """Per α, the losing heads' growth |c_final| / |c_initial|, and its log-log slope (0: α-independent)."""

    alphas: list[float]
    median_ratio: list[float]
    quartiles: list[list[float]]
    slope: float
    ci: list[float]


@dataclass(frozen=True, kw_only=True)
class TheoryDocument(Document):
    """``theory.json``: every setting's experiments, and the first setting's headline figures."""

    FILE: ClassVar[str] = "theory.json"
    DIGESTED: ClassVar[bool] = False  # written without a digest (celtk.store.documents.check_digest)
    # layout 1 of a file written before documents carried schema_version: not written, so the file is
    # byte for byte what it was (Document.from_json reads a file without one as layout 1); a new layout writes it
    schema_version: int = field(default=SCHEMA_VERSION, metadata={"stored": False})
    config: TheoryConfig = record(TheoryConfig)
    settings: list[SettingEntry] = field(metadata={"rows": SettingEntry})
    pr_e: PrE = record(PrE)
    deletion: DeletionSummary = record(DeletionSummary)
    loser_slope: LoserSlope = record(LoserSlope)
    loser_growth: LoserGrowth = record(LoserGrowth)
    null_controls: Verdicts = record(Verdicts)
    deletion_settled_step: int | None


def _setting_entry(config: TheoryConfig, index: int, out: Path | None) -> SettingEntry:
    a, b, c = config.settings[index]
    setting = Setting(a, b, c)
    seed = config.seed + 1000 * index  # independent draws per setting
    report, (result, trained, _, _, deletion) = run_setting(setting, config.n_seeds, config.alpha, config.lr, seed,
                                                             checkpoints=config.checkpoints)
    checks = null_controls(setting, trained, coefficients(init(config.n_seeds, setting, config.alpha, seed)), seed)
    assert result.snapshots is not None  # kept, since checkpoints are given
    trajectory = deletion_trajectory(result.snapshots, setting, result.converged)
    sweep = alpha_sweep(setting, list(config.sweep_alphas), config.lr, config.sweep_seeds, seed)
    stable = max_stable_lr(setting, config.alpha, list(config.lr_grid), config.lr_seeds, seed)
    figures = None
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        tag = f"setting{index}"
        every = 25
        traj = train(init(1, setting, config.alpha, config.seed + 1), setting, config.lr, max_steps=4000,
                     record_every=every, record_seeds=1)
        assert traj.trajectory is not None  # recorded, since record_every is given
        figures = [str(p.name) for p in (
            _plots.trajectories(traj.trajectory, every, out / f"{tag}_trajectories.png"),
            _plots.winner_distribution(report.winner_counts, out / f"{tag}_winners.png"),
            _plots.deletion_risks(deletion, setting.t ** 2, out / f"{tag}_deletion.png"),
            _plots.loser_scaling(sweep.alphas, sweep.loser_median, sweep.slope, out / f"{tag}_loser_scaling.png"),
            _plots.deletion_along_training(trajectory.rows, setting.t ** 2, out / f"{tag}_deletion_trajectory.png"),
        )]
    return SettingEntry(name=f"a={a:g}, b={b:g}, c={c:g}", main=report, alpha_sweep=sweep, step_size=stable,
                        checks=checks, verdicts=verdicts(checks), deletion_trajectory=trajectory, figures=figures)


def run_theory(config: TheoryConfig = TheoryConfig(), out: Path | None = None) -> TheoryDocument:
    """Run every check; when ``out`` is given, also save the PNG figures there (``theory.json`` is the
    caller's to write: ``write_json(out / TheoryDocument.FILE, document.to_json())``)."""
    settings = [_setting_entry(config, index, out) for index in range(len(config.settings))]
    first = settings[0]
    sweep = first.alpha_sweep
    return TheoryDocument(
        config=config, settings=settings, pr_e=first.main.pr_e, deletion=first.main.deletion,
        loser_slope=LoserSlope(slope=sweep.slope, ci=sweep.slope_ci, predicted=4.0, initial_slope=sweep.init_slope),
        loser_growth=LoserGrowth(alphas=sweep.alphas, median_ratio=sweep.growth_median,
                                 quartiles=sweep.growth_quartiles, slope=sweep.growth_slope, ci=sweep.growth_slope_ci),
        null_controls=first.verdicts, deletion_settled_step=first.deletion_trajectory.settled_step)
