"""The evaluator: tokenise once, batch, score teacher-forced, return per-example results.

Fixed-target and multiple-choice examples are scored from one forward pass each
(per choice), with the unembedding computed only at the positions that are scored.
Encoding follows lm-evaluation-harness: trailing spaces of the context move to the
continuation, and the continuation's tokens are those of ``encode(context +
continuation)`` past ``encode(context)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from jaxtyping import Bool, Float, Float64, Int
from torch import Tensor

from celtk.ablation import ablate, as_ablation
from celtk.ablation_kinds import Ablation, AblationKind, reference_values
from celtk.errors import ConfigError, TaskError
from celtk.heads import HeadSet, as_head_set
from celtk.models import Model
from celtk.plan import check_memory
from celtk.tasks import Example, Task, build_context, continuation_delimiter
from celtk.validation import check_fields

CHAT_DATE = "2024-07-26"
"""The date chat templates see (``strftime_now``; Llama-3.x and SmolLM3 write "today" into the
prompt): fixed so that prompts do not change from day to day; 26 Jul 2024 is the date Llama-3.x
templates fall back to when none is given. lm-eval renders the real date."""


@dataclass(frozen=True)
class EvalConfig:
    """Settings that change what is scored; recorded with every result."""

    batch_size: int = 32
    chat: bool = False
    allow_code: bool = False
    chat_date: str = CHAT_DATE  # what a chat template that writes "today" sees

    def __post_init__(self) -> None:
        check_fields(self)
        if self.batch_size < 1:
            raise ConfigError(f"Batch size must be at least 1, got {self.batch_size}.")


@dataclass(frozen=True)
class Request:
    """One context/continuation pair as token ids. ``example`` indexes the example list."""

    example: int
    context: tuple[int, ...]
    continuation: tuple[int, ...]


@dataclass(frozen=True)
class Prepared:
    """Everything tokenised once: reused by every ablation of a screen."""

    examples: list[Example]
    requests: list[Request]
    prompts: list[str]
    kind: str
    normalize: bool


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


@dataclass(frozen=True)
class ExampleResult:
    id: str
    correct: bool
    logprob: float | list[float] | None  # None: graded by generation, no log-probability
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class EvalResult:
    examples: list[ExampleResult]

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def correct(self) -> np.ndarray:
        return np.array([e.correct for e in self.examples], dtype=bool)

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if self.examples else float("nan")

    def to_json(self) -> list[dict[str, Any]]:
        return [asdict(e) for e in self.examples]


def adds_bos(tokenizer: Any) -> bool:
    """Whether the tokenizer's default encoding starts with BOS (Gemma: yes; SmolLM2: no)."""
    ids = tokenizer("a").input_ids
    return tokenizer.bos_token_id is not None and len(ids) > 0 and ids[0] == tokenizer.bos_token_id


def adds_special_tokens(tokenizer: Any, text: str) -> bool:
    """Whether to let the tokenizer add its BOS to ``text``: only when it adds one and ``text``
    does not already begin with it (Llama-3 and Gemma chat templates write BOS themselves),
    as lm-eval's ``tok_encode`` decides."""
    bos = tokenizer.bos_token
    return adds_bos(tokenizer) and not (bos and text.startswith(bos))


def encode_pair(tokenizer: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's ``_encode_pair``: continuation tokens = encode(ctx + cont) past encode(ctx).

    Trailing whitespace of the context moves to the continuation, so under a chat template
    whose generation prompt ends in a newline the arithmetic target `` 143`` is scored as
    ``"\n 143"``, exactly as lm-eval scores it.
    An empty context is end-of-text, as in lm-eval's ``loglikelihood``, so the first target token
    is scored after a real token, never after padding."""
    if context == "":
        if tokenizer.eos_token_id is None:
            raise TaskError("An example has an empty prompt and the tokenizer has no end-of-text token to stand in "
                            "for it; give every example a prompt.")
        return [tokenizer.eos_token_id], tokenizer(continuation, add_special_tokens=False).input_ids
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    special = adds_special_tokens(tokenizer, context)
    whole = tokenizer(context + continuation, add_special_tokens=special).input_ids
    ctx = tokenizer(context, add_special_tokens=special).input_ids
    return ctx, whole[len(ctx):]


def dated_template(template: str, chat_date: str = CHAT_DATE) -> str:
    """``template`` with ``strftime_now`` shadowed by a macro that formats ``chat_date``.

    transformers passes render arguments as plain data (a callable becomes a string), so the
    date is fixed in the template itself: a leading macro, which outputs nothing, takes the
    name that the template's global ``strftime_now`` (today's date) would otherwise resolve to.
    """
    import datetime

    try:
        day = datetime.datetime.fromisoformat(chat_date)
    except (TypeError, ValueError):
        raise ConfigError(f"chat_date must be an ISO date such as {CHAT_DATE!r}, got {chat_date!r}.") from None
    filters = "".join(f' | replace("%{c}", "{day.strftime("%" + c)}")' for c in "aAbBdjmyYeHIMSpuwUWGV")
    return "{%- macro strftime_now(format) -%}{{ format" + filters + " }}{%- endmacro -%}" + template


def format_prompt(model: Model, task: Task, example: Example, shots: Sequence[Example], chat: bool,
                  chat_date: str = CHAT_DATE) -> str:
    """The prompt text; under ``chat`` one user turn (shots included, as lm-eval's default
    single-turn few-shot) rendered with the generation prompt and the fixed ``chat_date``."""
    text = build_context(task, example, list(shots))
    if not chat:
        return text
    tokenizer = model.tokenizer
    try:
        template = tokenizer.get_chat_template()
    except ValueError:
        raise ConfigError(f"--chat needs a chat template, but the tokenizer of {model.name} has none; "
                          "drop chat=True (--chat) or use an instruction-tuned model.") from None
    kwargs = {"enable_thinking": False} if "smollm3" in model.architecture.lower() else {}
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True,
                                         chat_template=dated_template(template, chat_date), **kwargs)


def check_context(model: Model, example_id: str, prompt: int, continuation: int, kind: str = "target") -> None:
    """Refuse, before any forward pass, an example whose prompt (``prompt`` tokens) and continuation
    (``continuation`` tokens: the target, a choice, or the generation limit) need more positions than
    the model reads (:attr:`celtk.models.Model.n_ctx`). The model reads every token but the last.

    lm-eval cuts such a prompt from the left; celtk refuses instead of scoring a prompt the task did
    not write (and instead of an attention matrix that grows with the square of the length)."""
    n_ctx = model.n_ctx
    needed = prompt + continuation - 1
    if n_ctx is not None and needed > n_ctx:
        raise TaskError(f"Example {example_id}: its prompt ({prompt:,} tokens) and {kind} ({continuation:,} tokens) need "
                        f"{needed:,} positions, but {model.name} reads at most {n_ctx:,} ({model.n_ctx_source} in its "
                        f"config). Shorten that example's prompt, use fewer shots (--fewshot), or use a model with a "
                        "longer context.")


def prepare(model: Model, task: Task, examples: Sequence[Example], shots: Sequence[Example] = (),
            chat: bool = False, chat_date: str = CHAT_DATE) -> Prepared:
    """Build and tokenise every request once; an example longer than the model's context is
    refused (:func:`check_context`) before any is scored."""
    requests, prompts = [], []
    delimiter = continuation_delimiter(task, chat)
    for i, example in enumerate(examples):
        prompt = format_prompt(model, task, example, shots, chat, chat_date)
        prompts.append(prompt)
        if task.kind == "target":
            continuations = [example.target or ""]
        elif task.kind == "choice":
            continuations = [delimiter + c for c in example.choices or ()]
        else:
            continuations = []
        for cont in continuations:
            ctx, cont_ids = encode_pair(model.tokenizer, prompt, cont)
            if not cont_ids:
                raise TaskError(f"Example {example.id}: its target {cont!r} encodes to no tokens; every target needs at least one token.")
            check_context(model, example.id, len(ctx), len(cont_ids), "target" if task.kind == "target" else "choice")
            requests.append(Request(i, tuple(ctx), tuple(cont_ids)))
    return Prepared(list(examples), requests, prompts, task.kind, bool(getattr(task, "normalize_by_length", False)))


def prepared_hash(prepared: Prepared) -> str:
    """Hash of every request's token ids (and how they are graded): any change of prompt,
    template, date, delimiter or tokenizer changes it, so a run fingerprint can refuse to mix."""
    import hashlib

    digest = hashlib.sha256(f"{prepared.kind}\0{prepared.normalize}\n".encode())
    for r in prepared.requests:
        digest.update(f"{r.example}:{','.join(map(str, r.context))}|{','.join(map(str, r.continuation))}\n".encode())
    if prepared.kind == "generate":  # graded by generation: no scored requests, so the prompts themselves
        for example, prompt in zip(prepared.examples, prepared.prompts):
            digest.update(f"{example.id}:{prompt}\n".encode())
    return digest.hexdigest()[:16]


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
        for row, (rid, seq) in enumerate(zip(ids, seqs)):
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
    return out.last_hidden_state


def unembed(model: Model, hidden: Float[Tensor, "scored d_model"]) -> Float[Tensor, "scored d_vocab"]:
    """Logits from final-normed residuals, as the HF head computes them (incl. soft-capping)."""
    return model.arch.logits(hidden)


def score_hidden(model: Model, hidden: Float[Tensor, "rows pos d_model"], batch: Batch,
                 rows: Int[Tensor, " scored"] | None = None) -> tuple[Float64[Tensor, " request"], Bool[Tensor, " request"]]:
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
                   around: Callable[[Batch], AbstractContextManager[Any]] | None = None) -> tuple[np.ndarray, np.ndarray]:
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


def aggregate(prepared: Prepared, lp: np.ndarray, greedy: np.ndarray) -> EvalResult:
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
        norm = [ll / len(c) for ll, c in zip(lls, ex.choices or ())]
        acc_norm = int(np.argmax(norm)) == ex.label
        out.append(ExampleResult(ex.id, bool(acc_norm if prepared.normalize else acc), lls,
                                 {"acc": bool(acc), "acc_norm": bool(acc_norm)}))
    return EvalResult(out)


def evaluate(model: Model, task: Task, examples: Sequence[Example], shots: Sequence[Example] = (),
             heads: HeadSet | str = "", config: EvalConfig = EvalConfig(),
             progress: Callable[[int, int], None] | None = None,
             ablation: Ablation | AblationKind | str | None = None) -> EvalResult:
    """Score ``examples`` with ``heads`` ablated (none by default) as ``ablation`` says (default zero;
    mean and resample values come from :func:`ablation_for`). Never prints.

    Returns:
        per-example ``correct`` and the score behind it (summed target log-probability, the
        per-choice log-likelihoods, or the generated text), in the order of ``examples``.
    """
    heads = as_head_set(heads)
    kind = as_ablation(ablation)
    if task.kind == "generate":
        refuse_resample_generation(kind)
        with ablate(model, heads, kind):
            return _evaluate_generation(model, task, examples, shots, config, progress)
    prepared = prepare(model, task, examples, shots, config.chat, config.chat_date)
    check_memory(model, prepared, config.batch_size, cached=False, what="Scoring")
    batches = make_batches(prepared.requests, config.batch_size, model.tokenizer.pad_token_id)
    return aggregate(prepared, *score_requests(model, prepared, batches, progress,
                                               around=ablated(model, prepared, heads, kind)))


def ablated(model: Model, prepared: Prepared, heads: HeadSet, ablation: Ablation | AblationKind | str | None = None
            ) -> Callable[[Batch], AbstractContextManager[Any]]:
    """For :func:`score_requests`: each batch under :func:`celtk.ablation.ablate` of ``heads`` (resample: each
    row reading the reference its example draws, :meth:`Ablation.assign`, from position 0)."""
    kind = as_ablation(ablation)
    if not kind.per_row:
        return lambda batch: ablate(model, heads, kind)
    drawn = kind.assign([e.content_hash for e in prepared.examples])
    return lambda batch: ablate(model, heads, kind,
                                references=drawn[[prepared.requests[r].example for r in batch.request_ids]])


def refuse_resample_generation(ablation: Ablation | AblationKind) -> None:
    """Resample ablation is defined on the positions teacher forcing reads; a generation runs past them."""
    if (ablation.kind if isinstance(ablation, Ablation) else ablation).name == "resample":
        raise ConfigError("Resample ablation is not offered for generation-graded tasks: a greedy generation reads "
                          "positions no reference example has, and its left-padded batches move every position. Use "
                          "zero, mean or scale:α.")


def reference_sequences(model: Model, task: Task, examples: Sequence[Example], shots: Sequence[Example] = (),
                        chat: bool = False, chat_date: str = CHAT_DATE) -> list[list[int]]:
    """Each reference example's prompt followed by its correct answer, as teacher forcing reads them (the
    answer's last token is predicted, never read): the tokens mean and resample ablation measure ``z`` on.
    A generation-graded task's reference is its prompt."""
    if task.kind == "generate":
        prompts = [format_prompt(model, task, e, shots, chat, chat_date) for e in examples]
        return prompt_ids(model, prompts, examples)
    prepared = prepare(model, task, examples, shots, chat, chat_date)
    by_example: dict[int, list[Request]] = {}
    for request in prepared.requests:
        by_example.setdefault(request.example, []).append(request)
    out = []
    for i, example in enumerate(examples):
        requests = by_example[i]
        request = requests[example.label or 0] if task.kind == "choice" else requests[0]
        out.append(list(request.context + request.continuation)[:-1])
    return out


def ablation_for(model: Model, kind: AblationKind | str, task: Task, reference: Sequence[Example],
                 shots: Sequence[Example] = (), chat: bool = False, chat_date: str = CHAT_DATE,
                 seed: int = 0) -> Ablation:
    """The :class:`Ablation` of ``kind`` with its values measured on the intact ``model`` over the ``reference``
    examples (prompted with ``shots`` and ``chat`` as the examples they will ablate): per-head means, or
    every position's ``z`` for resample (drawn per example with ``seed``). Keep ``reference`` disjoint from
    any held-out set (a run uses its discovery set). Zero and scale need no reference.

    Example:
        >>> mean = ablation_for(model, "mean", task, splits.discovery, splits.shots)   # doctest: +SKIP
        >>> evaluate(model, task, splits.heldout, splits.shots, HeadSet.parse("L1H2"), ablation=mean)  # doctest: +SKIP
    """
    kind = AblationKind.parse(kind)
    if not kind.needs_reference:
        return Ablation(kind)
    sequences = reference_sequences(model, task, reference, shots, chat, chat_date)
    means, stored, count = reference_values(model, sequences, keep=kind.name == "resample")
    return Ablation(kind, means=means if kind.name == "mean" else None, reference=stored,
                    reference_hashes=tuple(e.content_hash for e in reference), seed=seed, reference_positions=count)


@dataclass(frozen=True)
class StopRule:
    """When a greedy generation ends, shared by the plain path and the generation screener:
    an end-of-sequence token, a stop string anywhere in the decoded text, or the token limit.
    The text is the decoded tokens (special tokens dropped) cut before the first stop string."""

    stop: tuple[str, ...]
    eos: frozenset[int]
    max_new_tokens: int

    @classmethod
    def for_task(cls, model: Model, task: Task) -> StopRule:
        return cls.of(model, task.max_new_tokens(), task.stop_strings())

    @classmethod
    def of(cls, model: Model, max_new_tokens: int, stop: Sequence[str] = ()) -> StopRule:
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be at least 1, got {max_new_tokens}.")
        if model.n_ctx is not None and max_new_tokens >= model.n_ctx:
            raise ConfigError(f"max_new_tokens = {max_new_tokens:,} cannot fit in the context of {model.name}, which reads "
                              f"at most {model.n_ctx:,} positions ({model.n_ctx_source} in its config) for prompt and "
                              f"generation together; use --max-new-tokens below {model.n_ctx:,} (the prompt's length "
                              "comes off it too).")
        eos = getattr(model.hf_model.generation_config, "eos_token_id", None)  # what HF generate stops on
        eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        return cls(tuple(s for s in stop if s), frozenset(eos), max_new_tokens)

    def text(self, tokenizer: Any, tokens: Sequence[int]) -> str:
        text = tokenizer.decode(list(tokens), skip_special_tokens=True)
        cuts = [text.index(s) for s in self.stop if s in text]
        return text[:min(cuts)] if cuts else text

    def done(self, tokenizer: Any, tokens: Sequence[int]) -> bool:
        if len(tokens) >= self.max_new_tokens or (tokens and tokens[-1] in self.eos):
            return True
        return bool(self.stop) and any(s in tokenizer.decode(list(tokens), skip_special_tokens=True) for s in self.stop)


def prompt_ids(model: Model, prompts: Sequence[str], examples: Sequence[Example] | None = None,
               new_tokens: int = 0) -> list[list[int]]:
    """Each prompt's token ids as the tokenizer encodes it alone (with BOS where it adds one and
    the prompt, e.g. a Llama or Gemma chat template, does not already begin with it); a prompt
    that leaves no room for ``new_tokens`` generated tokens in the model's context is refused."""
    out = []
    for i, prompt in enumerate(prompts):
        ids = model.tokenizer(prompt, add_special_tokens=adds_special_tokens(model.tokenizer, prompt)).input_ids
        name = str(examples[i].id if examples is not None else i)
        if not ids:
            raise TaskError(f"Example {name}: its prompt encodes to no tokens; every prompt needs at least one token.")
        check_context(model, name, len(ids), new_tokens, "generation limit")
        out.append(list(ids))
    return out


def new_cache(model: Model) -> Any:
    """An empty KV cache of the kind HF generation makes for this model (sliding layers included)."""
    from transformers import DynamicCache

    return DynamicCache(config=model.hf_model.config)


def decode_step(model: Model, tokens: Int[Tensor, " rows"], attention_mask: Int[Tensor, "rows cols"],
                positions: Int[Tensor, " rows"], cache: Any) -> Int[Tensor, " rows"]:
    """Append one token per row to ``cache`` and return each row's greedy next token.

    ``attention_mask`` covers every cached column plus the new one; ``positions`` are the new
    tokens' position ids (the row's count of real tokens before it, as HF's left-padded generation).
    """
    hidden = model.arch.decoder(input_ids=tokens[:, None].to(model.device), attention_mask=attention_mask.to(model.device),
                                position_ids=positions[:, None].to(model.device), past_key_values=cache,
                                use_cache=True).last_hidden_state
    return unembed(model, hidden[:, -1]).argmax(dim=-1).cpu()


def generate_tokens(model: Model, ids: Sequence[Sequence[int]], rule: StopRule, batch_size: int = 8) -> list[list[int]]:
    """Greedy continuations (token ids) of each prompt, in left-padded batches of ``batch_size``
    run through the model as it stands (hooks included); every row decodes until all have stopped."""
    if batch_size < 1:
        raise ConfigError(f"Batch size must be at least 1, got {batch_size}.")
    pad, out = model.tokenizer.pad_token_id or 0, []
    for start in range(0, len(ids), batch_size):
        rows = [list(r) for r in ids[start:start + batch_size]]
        width = max(len(r) for r in rows)
        input_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        cache = new_cache(model)
        with torch.no_grad():
            hidden = model.arch.decoder(input_ids=input_ids.to(model.device), attention_mask=mask.to(model.device),
                                        position_ids=(mask.cumsum(1) - 1).clamp(min=0).to(model.device),
                                        past_key_values=cache, use_cache=True).last_hidden_state
            nxt = unembed(model, hidden[:, -1]).argmax(dim=-1).cpu()
            made: list[list[int]] = [[] for _ in rows]
            positions = torch.tensor([len(r) for r in rows])
            while True:
                for row, tok in zip(made, nxt.tolist()):
                    if not rule.done(model.tokenizer, row):
                        row.append(tok)
                if all(rule.done(model.tokenizer, row) for row in made):
                    break
                mask = torch.cat([mask, torch.ones(len(rows), 1, dtype=mask.dtype)], dim=1)
                nxt = decode_step(model, nxt, mask, positions, cache)
                positions = positions + 1
        out.extend(made)
    return out


def generate_greedy(model: Model, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str] = (),
                    batch_size: int = 8) -> list[str]:
    """Greedy continuations of ``prompts`` (left-padded batches), cut before the first stop string."""
    rule = StopRule.of(model, max_new_tokens, stop)
    ids = prompt_ids(model, prompts, new_tokens=max_new_tokens)
    return [rule.text(model.tokenizer, t) for t in generate_tokens(model, ids, rule, batch_size)]


def generation_result(task: Task, example: Example, text: str, n_tokens: int, allow_code: bool) -> ExampleResult:
    """One graded generation; ``extra`` records the text and how many tokens were generated."""
    ok = task.grade_generation(example, text, allow_code)
    return ExampleResult(example.id, bool(ok), None, {"generation": text, "new_tokens": n_tokens})


def _evaluate_generation(model: Model, task: Task, examples: Sequence[Example], shots: Sequence[Example],
                         config: EvalConfig, progress: Callable[[int, int], None] | None) -> EvalResult:
    from celtk.tasks._sandbox import require_opt_in

    if task.runs_code:
        require_opt_in(config.allow_code)
    prompts = [format_prompt(model, task, e, shots, config.chat, config.chat_date) for e in examples]
    rule = StopRule.for_task(model, task)
    made = generate_tokens(model, prompt_ids(model, prompts, examples, rule.max_new_tokens), rule, config.batch_size)
    out = []
    for i, (example, tokens) in enumerate(zip(examples, made), start=1):
        out.append(generation_result(task, example, rule.text(model.tokenizer, tokens), len(tokens), config.allow_code))
        if progress:
            progress(i, len(examples))
    return EvalResult(out)
