"""Open heads up in a notebook: what a head set does to examples, and what one head does on one
prompt. Everything returns data (dataclasses, numpy arrays); nothing prints.

    >>> import celtk
    >>> task = celtk.get_task("arithmetic:2da")
    >>> splits = celtk.make_splits(task, 0, 50, seed=1, fewshot=3)
    >>> prompt, answer = splits.heldout[0].context, splits.heldout[0].target
    >>> model = celtk.load_model("smollm2-135m")                                  # doctest: +SKIP
    >>> eff = celtk.probe.effect(model, task, splits.heldout, splits.shots, "L1H2,L14H8")  # doctest: +SKIP
    >>> eff.fixes[:3], eff.summary.gain                                           # doctest: +SKIP
    >>> att = celtk.probe.attention(model, prompt, "L14H8")                        # doctest: +SKIP
    >>> dla = celtk.probe.direct_logit_attribution(model, prompt, answer, "L14H8")  # doctest: +SKIP
    >>> figure = celtk.probe.plot_attention(model, prompt, "L14H8", last=30)        # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from einops import einsum
from jaxtyping import Float, Int
from torch import Tensor

from celtk.ablation import ablate
from celtk.ablation_kinds import Ablation
from celtk.errors import TaskError
from celtk.evaluation import evaluate
from celtk.evaluation.prompts import encode_pair
from celtk.evaluation.results import EvalConfig, EvalResult
from celtk.heads import Head, HeadSet, all_heads, as_head_set
from celtk.models import Model
from celtk.stats import PairedComparison, compare_paired
from celtk.tasks import Example, Task, lone_surrogate

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class ExampleEffect:
    id: str
    intact_correct: bool
    ablated_correct: bool
    intact_logprob: float  # summed target log-probability (or the correct choice's log-likelihood)
    ablated_logprob: float

    @property
    def delta_logprob(self) -> float:
        return self.ablated_logprob - self.intact_logprob


@dataclass(frozen=True)
class Effect:
    heads: HeadSet
    examples: list[ExampleEffect]
    summary: PairedComparison

    @property
    def fixes(self) -> list[str]:
        """Examples wrong intact and right with the heads removed."""
        return [e.id for e in self.examples if e.ablated_correct and not e.intact_correct]

    @property
    def breaks(self) -> list[str]:
        """Examples right intact and wrong with the heads removed."""
        return [e.id for e in self.examples if e.intact_correct and not e.ablated_correct]


def _correct_logprob(result: EvalResult, examples: Sequence[Example]) -> list[float]:
    out = []
    for r, ex in zip(result.examples, examples, strict=True):
        if r.logprob is None:  # graded by generation, which effect() refuses before scoring
            raise TaskError(f"Example {ex.id} was graded by generation and has no log-probability to compare.")
        if not isinstance(r.logprob, list):
            out.append(float(r.logprob))
        elif ex.label is None:
            raise TaskError(f"Example {ex.id} has choices but no label; a multiple-choice example needs its "
                            "answer's index.")
        else:
            out.append(float(r.logprob[ex.label]))
    return out


def effect(model: Model, task: Task, examples: Sequence[Example], shots: Sequence[Example] = (),
           heads: HeadSet | str = "", batch_size: int = 16, n_boot: int = 2000, seed: int = 0,
           ablation: Ablation | str | None = None) -> Effect:
    """Per-example correctness and target log-probability, intact vs with ``heads`` removed (as ``ablation``
    says: zero by default, ``"scale:α"``, or mean/resample values from :func:`celtk.evaluation.scoring.ablation_for`),
    the examples fixed and broken, and the paired comparison (gain, McNemar p, bootstrap CI)."""
    heads = as_head_set(heads)
    if task.kind == "generate":
        raise TaskError("probe.effect scores fixed targets or choices; use celtk.evaluate for generation tasks.")
    config = EvalConfig(batch_size=batch_size)
    intact = evaluate(model, task, examples, shots, config=config)
    ablated = evaluate(model, task, examples, shots, heads=heads, config=config, ablation=ablation)
    rows = [ExampleEffect(i.id, i.correct, a.correct, li, la) for i, a, li, la in
            zip(intact.examples, ablated.examples, _correct_logprob(intact, examples),
                _correct_logprob(ablated, examples), strict=True)]
    return Effect(heads, rows, compare_paired(intact.correct, ablated.correct, n_boot=n_boot, seed=seed))


def _encodable(name: str, text: str) -> str:
    """``text``, refused if it holds a lone UTF-16 surrogate (``"\\ud800"``), which no tokenizer can encode."""
    at = lone_surrogate(text)
    if at is not None:
        raise TaskError(f"The {name} holds a lone surrogate {text[at]!r} at character {at} (half of a UTF-16 pair); "
                        "write the character itself or its whole pair.")
    return text


def _encode(model: Model, prompt: str) -> Int[Tensor, "1 pos"]:
    ids: Int[Tensor, "1 pos"] = model.tokenizer(_encodable("prompt", prompt), return_tensors="pt").input_ids
    return ids.to(model.device)


def tokens(model: Model, prompt: str) -> list[str]:
    return [model.tokenizer.decode([t]) for t in _encode(model, prompt)[0].tolist()]


@dataclass(frozen=True)
class AttentionPattern:
    head: Head
    tokens: list[str]
    pattern: Float[np.ndarray, "query_pos key_pos"]  # rows sum to 1, causal

    def top_keys(self, query: int = -1, n: int = 5) -> list[tuple[int, str, float]]:
        row = self.pattern[query]
        order = np.argsort(-row)[:n]
        return [(int(k), self.tokens[k], float(row[k])) for k in order]


def attention(model: Model, prompt: str, head: Head | str) -> AttentionPattern:
    """The head's attention pattern on ``prompt`` (query × key), with the tokens."""
    head = Head.parse(head) if isinstance(head, str) else head
    head.validate(model.n_layers, model.n_heads)
    name = f"blocks.{head.layer}.attn.hook_pattern"
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(_encode(model, prompt), names_filter=lambda n: n == name)
    return AttentionPattern(head, tokens(model, prompt), cache[name][0, head.head].float().cpu().numpy())


def plot_attention(model: Model, prompt: str, head: Head | str, *, last: int | None = None, ax: Axes | None = None
                   ) -> Figure:
    """A heatmap of ``head``'s attention pattern on ``prompt`` (:func:`attention`): queries down, keys across,
    each labelled with its token. ``last``: show only the last ``last`` positions (queries and keys; a few-shot
    prompt is long). ``ax``: a matplotlib Axes to draw on; by default a new figure, closed in pyplot, so a
    notebook shows the returned figure once (and a script saves it with ``figure.savefig``)."""
    if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 1):
        raise TaskError(f"plot_attention: last must be a positive number of positions (or None: all), got {last!r}.")
    pattern = attention(model, prompt, head)
    start = 0 if last is None else max(0, len(pattern.tokens) - last)
    shown, labels = pattern.pattern[start:, start:], [repr(t)[1:-1] for t in pattern.tokens[start:]]
    if ax is None:
        # matplotlib only when a figure is asked for (celtk.probe imports without it); pyplot, so that a notebook's
        # inline backend displays the figure
        import matplotlib.pyplot as plt

        size = min(12.0, 2.0 + 0.22 * len(labels))
        opened, ax = plt.subplots(figsize=(size + 1.0, size))
        plt.close(opened)
    image = ax.imshow(shown, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(f"{pattern.head} attention" + (f", last {len(labels)} of {len(pattern.tokens)} tokens"
                                                 if start else ""))
    figure = ax.get_figure(root=True)
    if figure is None:  # an Axes not placed in a figure has nowhere to draw
        raise TaskError("plot_attention: ax belongs to no figure; pass an Axes from a figure (fig.add_subplot()).")
    figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return figure


def _final_norm_factor(model: Model, resid: Float[Tensor, "*pos d_model"]) -> Float[Tensor, "*pos d_model"]:
    """The final norm at these residuals as an elementwise factor (exact for RMSNorm with the
    scale frozen at its value here, the usual convention for direct logit attribution)."""
    normed: Float[Tensor, "*pos d_model"] = model.arch.final_norm(resid)
    return normed / resid


def _ids(model: Model, prompt: str | list[int]) -> Int[Tensor, "1 pos"]:
    if isinstance(prompt, str):
        return _encode(model, prompt)
    return torch.tensor([prompt], device=model.device)


def head_outputs(model: Model, prompt: str | list[int], position: int = -1
                 ) -> tuple[Float[Tensor, "layer head_index d_model"], Float[Tensor, " d_model"],
                            Float[Tensor, "layer d_model"]]:
    """Each head's write into the residual stream at ``position``, plus the final residual there
    (the input of the final norm) and each layer's attention output (for checks).
    ``prompt`` is text or token ids."""
    names = [f"blocks.{l}.attn.hook_z" for l in range(model.n_layers)]
    names += [f"blocks.{l}.attn.o.hook_out" for l in range(model.n_layers)] + ["ln_final.hook_in"]
    wanted = set(names)
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(_ids(model, prompt), names_filter=lambda n: n in wanted)
        outs, attn = [], []
        for layer in range(model.n_layers):
            z = cache[f"blocks.{layer}.attn.hook_z"][0, position]  # [head_index, d_head]
            w_o = model.bridge.blocks[layer].attn.W_O  # [head_index, d_head, d_model], any layout of o
            outs.append(einsum(z, w_o.to(z.dtype),
                               "head_index d_head, head_index d_head d_model -> head_index d_model"))
            attn.append(cache[f"blocks.{layer}.attn.o.hook_out"][0, position])
        return torch.stack(outs), cache["ln_final.hook_in"][0, position], torch.stack(attn)


def direct_logit_attribution(model: Model, prompt: str, target: str | int, heads: HeadSet | str | None = None,
                             token: int = 0) -> dict[str, float]:
    """Each head's direct contribution to the logit of the answer's ``token``-th token, at the
    position that predicts it (the prompt plus the answer's earlier tokens, split as lm-eval
    splits context and continuation): the head's output through the final norm (its scale frozen)
    and the unembedding. ``target`` may also be a token id (then the prompt's next token).
    Returns ``{head: contribution}`` for ``heads`` (``None``: every head), largest first."""
    if isinstance(target, int):
        ids, target_id = _encode(model, prompt)[0].tolist(), target
    else:
        context, continuation = encode_pair(model.tokenizer, _encodable("prompt", prompt), _encodable("target", target))
        if not 0 <= token < len(continuation):
            raise TaskError(f"The answer {target!r} has {len(continuation)} token(s); token={token} is out of range.")
        ids, target_id = context + continuation[:token], continuation[token]
    outs, resid, _ = head_outputs(model, ids, -1)
    with torch.no_grad():
        factor = _final_norm_factor(model, resid)
        direction = factor * model.arch.unembed_weight[target_id]
        contributions = (outs @ direction).double().cpu().numpy()
    chosen = list(as_head_set(heads)) if heads is not None else all_heads(model.n_layers, model.n_heads)
    scores = {str(h): float(contributions[h.layer, h.head]) for h in chosen}
    return dict(sorted(scores.items(), key=lambda kv: -kv[1]))


@dataclass(frozen=True)
class TokenChange:
    token: str
    token_id: int
    p_intact: float
    p_ablated: float

    @property
    def delta(self) -> float:
        return self.p_ablated - self.p_intact


def next_token_changes(model: Model, prompt: str, heads: HeadSet | str, n: int = 10,
                       ablation: Ablation | str | None = None) -> list[TokenChange]:
    """The ``n`` next tokens whose probability changes most when ``heads`` are removed (as ``ablation`` says;
    resample, which needs a reference per prompt, is refused here)."""
    ids = _encode(model, prompt)
    with torch.no_grad():
        p_intact = torch.softmax(model.bridge(ids)[0, -1].float(), -1)
        with ablate(model, heads, ablation):
            p_ablated = torch.softmax(model.bridge(ids)[0, -1].float(), -1)
    top = torch.argsort((p_ablated - p_intact).abs(), descending=True)[:n].tolist()
    return [TokenChange(model.tokenizer.decode([t]), t, float(p_intact[t]), float(p_ablated[t])) for t in top]
