"""Full-batch gradient descent on the closed form, vectorised over seeds; winners; event E;
head deletion."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from celtk.theory._model import Setting, coefficients, grad_joint, joint, risks


@dataclass(frozen=True)
class TrainResult:
    theta: np.ndarray  # [S, 4, H, F]
    converged: np.ndarray  # bool [S]
    diverged: np.ndarray  # bool [S]
    steps: np.ndarray  # steps taken per seed
    trajectory: np.ndarray | None  # [T, S_keep, H, F] coefficients, when recorded
    snapshots: dict[int, np.ndarray] | None = None  # step -> c [S, H, F] of every seed, at the requested checkpoints

    @property
    def c(self) -> np.ndarray:
        return coefficients(self.theta)

    @property
    def w(self) -> np.ndarray:
        return self.c.sum(axis=-2)


def init(n_seeds: int, setting: Setting, alpha: float, seed: int = 0) -> np.ndarray:
    """θ ~ α · N(0, 1), no sign conditioning, tying or rebalancing."""
    rng = np.random.default_rng(seed)
    return alpha * rng.standard_normal((n_seeds, 4, setting.n_heads, 3))


def train(theta0: np.ndarray, setting: Setting, lr: float, max_steps: int = 200_000, tol: float = 1e-9,
          record_every: int = 0, record_seeds: int = 4, checkpoints: tuple[int, ...] = ()) -> TrainResult:
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
    frames: list[np.ndarray] = []
    snapshots: dict[int, np.ndarray] | None = {} if checkpoints else None
    with np.errstate(over="ignore", invalid="ignore"):  # divergence is detected below, not warned about
        return _descend(theta, setting, lr, max_steps, tol, record_every, record_seeds, active, converged, diverged,
                        steps, frames, snapshots, set(checkpoints))


def _descend(theta, setting, lr, max_steps, tol, record_every, record_seeds, active, converged, diverged, steps,
             frames, snapshots, checkpoints) -> TrainResult:
    for step in range(max_steps):
        if record_every and step % record_every == 0:
            frames.append(coefficients(theta[:record_seeds]))
        if step in checkpoints:
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
    for step in checkpoints - set(snapshots or ()):
        snapshots[step] = coefficients(theta)  # past the last step: every seed has stopped
    return TrainResult(theta, converged, diverged, steps, np.array(frames) if frames else None, snapshots)


def winners(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per seed and feature: the head with the largest |c_hj|, and its share of Σ_h |c_hj|."""
    mag = np.abs(c)
    win = mag.argmax(axis=-2)
    share = mag.max(axis=-2) / np.maximum(mag.sum(axis=-2), 1e-300)
    return win, share


def event_e(win: np.ndarray) -> np.ndarray:
    """E: the conflicting feature's (U, index 0) winner wins neither task-specific feature."""
    return (win[:, 0] != win[:, 1]) & (win[:, 0] != win[:, 2])


@dataclass(frozen=True)
class Deletion:
    before_a: np.ndarray
    before_b: np.ndarray
    after_a: np.ndarray
    after_b: np.ndarray

    @property
    def delta_a(self) -> np.ndarray:
        return self.after_a - self.before_a

    @property
    def delta_b(self) -> np.ndarray:
        return self.after_b - self.before_b

    @property
    def delta_joint(self) -> np.ndarray:
        return (self.delta_a + self.delta_b) / 4


def delete_head(c: np.ndarray, head: np.ndarray, setting: Setting) -> Deletion:
    """Remove head ``head[s]`` from seed s (nothing else changes) and measure both risks."""
    w = c.sum(axis=-2)
    removed = c[np.arange(len(c)), head]
    before_a, before_b = risks(w, setting)
    after_a, after_b = risks(w - removed, setting)
    return Deletion(*(np.asarray(r) for r in (before_a, before_b, after_a, after_b)))  # arrays: w is [S, F]


__all__ = ["Deletion", "TrainResult", "delete_head", "event_e", "init", "joint", "train", "winners"]
