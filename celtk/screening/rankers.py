"""Rankers: cheap proxies that order heads for the candidate pool without scoring each one exactly, compared
with the exhaustive single-head screen (which stays the default). Each is registered in
:data:`celtk.screening.registry.RANKERS` as a function ``(inputs: RankerInput, *, masks, rate, seed, **options)
-> RankerResult`` that ignores options it does not use; ``celtk altscreen --method NAME`` runs one on a screened run.

* :func:`gradient_scores` — head importance from the gradient of the task loss with respect to
  a per-head output gate (Michel et al. 2019): one forward and one backward pass per batch.
  We keep the sign: removing head ``h`` moves its gate from 1 to 0, changing the loss by about
  ``-∂L/∂g_h``, so a positive ``∂L/∂g_h`` predicts that removal helps. (Michel et al. rank by
  ``|∂L/∂g_h|``, which finds important heads but cannot tell helpful from harmful.)
* :func:`lasso_scores` — random multi-head knockouts (Bair et al. 2026): score the task under
  many random masks, regress accuracy on the mask with an L1 penalty chosen by K-fold
  cross-validation; a positive coefficient marks a head whose removal helps.
* :func:`compare_rankings` — overlap and rank correlation of a ranker's top-p pool with the
  exhaustive screen's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from jaxtyping import Bool, Float, Float64
from scipy.stats import spearmanr
from torch import Tensor

from celtk.ablation import hook_z_hooks
from celtk.errors import ConfigError
from celtk.evaluation.prompts import Prepared
from celtk.evaluation.scoring import Batch, decoder_hidden, make_batches, score_hidden
from celtk.heads import Head, HeadSet
from celtk.models import Model
from celtk.search.scores import HeadScore, rank


@dataclass(frozen=True)
class RankerResult:
    """Per-head scores (higher = removal predicted to help more) and the ranker's cost."""

    method: str
    scores: dict[Head, float]
    n_evaluations: int  # forward passes over the discovery set (masks), or forward+backward sweeps
    seconds: float
    details: dict[str, object] = field(default_factory=dict)

    def ranked(self) -> list[Head]:
        return sorted(self.scores, key=lambda h: (-self.scores[h], h))


@dataclass(frozen=True)
class RankerInput:
    """What a ranker may read from a screened run (:func:`celtk.run.altscreen.run_altscreen` builds one); each
    ranker reads only what it needs, and the costly parts are built on first use."""

    model: Model
    heads: tuple[Head, ...]  # the single heads the screen scored, in its order
    ablation: str  # the run's ablation kind as configured: "zero", "mean", "resample" or "scale:α"
    batch_size: int  # the run's batch size (8 where the run sizes its batches automatically)
    discovery: Callable[[], Prepared]  # the tokenised discovery set
    evaluate: Callable[[list[HeadSet]], Mapping[HeadSet, Bool[np.ndarray, " example"]]]  # correctness under each set,
    # scored under the run's ablation kind through the run's set memo (an interrupted ranker resumes)


Ranker = Callable[..., RankerResult]  # (inputs: RankerInput, *, masks, rate, seed, **options) -> RankerResult


def gradient_ranker(inputs: RankerInput, **_: object) -> RankerResult:
    """Signed per-head gate gradients (:func:`gradient_scores`), one backward pass; zero ablation only."""
    if inputs.ablation != "zero":
        raise ConfigError(f"The gradient screener predicts zeroing (a head's gate moved from 1 to 0), and this run "
                          f"screened under {inputs.ablation} ablation, so the two would rank different "
                          "interventions. Compare it on a zero run, "
                          "or use --method lasso (scored under the run's kind).")
    return gradient_scores(inputs.model, inputs.discovery(), batch_size=inputs.batch_size)


def lasso_ranker(inputs: RankerInput, *, masks: int = 200, rate: float = 0.05, seed: int = 0,
                 **_: object) -> RankerResult:
    """LASSO over ``masks`` random multi-head knockouts at ``rate`` (:func:`lasso_scores`), scored through
    ``inputs.evaluate``."""
    return lasso_scores(inputs.evaluate, list(inputs.heads), n_masks=masks, rate=rate, seed=seed)


# ---------------------------------------------------------------------------------------------
# Gradient of the task loss with respect to per-head gates


def task_loss_terms(model: Model, prepared: Prepared, hidden_fn: Callable[[Batch], Float[Tensor, "batch pos d_model"]],
                    batch_size: int) -> Float64[Tensor, " request"]:
    """Summed per-request target log-probabilities, differentiable (used by the gradient screener)."""
    requests = prepared.requests
    lp = torch.zeros(len(requests), dtype=torch.float64)
    for batch in make_batches(requests, batch_size, model.tokenizer.pad_token_id):
        per_request, _ = score_hidden(model, hidden_fn(batch), batch)  # differentiable in the hidden states
        lp = lp.index_add(0, torch.tensor(batch.request_ids), per_request)
    return lp


def _example_loss(prepared: Prepared, lp: Float64[Tensor, " request"]) -> Float[Tensor, ""]:
    """Mean task loss: −log p(target) for generative targets; for multiple choice, the cross-entropy
    of the correct choice among the choices (log-likelihoods per character when the task scores
    acc_norm)."""
    by_example: dict[int, list[int]] = {}
    for r, req in enumerate(prepared.requests):
        by_example.setdefault(req.example, []).append(r)
    losses = []
    for i, example in enumerate(prepared.examples):
        rids = by_example[i]
        if prepared.kind == "target":
            losses.append(-lp[rids[0]])
            continue
        lls = lp[rids]
        if prepared.normalize:
            lls = lls / torch.tensor([len(c) for c in example.choices or ()], dtype=lls.dtype)
        losses.append(-(lls[example.label] - torch.logsumexp(lls, dim=0)))
    return torch.stack(losses).mean()


def gate_loss(model: Model, prepared: Prepared, gates: Float[Tensor, "layer head_index"], batch_size: int = 16
              ) -> Float[Tensor, ""]:
    """The mean task loss with each head's ``hook_z`` output multiplied by ``gates[layer, head]``."""
    def gate_hook(layer: int) -> Callable[..., Float[Tensor, "batch pos head_index d_head"]]:
        def hook(z: Float[Tensor, "batch pos head_index d_head"], hook: object
                 ) -> Float[Tensor, "batch pos head_index d_head"]:
            return z * gates[layer].to(z.dtype)[None, None, :, None]
        return hook

    with hook_z_hooks(model, {layer: gate_hook(layer) for layer in range(model.n_layers)}):
        lp = task_loss_terms(model, prepared, lambda b: decoder_hidden(model, b.input_ids, b.attention_mask),
                             batch_size)
    return _example_loss(prepared, lp)


def gradient_scores(model: Model, prepared: Prepared, batch_size: int = 16) -> RankerResult:
    """Signed gate gradient ``∂L/∂g_h`` at ``g = 1`` for every head, in one backward pass."""
    if prepared.kind == "generate":
        raise ConfigError("The gradient screener needs a differentiable loss on fixed targets or choices, and a "
                          "generation-graded task has none; rank heads with the lasso screener (`celtk altscreen OUT "
                          "--method lasso`) or the exhaustive screen (`celtk screen`), which grade generations.")
    start = time.perf_counter()
    gates = torch.ones(model.n_layers, model.n_heads, dtype=torch.float32, device=model.device, requires_grad=True)
    with torch.enable_grad():
        loss = gate_loss(model, prepared, gates, batch_size)
        (grad,) = torch.autograd.grad(loss, gates)
    signed = grad.detach().cpu().double().numpy()
    scores = {Head(l, h): float(signed[l, h]) for l in range(model.n_layers) for h in range(model.n_heads)}
    return RankerResult("gradient", scores, 1, time.perf_counter() - start,
                          {"loss": float(loss.detach()), "sign": "positive = removal predicted to lower the task loss"})


# ---------------------------------------------------------------------------------------------
# LASSO over random knockout masks


def lasso_fit(x: Float[np.ndarray, "row column"], y: Float[np.ndarray, " row"], alpha: float, n_iter: int = 2000,
              tol: float = 1e-9) -> tuple[float, Float[np.ndarray, " column"]]:
    """Coordinate descent for ``min (1/2n)‖y − b − Xβ‖² + α‖β‖₁``; returns ``(b, β)``."""
    n, d = x.shape
    x_mean, y_mean = x.mean(0), y.mean()
    xc, yc = x - x_mean, y - y_mean
    norms = (xc ** 2).sum(0) / n
    beta = np.zeros(d)
    residual = yc.copy()
    for _ in range(n_iter):
        largest = 0.0
        for j in range(d):
            if norms[j] == 0:
                continue
            old = beta[j]
            rho = xc[:, j] @ residual / n + norms[j] * old
            new = np.sign(rho) * max(abs(rho) - alpha, 0.0) / norms[j]
            if new != old:
                residual -= xc[:, j] * (new - old)
                beta[j] = new
                largest = max(largest, abs(new - old))
        if largest < tol:
            break
    return float(y_mean - x_mean @ beta), beta


def lasso_cv(x: Float[np.ndarray, "row column"], y: Float[np.ndarray, " row"], n_folds: int = 5, n_alphas: int = 25,
             seed: int = 0) -> tuple[float, Float[np.ndarray, " column"], dict[str, object]]:
    """Choose α by K-fold cross-validated squared error on a log grid; refit on all rows."""
    n = len(y)
    xc, yc = x - x.mean(0), y - y.mean()
    alpha_max = float(np.abs(xc.T @ yc).max() / n) or 1e-12
    alphas = alpha_max * np.logspace(0, -3, n_alphas)
    folds = np.random.default_rng(seed).permutation(n) % n_folds
    errors = np.zeros(n_alphas)
    for fold in range(n_folds):
        train, test = folds != fold, folds == fold
        for i, alpha in enumerate(alphas):
            b, beta = lasso_fit(x[train], y[train], alpha, n_iter=500)
            errors[i] += ((y[test] - b - x[test] @ beta) ** 2).sum()
    best = int(np.argmin(errors))
    b, beta = lasso_fit(x, y, alphas[best])
    return float(alphas[best]), beta, {"alphas": alphas.tolist(), "cv_mse": (errors / n).tolist(), "intercept": b}


def random_masks(heads: Sequence[Head], n_masks: int, rate: float, seed: int) -> list[HeadSet]:
    """``n_masks`` distinct random knockouts, each head in each with probability ``rate`` (never empty)."""
    if not 0 < rate < 1:
        raise ConfigError(f"Knockout rate must be between 0 and 1, got {rate}.")
    rng = np.random.default_rng(seed)
    masks: dict[HeadSet, None] = {}
    attempts = 0
    while len(masks) < n_masks and attempts < 100 * n_masks:
        attempts += 1
        chosen = [h for h, keep in zip(heads, rng.random(len(heads)) < rate, strict=True) if keep]
        if chosen:
            masks.setdefault(HeadSet(tuple(chosen)), None)
    return list(masks)


LASSO_FOLDS = 5  # the cross-validation folds that choose the penalty: each needs a mask


def lasso_scores(evaluate: Callable[[list[HeadSet]], Mapping[HeadSet, Bool[np.ndarray, " example"]]],
                 heads: Sequence[Head], n_masks: int = 200, rate: float = 0.05, seed: int = 0,
                 n_folds: int = LASSO_FOLDS) -> RankerResult:
    """Score ``n_masks`` random knockouts with ``evaluate`` (per-example correctness), regress accuracy
    on the masks; the coefficients (accuracy change per removed head) are the scores.

    Raises :class:`ConfigError` where no ranking exists: fewer distinct masks than folds, masks that all
    score alike, or a fit that keeps no head (every score 0, so a top-p pool would be the heads' order)."""
    start = time.perf_counter()
    heads = sorted(heads)
    masks = random_masks(heads, n_masks, rate, seed)
    if len(masks) < n_folds:
        raise ConfigError(f"LASSO chooses its penalty by {n_folds}-fold cross-validation, so it needs at least "
                          f"{n_folds} distinct masks; {n_masks} asked at rate {rate} over {len(heads)} heads gave "
                          f"{len(masks)}. Use --masks ≥ {n_folds} (default 200).")
    outcomes = evaluate(masks)
    index = {h: i for i, h in enumerate(heads)}
    x = np.zeros((len(masks), len(heads)))
    for row, mask in enumerate(masks):
        x[row, [index[h] for h in mask.heads]] = 1.0
    y = np.array([outcomes[m].mean() for m in masks])
    if np.ptp(y) == 0:
        raise ConfigError(f"LASSO found no ranking: all {len(masks)} masks score the same accuracy "
                          f"({float(y[0]):.1%}), so no head's removal is told from another's. Use more masks "
                          "(--masks, default 200) or a higher --rate, or a discovery set the model partly solves.")
    alpha, beta, details = lasso_cv(x, y, n_folds=n_folds, seed=seed)
    if not beta.any():
        raise ConfigError(f"LASSO found no ranking: cross-validation over {len(masks)} masks kept no head (every "
                          f"coefficient 0 at α = {alpha:.3g}), so the masks' accuracies are not explained by any "
                          "head. Use more masks (--masks, default 200) or a higher --rate.")
    scores = {h: float(beta[index[h]]) for h in heads}
    return RankerResult("lasso", scores, len(masks), time.perf_counter() - start,
                          {"alpha": alpha, "n_masks": len(masks), "rate": rate, "mean_mask_accuracy": float(y.mean()),
                           "n_nonzero": int((beta != 0).sum()), **details})


# ---------------------------------------------------------------------------------------------


def compare_rankings(exhaustive: Sequence[HeadScore], result: RankerResult, p: int = 10) -> dict[str, object]:
    """How a screener's top-p pool relates to the exhaustive screen's: overlap (and the overlap
    two random pools would have), Jaccard, Spearman correlation over all heads, and where the
    exhaustive pool's heads fall in the screener's ranking."""
    ranked = [next(iter(s.heads.heads)) for s in rank(exhaustive)]
    theirs = result.ranked()
    mine, other = set(ranked[:p]), set(theirs[:p])
    n = len(ranked)
    exhaustive_gain = {next(iter(s.heads.heads)): s.gain for s in exhaustive}
    heads = sorted(exhaustive_gain)
    rho = spearmanr([exhaustive_gain[h] for h in heads], [result.scores[h] for h in heads]).statistic
    position = {h: i for i, h in enumerate(theirs)}
    return {
        "method": result.method, "p": p, "overlap": len(mine & other), "chance_overlap": p * p / n,
        "jaccard": len(mine & other) / len(mine | other), "spearman": float(rho) if rho == rho else None,
        "exhaustive_pool": [str(h) for h in ranked[:p]], "screener_pool": [str(h) for h in theirs[:p]],
        "screener_rank_of_exhaustive_pool": {str(h): position[h] + 1 for h in ranked[:p]},
        "n_evaluations": result.n_evaluations, "seconds": result.seconds,
    }


__all__ = ["Ranker", "RankerInput", "RankerResult", "compare_rankings", "gate_loss", "gradient_ranker",
           "gradient_scores", "LASSO_FOLDS", "lasso_cv", "lasso_fit", "lasso_ranker", "lasso_scores", "random_masks"]
