"""The paper's Section 4 model: one attention layer, H heads, F features, diagonal
projections; the effective coefficient of head h on feature j is
``c_hj = o_hj · v_hj · tanh(q_hj · k_hj)`` and the prediction is ``⟨Σ_h c_h, x⟩``.

Two forms: the closed form here (risks and gradients of Proposition 4.1, vectorised over
seeds, numpy), and the literal softmax attention over each feature's ± memory pair, whose
population risk enumerates every ±1 input (:mod:`celtk.theory._literal`, torch, autograd).

Shapes: ``theta`` is ``[*seed, 4, head_index, feature]`` (q, k, v, o), the coefficients
``c`` are ``[*seed, head_index, feature]`` and the aggregate ``w = Σ_h c_h`` is ``[*seed, feature]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from jaxtyping import Float

from celtk.store.documents import Record


@dataclass(frozen=True)
class Setting(Record):
    """Task A: input (U, V, 0), target bV. Task B: input (U, 0, W), target aU + cW.
    A record: it is written as ``{"a", "b", "c", "n_heads"}`` in ``theory.json``."""

    a: float = 1.0
    b: float = 1.0
    c: float = 1.0
    n_heads: int = 3

    @property
    def t(self) -> float:
        return self.a / 2

    @property
    def optimum(self) -> Float[np.ndarray, " feature"]:
        return np.array([self.a / 2, self.b, self.c])

    # each task: (input mask over features, target coefficients)
    def tasks(self) -> dict[str, tuple[Float[np.ndarray, " feature"], Float[np.ndarray, " feature"]]]:
        return {"A": (np.array([1.0, 1.0, 0.0]), np.array([0.0, self.b, 0.0])),
                "B": (np.array([1.0, 0.0, 1.0]), np.array([self.a, 0.0, self.c]))}


N_FEATURES = 3
PARAMS = ("q", "k", "v", "o")


def coefficients(theta: Float[np.ndarray, "*seed 4 head_index feature"]
                 ) -> Float[np.ndarray, "*seed head_index feature"]:
    """The effective coefficients ``c = o · v · tanh(q · k)`` of ``theta``'s (q, k, v, o)."""
    q, k, v, o = (theta[..., i, :, :] for i in range(4))
    c: Float[np.ndarray, "*seed head_index feature"] = o * v * np.tanh(q * k)
    return c


def risks(w: Float[np.ndarray, "*seed feature"], s: Setting
          ) -> tuple[Float[np.ndarray, "*seed"] | float, Float[np.ndarray, "*seed"] | float]:
    """Population square risks of Proposition 4.1 for the aggregate ``w`` (a float for one ``w``)."""
    r_a = w[..., 0] ** 2 + (w[..., 1] - s.b) ** 2
    r_b = (w[..., 0] - s.a) ** 2 + (w[..., 2] - s.c) ** 2
    return r_a, r_b


def joint(w: Float[np.ndarray, "*seed feature"], s: Setting) -> Float[np.ndarray, "*seed"] | float:
    r_a, r_b = risks(w, s)
    return (r_a + r_b) / 4


def grad_joint(theta: Float[np.ndarray, "*seed 4 head_index feature"], s: Setting
               ) -> Float[np.ndarray, "*seed 4 head_index feature"]:
    """∂J/∂θ in closed form, same shape as ``theta``."""
    q, k, v, o = (theta[..., i, :, :] for i in range(4))
    th = np.tanh(q * k)
    w = (o * v * th).sum(axis=-2)  # [*seed, feature]
    dw = np.stack([(2 * w[..., 0] + 2 * (w[..., 0] - s.a)) / 4, 2 * (w[..., 1] - s.b) / 4,
                   2 * (w[..., 2] - s.c) / 4], axis=-1)
    dw = dw[..., None, :]  # broadcast over heads
    sech2 = 1 - th ** 2
    return np.stack([dw * o * v * sech2 * k, dw * o * v * sech2 * q, dw * o * th, dw * v * th], axis=-3)
