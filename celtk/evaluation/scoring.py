"""Teacher-forced scoring: batch the prepared requests, run them through the model as it stands (hooks
included), and read each request's summed target log-probability and all-greedy flag.

Fixed-target and multiple-choice examples are scored from one forward pass each (per choice), with the
unembedding computed only at the positions that are scored. Mean and resample ablation values are measured
here too (:func:`ablation_for`), on teacher-forced reference sequences.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TypedDict, cast

import numpy as np
import torch
from jaxtyping import Bool, Float, Float64, Int
from torch import Tensor

from celtk.ablation import ablate, as_ablation
from celtk.ablation_kinds import Ablation, AblationKind, check_positions, check_reference_shots, reference_values
from celtk.errors import ConfigError, TaskError
from celtk.evaluation.prompts import (
    CHAT_DATE,
    Prepared,
    Request,
    adds_special_tokens,
    format_prompt,
    prepare,
    prompt_ids,
)
from celtk.evaluation.results import EvalResult, ExampleResult
from celtk.heads import HeadSet
from celtk.models import Model
from celtk.tasks import Example, Task


class _Where(TypedDict, total=False):
    """Where an ablation replaces z, when not at every position (:class:`Ablation`'s ``positions``, ``prefix``)."""

    positions: str
    prefix: tuple[int, ...]


@dataclass(frozen=True)
class Batch:
    """Right-padded inputs and where to read each request's scores."""

    input_ids: Int[Tensor, "batch pos"]
    attention_mask: Int[Tensor, "batch pos"]
    rows: Int[Tensor, " scored"]
    positions: Int[Tensor, " scored"]
    targets: Int[Tensor, " scored"]
    owner: Int[Tensor, " scored"]  # index into ``request_ids`` for each scored position
    request_ids: list[int]


def make_batches(requests: Sequence[Request], batch_size: int, pad_id: int) -> list[Batch]:
    """Group requests longest first into right-padded batches (the order does not change results)."""
    if batch_size < 1:
        raise ConfigError(f"Batch size must be at least 1, got {batch_size}.")
    order = sorted(range(len(requests)), key=lambda i: (-(len(requests[i].context) + len(requests[i].continuation)), i))
    batches = []
    for start in range(0, len(order), batch_size):
        ids = order[start:start + batch_size]
        seqs = [list(requests[i].context + requests[i].continuation)[:-1] for i in ids]
        width = max(len(s) for s in seqs)
        input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        rows, positions, targets, owner = [], [], [], []
        for row, (rid, seq) in enumerate(zip(ids, seqs, strict=True)):
            input_ids[row, :len(seq)] = torch.tensor(seq)
            mask[row, :len(seq)] = 1
            n_ctx, cont = len(requests[rid].context), requests[rid].continuation
            for j, tok in enumerate(cont):
                rows.append(row)
                positions.append(n_ctx - 1 + j)
                targets.append(tok)
                owner.append(row)
        batches.append(Batch(input_ids, mask, torch.tensor(rows), torch.tensor(positions), torch.tensor(targets),
                             torch.tensor(owner), list(ids)))
    return batches


def decoder_hidden(model: Model, input_ids: Int[Tensor, "batch pos"], attention_mask: Int[Tensor, "batch pos"]
                   ) -> Float[Tensor, "batch pos d_model"]:
    """The final-normed residual stream (bridge blocks run, so hooks fire)."""
    out = model.arch.decoder(input_ids=input_ids.to(model.device), attention_mask=attention_mask.to(model.device),
                             use_cache=False)
    return cast(Tensor, out.last_hidden_state)


def unembed(model: Model, hidden: Float[Tensor, "scored d_model"]) -> Float[Tensor, "scored d_vocab"]:
    """Logits from final-normed residuals, as the HF head computes them (incl. soft-capping)."""
    return model.arch.logits(hidden)


def score_hidden(model: Model, hidden: Float[Tensor, "rows pos d_model"], batch: Batch,
                 rows: Int[Tensor, " scored"] | None = None
                 ) -> tuple[Float64[Tensor, " request"], Bool[Tensor, " request"]]:
    """Per-request summed target log-probability and all-greedy flag for one batch.

    Args:
        hidden: final-normed residuals of the batch's rows (or, for the screener, of
            ``(batch g)`` rows: each example under ``g`` ablations).
        rows: which row each scored position reads, when not ``batch.rows``.
    """
    picked = hidden[batch.rows if rows is None else rows, batch.positions]
    logprobs = torch.log_softmax(unembed(model, picked), dim=-1)
    target_lp = logprobs.gather(1, batch.targets[:, None].to(logprobs.device))[:, 0].double().cpu()
    greedy = (logprobs.argmax(dim=-1).cpu() == batch.targets)
    n = len(batch.request_ids)
    lp = torch.zeros(n, dtype=torch.float64).index_add_(0, batch.owner, target_lp)
    bad = torch.zeros(n, dtype=torch.long).index_add_(0, batch.owner, (~greedy).long())
    return lp, bad == 0


def score_requests(model: Model, prepared: Prepared, batches: Sequence[Batch],
                   progress: Callable[[int, int], None] | None = None,
                   around: Callable[[Batch], AbstractContextManager[object]] | None = None
                   ) -> tuple[Float64[np.ndarray, " request"], Bool[np.ndarray, " request"]]:
    """Run every batch through the model as it stands (hooks included), each inside ``around(batch)``
    when given (:func:`ablated`): per-request summed target log-probability and all-greedy flag."""
    lp = np.zeros(len(prepared.requests))
    greedy = np.zeros(len(prepared.requests), dtype=bool)
    with torch.no_grad():
        for done, batch in enumerate(batches, start=1):
            if around is None:
                hidden = decoder_hidden(model, batch.input_ids, batch.attention_mask)
            else:
                with around(batch):
                    hidden = decoder_hidden(model, batch.input_ids, batch.attention_mask)
            blp, bgreedy = score_hidden(model, hidden, batch)
            lp[batch.request_ids] = blp.numpy()
            greedy[batch.request_ids] = bgreedy.numpy()
            if progress:
                progress(done, len(batches))
    return lp, greedy


def aggregate(prepared: Prepared, lp: Float64[np.ndarray, " request"], greedy: Bool[np.ndarray, " request"]
              ) -> EvalResult:
    """Per-request scores -> per-example results."""
    by_example: dict[int, list[int]] = {}
    for r, req in enumerate(prepared.requests):
        by_example.setdefault(req.example, []).append(r)
    out = []
    for i, ex in enumerate(prepared.examples):
        rids = by_example.get(i, [])
        if prepared.kind == "target":
            out.append(ExampleResult(ex.id, bool(greedy[rids[0]]), float(lp[rids[0]])))
            continue
        lls = [float(lp[r]) for r in rids]
        acc = int(np.argmax(lls)) == ex.label
        norm = [ll / len(c) for ll, c in zip(lls, ex.choices or (), strict=True)]
        acc_norm = int(np.argmax(norm)) == ex.label
        out.append(ExampleResult(ex.id, bool(acc_norm if prepared.normalize else acc), lls,
                                 {"acc": bool(acc), "acc_norm": bool(acc_norm)}))
    return EvalResult(out)


def ablated(model: Model, prepared: Prepared, heads: HeadSet, ablation: Ablation | AblationKind | str | None = None
            ) -> Callable[[Batch], AbstractContextManager[object]]:
    """For :func:`score_requests`: each batch under :func:`celtk.ablation.ablate` of ``heads`` (resample: each
    row reading the reference its example draws, :meth:`Ablation.assign`, aligned on the row's prompt,
    :meth:`Ablation.alignment`)."""
    kind = as_ablation(ablation)
    bounds = None if kind.everywhere else kind.boundaries([r.context for r in prepared.requests])

    def rows(batch: Batch) -> Int[Tensor, " batch"] | None:  # each row's prefix boundary (prefix/example positions)
        return None if bounds is None else bounds[batch.request_ids]

    if not kind.per_row:
        return lambda batch: ablate(model, heads, kind, boundaries=rows(batch))
    drawn = kind.assign([e.content_hash for e in prepared.examples])
    return lambda batch: ablate(model, heads, kind,
                                references=drawn[[prepared.requests[r].example for r in batch.request_ids]],
                                boundaries=rows(batch),
                                contexts=[prepared.requests[r].context for r in batch.request_ids])


def reference_sequences(model: Model, task: Task, examples: Sequence[Example], shots: Sequence[Example] = (),
                        chat: bool = False, chat_date: str = CHAT_DATE) -> list[list[int]]:
    """Each reference example's prompt followed by its correct answer, as teacher forcing reads them (the
    answer's last token is predicted, never read): the tokens mean and resample ablation measure ``z`` on.
    A generation-graded task's reference is its prompt."""
    return _reference_prompts(model, task, examples, [list(shots)] * len(examples), chat, chat_date)[0]


def _reference_prompts(model: Model, task: Task, examples: Sequence[Example], shots: Sequence[Sequence[Example]],
                       chat: bool, chat_date: str) -> tuple[list[list[int]], list[int]]:
    """:func:`reference_sequences` with ``shots[i]`` the shots of example ``i``, and each sequence's prompt length."""
    if task.kind == "generate":
        prompts = [format_prompt(model, task, e, s, chat, chat_date) for e, s in zip(examples, shots, strict=True)]
        ids = prompt_ids(model, prompts, examples)
        return ids, [len(i) for i in ids]
    groups: dict[tuple[str, ...], list[int]] = {}  # examples prompted with the same shots, prepared together
    for i, s in enumerate(shots):
        groups.setdefault(tuple(e.content_hash for e in s), []).append(i)
    sequences: list[list[int]] = [[] for _ in examples]
    prompts_at = [0] * len(examples)
    for members in groups.values():
        prepared = prepare(model, task, [examples[i] for i in members], shots[members[0]], chat, chat_date)
        by_example: dict[int, list[Request]] = {}
        for request in prepared.requests:
            by_example.setdefault(request.example, []).append(request)
        for j, i in enumerate(members):
            requests = by_example[j]
            request = requests[examples[i].label or 0] if task.kind == "choice" else requests[0]
            sequences[i] = list(request.context + request.continuation)[:-1]
            prompts_at[i] = len(request.context)
    return sequences, prompts_at


def redrawn_shots(task: Task, reference: Sequence[Example], k: int, seed: int, exclude: Sequence[str] = ()
                  ) -> list[list[Example]]:
    """``k`` shots for each of the ``reference`` examples, drawn from ``task``'s few-shot pool with a generator
    seeded by ``(seed, the reference's content hash)`` (so a reference's shots do not depend on which other
    references there are), never the reference itself nor an example whose content hash is in ``exclude`` (a
    held-out set's)."""
    if k == 0:
        return [[] for _ in reference]
    pool = list({e.content_hash: e for e in task.load_pools().fewshot}.values())
    banned = set(exclude)
    out = []
    for example in reference:
        allowed = [e for e in pool if e.content_hash not in banned and e.content_hash != example.content_hash]
        if len(allowed) < k:
            raise TaskError(f"Redrawing {k} shots per reference needs {k} few-shot examples other than the reference "
                            f"and the held-out set, and {task.full_name}'s few-shot pool has {len(allowed)}; use "
                            "fixed reference shots, or fewer shots (--fewshot).")
        rng = np.random.default_rng([seed, int(example.content_hash, 16), 1])
        out.append([allowed[i] for i in rng.choice(len(allowed), size=k, replace=False)])
    return out


def prompt_prefix(model: Model, task: Task, shots: Sequence[Example] = (), chat: bool = False,
                  chat_date: str = CHAT_DATE) -> tuple[int, ...]:
    """The tokens of the prompt text before an example's own context: the chat template's opening, the
    shots and their delimiters (what every prompt under these shots shares), encoded as a prompt's context is."""
    marker = "\x00celtk-example\x00"
    prompt = format_prompt(model, task, Example("", marker, "", label=0), shots, chat, chat_date)
    text = prompt[:prompt.index(marker)]
    tokenizer = model.tokenizer
    return tuple(tokenizer(text, add_special_tokens=adds_special_tokens(tokenizer, text)).input_ids)


def ablation_for(model: Model, kind: AblationKind | str, task: Task, reference: Sequence[Example],
                 shots: Sequence[Example] = (), chat: bool = False, chat_date: str = CHAT_DATE,
                 seed: int = 0, positions: str = "all", reference_shots: str = "fixed",
                 exclude: Sequence[str] = ()) -> Ablation:
    """The :class:`Ablation` of ``kind`` with its values measured on the intact ``model`` over the ``reference``
    examples (prompted with ``shots`` and ``chat`` as the examples they will ablate): per-head means, or
    every position's ``z`` for resample (drawn per example with ``seed``). Keep ``reference`` disjoint from
    any held-out set (a run uses its discovery set). Zero and scale need no reference. ``positions``
    (``all``, ``prefix``, ``example``) says where ``z`` is replaced; the prefix is :func:`prompt_prefix`'s.

    ``reference_shots="redraw"`` prompts each reference with its own ``len(shots)`` shots instead of ``shots``
    (:func:`redrawn_shots`: from the task's few-shot pool, seeded by ``seed`` and the reference's content, never
    the reference itself nor an example whose content hash is in ``exclude``, e.g. the held-out set's), so that
    the references share only the chat template's opening with an example and resample replaces the shot
    positions too, as zero and mean at ``all`` positions do. ``"fixed"`` (the default) uses ``shots``.

    Example:
        >>> mean = ablation_for(model, "mean", task, splits.discovery, splits.shots)   # doctest: +SKIP
        >>> evaluate(model, task, splits.heldout, splits.shots, HeadSet.parse("L1H2"), ablation=mean)  # doctest: +SKIP
    """
    kind = AblationKind.parse(kind)
    where: _Where = {}
    if check_positions(positions) != "all":
        where = {"positions": positions, "prefix": prompt_prefix(model, task, shots, chat, chat_date)}
    if check_reference_shots(reference_shots) != "fixed" and not kind.needs_reference:
        raise ConfigError(f"reference_shots={reference_shots!r} redraws the shots of the reference sequences that "
                          f"mean and resample measure their values on; {kind} has none. Use reference_shots='fixed' "
                          "with zero and scale:α.")
    if not kind.needs_reference:
        return Ablation(kind, **where)
    per_reference = [list(shots)] * len(reference) if reference_shots == "fixed" \
        else redrawn_shots(task, reference, len(shots), seed, exclude)
    sequences, prompts = _reference_prompts(model, task, reference, per_reference, chat, chat_date)
    means, stored, count = reference_values(model, sequences, keep=kind.name == "resample", prompts=prompts)
    return Ablation(kind, means=means if kind.name == "mean" else None, reference=stored,
                    reference_hashes=tuple(e.content_hash for e in reference), seed=seed, reference_positions=count,
                    reference_shots=reference_shots, **where)
