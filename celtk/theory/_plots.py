"""PNG figures for the theory experiments (matplotlib, Agg backend, no global state changed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from jaxtyping import Float

from celtk.theory._checks import TrajectoryRow
from celtk.theory._train import Deletion

if TYPE_CHECKING:  # annotations only: matplotlib loads when a figure is drawn
    from matplotlib.figure import Figure


def _figure(size: tuple[float | int, float | int] = (9, 3.2)) -> Figure:  # inches (an int too: no numeric tower)
    from matplotlib.figure import Figure

    return Figure(figsize=size, dpi=110)


def trajectories(frames: Float[np.ndarray, "frame kept_seed head_index feature"], every: int, path: Path) -> Path:
    """Per-head coefficient of seed 0 over training (``frames`` recorded every ``every`` steps),
    one panel per feature."""
    fig = _figure()
    axes = fig.subplots(1, 3, sharey=False)
    steps = np.arange(frames.shape[0]) * every
    for j, ax in enumerate(axes):
        for h in range(frames.shape[2]):
            ax.plot(steps, frames[:, 0, h, j], label=f"head {h}")
        ax.set_title(f"feature {'UVW'[j]}")
        ax.set_xlabel("step")
    axes[0].set_ylabel("c_hj")
    axes[0].legend(fontsize=7)
    fig.suptitle("Winner-take-all: per-head coefficients during gradient descent (one seed)")
    fig.tight_layout()
    fig.savefig(path)
    return path


def winner_distribution(counts: list[list[int]], path: Path) -> Path:
    fig = _figure()
    ax = fig.subplots()
    counts_arr = np.array(counts)
    n_heads = counts_arr.shape[1]
    for h in range(n_heads):
        ax.bar(np.arange(3) + (h - (n_heads - 1) / 2) * 0.25, counts_arr[:, h], width=0.25, label=f"head {h}")
    ax.axhline(counts_arr.sum(axis=1).mean() / n_heads, color="k", ls="--", lw=1, label="uniform")
    ax.set_xticks(range(3), ["U (conflict)", "V (task A)", "W (task B)"])
    ax.set_ylabel("seeds won")
    ax.legend(fontsize=7)
    ax.set_title("Which head wins each feature")
    fig.tight_layout()
    fig.savefig(path)
    return path


def deletion_risks(deletion: Deletion, t2: float, path: Path) -> Path:
    fig = _figure()
    ax = fig.subplots()
    data = [deletion.before_a, deletion.after_a, deletion.before_b, deletion.after_b]
    ax.boxplot(data, tick_labels=["A before", "A after", "B before", "B after"])
    ax.axhline(t2, color="tab:green", ls="--", label="t² (predicted intact)")
    ax.axhline(4 * t2, color="tab:red", ls="--", label="4t² (predicted B after)")
    ax.axhline(0, color="tab:blue", ls=":", label="0 (predicted A after)")
    ax.set_ylabel("population risk")
    ax.set_title("Deleting the conflicting feature's winner, on event E")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    return path


def loser_scaling(alphas: list[float], medians: list[float], slope: float, path: Path) -> Path:
    fig = _figure((5, 3.6))
    ax = fig.subplots()
    ax.loglog(alphas, medians, "o-", label=f"median losing |c| (slope {slope:.2f})")
    ref = np.array(alphas) ** 4 * medians[-1] / alphas[-1] ** 4
    ax.loglog(alphas, ref, "k--", label="∝ α⁴")
    ax.set_xlabel("α (initial scale)")
    ax.set_ylabel("|c| of losing heads")
    ax.legend(fontsize=7)
    ax.set_title("Losing heads' contributions scale as α⁴")
    fig.tight_layout()
    fig.savefig(path)
    return path


def deletion_along_training(rows: Sequence[TrajectoryRow], t2: float, path: Path) -> Path:
    """Mean ΔR_A and ΔR_B on E at each checkpoint, against the predictions −t² and +3t²."""
    fig = _figure((5, 3.6))
    ax = fig.subplots()
    kept = [r for r in rows if r.delta_a_mean is not None]
    steps = [max(r.step, 1) for r in kept]  # step 0 drawn at 1 on the log axis
    ax.semilogx(steps, [r.delta_a_mean for r in kept], "o-", color="tab:blue", label="ΔR_A")
    ax.semilogx(steps, [r.delta_b_mean for r in kept], "o-", color="tab:red", label="ΔR_B")
    ax.axhline(-t2, color="tab:blue", ls="--", lw=1, label="−t²")
    ax.axhline(3 * t2, color="tab:red", ls="--", lw=1, label="+3t²")
    ax.set_xlabel("checkpoint step (0 drawn at 1)")
    ax.set_ylabel("mean risk change on E")
    ax.set_title("Deleting U's winner at each checkpoint")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    return path
