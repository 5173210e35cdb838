"""``celtk theory``: the Section 4 checks, a table beside the paper's predictions, JSON and PNGs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from celtk.cli._common import console

if TYPE_CHECKING:
    from celtk.theory import CheckSet, SettingEntry


@click.command("theory")
@click.option("--out", type=click.Path(file_okay=False), default=None, help="Write theory.json and PNG figures here.")
@click.option("--seeds", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Seeds for Pr(E), winners and deletion.")
@click.option("--quick", is_flag=True, help="Small sizes (seconds), for a smoke test.")
def theory_cmd(out: str | None, seeds: int, quick: bool) -> None:
    """Train the paper's 3-head diagonal attention model on many seeds; check Theorems 4.2 and 4.3."""
    from dataclasses import replace

    from celtk.store.files import write_json
    from celtk.theory import TheoryConfig, TheoryDocument, run_theory

    config = TheoryConfig.quick() if quick else replace(TheoryConfig(), n_seeds=seeds)
    with console(stderr=True).status("training on all seeds…"):
        doc = run_theory(config, Path(out) if out else None)
    for entry in doc.settings:
        _print_setting(entry)
        _print_controls(entry)
    if out:
        write_json(Path(out) / TheoryDocument.FILE, doc.to_json())
        console().print(f"Wrote {out}/{TheoryDocument.FILE} and figures.")


def _num(value: float | None, spec: str) -> str:
    return "undefined" if value is None else format(value, spec)


def _print_setting(entry: SettingEntry) -> None:
    """One setting's measurements beside what the paper predicts."""
    from rich.table import Table

    main, sweep, step = entry.main, entry.alpha_sweep, entry.step_size
    d, pe = main.deletion, main.pr_e
    table = Table(title=f"Setting {entry.name} (α={main.alpha}, step {main.lr}, {main.n_seeds} seeds)")
    for col in ("quantity", "measured", "paper predicts"):
        table.add_column(col)
    table.add_row("converged to (a/2, b, c)",
                  f"{main.converged_fraction:.1%} (max |w−w*| {_num(main.w_max_error, '.1e')})", "almost all seeds")
    table.add_row("winner uniform (χ² p, U/V/W)", " / ".join(f"{p:.3f}" for p in main.uniform_p or []),
                  "uniform over heads")
    table.add_row("winners independent (χ² p)",
                  ", ".join(f"{k} {v:.3f}" for k, v in (main.independence_p or {}).items()), "independent")
    table.add_row("Pr(E)", f"{_num(pe.estimate, '.3f')} [{pe.ci[0]:.3f}, {pe.ci[1]:.3f}]", f"{pe.predicted:.3f} (4/9)")
    table.add_row("ΔR_A on deleting U's winner", _num(d.delta_a_mean, "+.4f"), f"{d.delta_a_predicted:+.4f} (−t²)")
    table.add_row("ΔR_B", _num(d.delta_b_mean, "+.4f"), f"{d.delta_b_predicted:+.4f} (+3t²)")
    table.add_row("Δ joint objective", _num(d.delta_joint_mean, "+.4f"), f"{d.delta_joint_predicted:+.4f} (+t²/2)")
    table.add_row("|ΔR_A + t²| mean, by α",
                  ", ".join(f"{a:g}: {_num(r, '.1e')}" for a, r in zip(sweep.alphas, sweep.residual_a, strict=True)),
                  "→ 0 as α → 0")
    table.add_row("losing |c| log-log slope vs α",
                  f"{sweep.slope:.2f} [{sweep.slope_ci[0]:.2f}, {sweep.slope_ci[1]:.2f}]"
                  f" (initial |c|: {sweep.init_slope:.2f}, by construction)", "4 (O(α⁴))")
    table.add_row("loser growth |c_end|/|c_0|, median by α",
                  ", ".join(f"{a:g}: {g:.2f}" for a, g in zip(sweep.alphas, sweep.growth_median, strict=True))
                  + f"; slope {sweep.growth_slope:+.2f} "
                  f"[{sweep.growth_slope_ci[0]:+.2f}, {sweep.growth_slope_ci[1]:+.2f}]",
                  "α-independent (slope 0)")
    table.add_row("no clear winner (<95 %), by α",
                  ", ".join(f"{a:g}: {r:.1%}" for a, r in zip(sweep.alphas, sweep.no_clear_winner, strict=True)),
                  "(not stated)")
    table.add_row("largest converging step", str(step.largest_converging_lr), "(small enough)")
    console().print(table)


# the null-controls table's rows: label, and the check's verdict on one population
_CHECK_ROWS: tuple[tuple[str, Callable[[CheckSet], bool]], ...] = (
    ("localisation (discriminating)", lambda checks: checks.localisation.passes),
    ("deletion (discriminating)", lambda checks: checks.deletion.passes),
    ("symmetry (Pr(E), χ²; follows from symmetry)", lambda checks: checks.symmetry.passes),
)


def _print_controls(entry: SettingEntry) -> None:
    """Which checks tell trained coefficients from the nulls, and the deletion effect along training."""
    from rich.table import Table

    populations: dict[str, CheckSet] = entry.checks.populations()
    table = Table(title="Null controls: a check that passes on a null cannot be evidence for training")
    for col in ("check", *populations):
        table.add_column(col)
    for label, passes in _CHECK_ROWS:
        table.add_row(label, *(("pass" if passes(checks) else "FAIL") for checks in populations.values()))
    console().print(table)
    traj = entry.deletion_trajectory
    table = Table(title=f"Deletion of U's winner along training (settled at step {traj.settled_step})")
    for col in ("step", "seeds on E", "ΔR_A", "ΔR_B", "winners final", "within 10 %"):
        table.add_column(col, justify="right")
    for row in traj.rows:
        table.add_row(str(row.step), str(row.n_on_e), _num(row.delta_a_mean, "+.4f"), _num(row.delta_b_mean, "+.4f"),
                      _num(row.winners_final_fraction, ".1%"), "yes" if row.passes else "no")
    console().print(table)


COMMANDS = [theory_cmd]
