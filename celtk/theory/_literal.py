"""The literal form of the Section 4 model (torch, autograd): softmax attention over each
feature's ± memory pair, whose population risk enumerates every ±1 input. The tests check it
equals the closed form of :mod:`celtk.theory._model`, risks and gradients.

Its own module so that ``import celtk.theory`` does not import torch: ``celtk.theory.literal_risks``
loads it on first use.
"""

from __future__ import annotations

from itertools import product

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from celtk.theory._model import Setting


def literal_risks(theta: Float[Tensor, "4 head_index feature"], s: Setting
                  ) -> tuple[Float[Tensor, ""], Float[Tensor, ""]]:
    """Risks R_A, R_B of the literal attention model with parameters ``theta`` (q, k, v, o; float64,
    differentiable).

    For each feature j, the query token ``x_j e_j`` attends, under the shared mask, only
    to the memory pair ``{+e_j, −e_j}``; head h has diagonal ``W_Q = diag(q_h)``,
    ``W_K = diag(k_h)``, ``W_V = diag(v_h)``, ``W_O = diag(o_h)``; the prediction sums
    every head's output over the feature slots.
    """
    q, k, v, o = theta[0], theta[1], theta[2], theta[3]  # [head_index, feature]
    n_feat = q.shape[-1]
    eye = torch.eye(n_feat, dtype=theta.dtype)
    memory = torch.cat([eye, -eye])  # 2F memory tokens: +e_j then -e_j
    feature_of = torch.cat([torch.arange(n_feat), torch.arange(n_feat)])
    mask = torch.where(feature_of[None, :] == torch.arange(n_feat)[:, None], 0.0,
                       float("-inf")).to(theta.dtype)  # [F, 2F]
    per_task = []  # R_A, R_B: the order of Setting.tasks()
    for inputs, target in s.tasks().values():
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
        per_task.append(torch.stack(losses).mean())
    r_a, r_b = per_task
    return r_a, r_b
