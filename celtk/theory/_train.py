"""Full-batch gradient descent on the closed form, vectorised over seeds; winners; event E;
head deletion. Shapes as in :mod:`celtk.theory._model` (``seed``, ``head_index``, ``feature``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Bool, Float, Int

from celtk.theory._model import Setting, coefficients, grad_joint, joint, risks


@dataclass(frozen=True)
class TrainResult:
    theta: Float[np.ndarray, "seed 4 head_index feature"]
    converged: Bool[np.ndarray, " seed"]
    diverged: Bool[np.ndarray, " seed"]
    steps: Int[np.ndarray, " seed"]  # steps taken per seed
    trajectory: Float[np.ndarray, "frame kept_seed head_index feature"] | None  # coefficients, when recorded
    # step -> coefficients of every seed, at the requested checkpoints
    snapshots: dict[int, Float[np.ndarray, "seed head_index feature"]] | None = None

    @property
    def c(self) -> Float[np.ndarray, "seed head_index feature"]:
        return coefficients(self.theta)

    @property
    def w(self) -> Float[np.ndarray, "seed feature"]:
        w: Float[np.ndarray, "seed feature"] = self.c.sum(axis=-2)
        return w


def init(n_seeds: int, setting: Setting, alpha: float, seed: int = 0) -> Float[np.ndarray, "seed 4 head_index feature"]:
    """θ ~ α · N(0, 1), no sign conditioning, tying or rebalancing."""
    rng = np.random.default_rng(seed)
    return alpha * rng.standard_normal((n_seeds, 4, setting.n_heads, 3))


def train(theta0: Float[np.ndarray, "seed 4 head_index feature"], setting: Setting, lr: float, max_steps: int = 200_000,
          tol: float = 1e-9, record_every: int = 0, record_seeds: int = 4, checkpoints: tuple[int, ...] = ()
          ) -> TrainResult:
    """Gradient descent until every seed has converged (‖w − w*‖∞ < tol·10³ and ‖∇‖∞ < tol)
    or diverged (non-finite or |θ| > 1e6), or ``max_steps``.

    ``checkpoints``: steps at which every seed's coefficients are kept (a seed that has stopped
    keeps its final coefficients; a checkpoint past the last step gets the final ones).
    """
    theta = theta0.copy()
    n = theta.shape[0]
    active = np.ones(n, dtype=bool)
    converged = np.zeros(n, dtype=bool)
    diverged = np.zeros(n, dtype=bool)
    steps = np.zeros(n, dtype=np.int64)
    frames: list[Float[np.ndarray, "kept_seed head_index feature"]] = []
    snapshots: dict[int, Float[np.ndarray, "seed head_index feature"]] | None = {} if checkpoints else None
    with np.errstate(over="ignore", invalid="ignore"):  # divergence is detected below, not warned about
        return _descend(theta, setting, lr, max_steps, tol, record_every, record_seeds, active, converged, diverged,
                        steps, frames, snapshots, set(checkpoints))


def _descend(theta: Float[np.ndarray, "seed 4 head_index feature"], setting: Setting, lr: float, max_steps: int,
             tol: float, record_every: int, record_seeds: int, active: Bool[np.ndarray, " seed"],
             converged: Bool[np.ndarray, " seed"], diverged: Bool[np.ndarray, " seed"], steps: Int[np.ndarray, " seed"],
             frames: list[Float[np.ndarray, "kept_seed head_index feature"]],
             snapshots: dict[int, Float[np.ndarray, "seed head_index feature"]] | None,
             checkpoints: set[int]) -> TrainResult:
    for step in range(max_steps):
        if record_every and step % record_every == 0:
            frames.append(coefficients(theta[:record_seeds]))
        if step in checkpoints and snapshots is not None:  # snapshots exist whenever checkpoints do
            snapshots[step] = coefficients(theta)
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        g = grad_joint(theta[idx], setting)
        theta[idx] -= lr * g
        steps[idx] += 1
        if step % 50 == 0 or step == max_steps - 1:
            sub = theta[idx]
            bad = ~np.isfinite(sub).all(axis=(1, 2, 3)) | (np.abs(sub).max(axis=(1, 2, 3)) > 1e6)
            w = coefficients(sub).sum(axis=-2)
            gmax = np.abs(grad_joint(sub, setting)).max(axis=(1, 2, 3))
            done = ~bad & (gmax < tol) & (np.abs(w - setting.optimum).max(axis=-1) < 1e3 * tol)
            diverged[idx[bad]] = True
            converged[idx[done]] = True
            active[idx[bad | done]] = False
    if record_every:
        frames.append(coefficients(theta[:record_seeds]))
    if snapshots is not None:
        for step in checkpoints - set(snapshots):
            snapshots[step] = coefficients(theta)  # past the last step: every seed has stopped
    return TrainResult(theta, converged, diverged, steps, np.array(frames) if frames else None, snapshots)


def winners(c: Float[np.ndarray, "seed head_index feature"]
            ) -> tuple[Int[np.ndarray, "seed feature"], Float[np.ndarray, "seed feature"]]:
    """Per seed and feature: the head with the largest |c_hj|, and its share of Σ_h |c_hj|."""
    mag = np.abs(c)
    win = mag.argmax(axis=-2)
    share = mag.max(axis=-2) / np.maximum(mag.sum(axis=-2), 1e-300)
    return win, share


def event_e(win: Int[np.ndarray, "seed feature"]) -> Bool[np.ndarray, " seed"]:
    """E: the conflicting feature's (U, index 0) winner wins neither task-specific feature."""
    e: Bool[np.ndarray, " seed"] = (win[:, 0] != win[:, 1]) & (win[:, 0] != win[:, 2])
    return e


@dataclass(frozen=True)
class Deletion:
    """Both risks of each seed before and after its head was removed."""

    before_a: Float[np.ndarray, " seed"]
    before_b: Float[np.ndarray, " seed"]
    after_a: Float[np.ndarray, " seed"]
    after_b: Float[np.ndarray, " seed"]

    @property
    def delta_a(self) -> Float[np.ndarray, " seed"]:
        delta: Float[np.ndarray, " seed"] = self.after_a - self.before_a
        return delta

    @property
    def delta_b(self) -> Float[np.ndarray, " seed"]:
        delta: Float[np.ndarray, " seed"] = self.after_b - self.before_b
        return delta

    @property
    def delta_joint(self) -> Float[np.ndarray, " seed"]:
        joint: Float[np.ndarray, " seed"] = (self.delta_a + self.delta_b) / 4
        return joint


def delete_head(c: Float[np.ndarray, "seed head_index feature"], head: Int[np.ndarray, " seed"],
                setting: Setting) -> Deletion:
    """Remove head ``head[s]`` from seed s (nothing else changes) and measure both risks."""
    w = c.sum(axis=-2)
    removed = c[np.arange(len(c)), head]
    before_a, before_b = risks(w, setting)
    after_a, after_b = risks(w - removed, setting)
    return Deletion(*(np.asarray(r) for r in (before_a, before_b, after_a, after_b)))  # arrays: w is [seed, feature]


__all__ = ["Deletion", "TrainResult", "delete_head", "event_e", "init", "joint", "train", "winners"]
