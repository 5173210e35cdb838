"""The paper's Section 4 model: one attention layer, H heads, F features, diagonal
projections; the effective coefficient of head h on feature j is
``c_hj = o_hj · v_hj · tanh(q_hj · k_hj)`` and the prediction is ``⟨Σ_h c_h, x⟩``.

Two forms: the closed form (risks and gradients of Proposition 4.1, vectorised over
seeds, numpy), and the literal softmax attention over each feature's ± memory pair,
whose population risk enumerates every ±1 input (torch, autograd).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np


@dataclass(frozen=True)
class Setting:
    """Task A: input (U, V, 0), target bV. Task B: input (U, 0, W), target aU + cW."""

    a: float = 1.0
    b: float = 1.0
    c: float = 1.0
    n_heads: int = 3

    @property
    def t(self) -> float:
        return self.a / 2

    @property
    def optimum(self) -> np.ndarray:
        return np.array([self.a / 2, self.b, self.c])

    # each task: (input mask over features, target coefficients)
    def tasks(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        return {"A": (np.array([1.0, 1.0, 0.0]), np.array([0.0, self.b, 0.0])),
                "B": (np.array([1.0, 0.0, 1.0]), np.array([self.a, 0.0, self.c]))}


N_FEATURES = 3
PARAMS = ("q", "k", "v", "o")


def coefficients(theta: np.ndarray) -> np.ndarray:
    """``theta`` [..., 4, H, F] (q, k, v, o) -> c [..., H, F]."""
    q, k, v, o = (theta[..., i, :, :] for i in range(4))
    return o * v * np.tanh(q * k)


def risks(w: np.ndarray, s: Setting) -> tuple[np.ndarray | np.floating, np.ndarray | np.floating]:
    """Population square risks of Proposition 4.1 for aggregate ``w`` [..., 3]."""
    r_a = w[..., 0] ** 2 + (w[..., 1] - s.b) ** 2
    r_b = (w[..., 0] - s.a) ** 2 + (w[..., 2] - s.c) ** 2
    return r_a, r_b


def joint(w: np.ndarray, s: Setting) -> np.ndarray | np.floating:
    r_a, r_b = risks(w, s)
    return (r_a + r_b) / 4


def grad_joint(theta: np.ndarray, s: Setting) -> np.ndarray:
    """∂J/∂θ in closed form, same shape as ``theta``."""
    q, k, v, o = (theta[..., i, :, :] for i in range(4))
    th = np.tanh(q * k)
    w = (o * v * th).sum(axis=-2)  # [..., F]
    dw = np.stack([(2 * w[..., 0] + 2 * (w[..., 0] - s.a)) / 4, 2 * (w[..., 1] - s.b) / 4, 2 * (w[..., 2] - s.c) / 4], axis=-1)
    dw = dw[..., None, :]  # broadcast over heads
    sech2 = 1 - th ** 2
    return np.stack([dw * o * v * sech2 * k, dw * o * v * sech2 * q, dw * o * th, dw * v * th], axis=-3)


def literal_risks(theta, s: Setting):
    """Risks of the literal attention model (torch float64 tensors; differentiable).

    For each feature j, the query token ``x_j e_j`` attends, under the shared mask, only
    to the memory pair ``{+e_j, −e_j}``; head h has diagonal ``W_Q = diag(q_h)``,
    ``W_K = diag(k_h)``, ``W_V = diag(v_h)``, ``W_O = diag(o_h)``; the prediction sums
    every head's output over the feature slots.
    """
    import torch

    q, k, v, o = theta[0], theta[1], theta[2], theta[3]  # [H, F]
    n_feat = q.shape[-1]
    eye = torch.eye(n_feat, dtype=theta.dtype)
    memory = torch.cat([eye, -eye])  # 2F memory tokens: +e_j then -e_j
    feature_of = torch.cat([torch.arange(n_feat), torch.arange(n_feat)])
    mask = torch.where(feature_of[None, :] == torch.arange(n_feat)[:, None], 0.0, float("-inf")).to(theta.dtype)  # [F, 2F]
    out = {}
    for name, (inputs, target) in s.tasks().items():
        active = [j for j in range(n_feat) if inputs[j]]
        losses = []
        for signs in product((-1.0, 1.0), repeat=len(active)):
            x = torch.zeros(n_feat, dtype=theta.dtype)
            x[active] = torch.tensor(signs, dtype=theta.dtype)
            queries = x[:, None] * eye  # slot j holds x_j e_j
            pred = torch.zeros((), dtype=theta.dtype)
            for h in range(q.shape[0]):
                scores = (queries * q[h]) @ (memory * k[h]).T + mask  # [F, 2F]
                attn = torch.softmax(scores, dim=-1)
                head_out = (attn @ (memory * v[h])) * o[h]  # [F slots, F dims]
                pred = pred + head_out.sum()
            y = float((np.asarray(target) * x.numpy()).sum())
            losses.append((pred - y) ** 2)
        out[name] = torch.stack(losses).mean()
    return out["A"], out["B"]
