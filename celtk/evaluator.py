"""The evaluator: tokenise once, batch, score teacher-forced, return per-example results.

Fixed-target and multiple-choice examples are scored from one forward pass each
(per choice), with the unembedding computed only at the positions that are scored.
Encoding follows lm-evaluation-harness: trailing spaces of the context move to the
continuation, and the continuation's tokens are those of ``encode(context +
continuation)`` past ``encode(context)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from celtk.errors import ConfigError, TaskError
from celtk.ablation import ablate
from celtk.heads import HeadSet
from celtk.models import Model
from celtk.tasks import Example, Task, build_context, continuation_delimiter


@dataclass(frozen=True)
class EvalConfig:
    """Settings that change what is scored; recorded with every result."""

    batch_size: int = 32
    fewshot: int = 0
    chat: bool = False
    seed: int = 0
    allow_code: bool = False


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
    logprob: float | list[float]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvalResult:
    examples: list[ExampleResult]

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
    """
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    special = adds_special_tokens(tokenizer, context)
    whole = tokenizer(context + continuation, add_special_tokens=special).input_ids
    ctx = tokenizer(context, add_special_tokens=special).input_ids
    return ctx, whole[len(ctx):]


CHAT_DATE = "2024-07-26"
"""The date chat templates see (``strftime_now``; Llama-3.x and SmolLM3 write "today" into the
prompt): fixed so that prompts do not change from day to day; 26 Jul 2024 is the date Llama-3.x
templates fall back to when none is given. lm-eval renders the real date."""


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
                          "drop --chat or use an instruction-tuned model.") from None
    kwargs = {"enable_thinking": False} if "smollm3" in model.architecture.lower() else {}
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True,
                                         chat_template=dated_template(template, chat_date), **kwargs)


def prepare(model: Model, task: Task, examples: Sequence[Example], shots: Sequence[Example] = (),
            chat: bool = False, chat_date: str = CHAT_DATE) -> Prepared:
    """Build and tokenise every request once."""
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
            requests.append(Request(i, tuple(ctx), tuple(cont_ids)))
    return Prepared(list(examples), requests, prompts, task.kind, bool(getattr(task, "normalize_by_length", False)))


def prepared_hash(prepared: Prepared) -> str:
    """Hash of every request's token ids (and how they are graded): any change of prompt,
    template, date, delimiter or tokenizer changes it, so a run fingerprint can refuse to mix."""
    import hashlib

    digest = hashlib.sha256(f"{prepared.kind}\0{prepared.normalize}\n".encode())
    for r in prepared.requests:
        digest.update(f"{r.example}:{','.join(map(str, r.context))}|{','.join(map(str, r.continuation))}\n".encode())
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


def decoder_hidden(model: Model, input_ids: Tensor, attention_mask: Tensor) -> Float[Tensor, "batch pos d_model"]:
    """The final-normed residual stream (bridge blocks run, so hooks fire)."""
    out = model.hf_model.model(input_ids=input_ids.to(model.device), attention_mask=attention_mask.to(model.device),
                               use_cache=False)
    return out.last_hidden_state


def unembed(model: Model, hidden: Float[Tensor, "n d_model"]) -> Float[Tensor, "n d_vocab"]:
    """Logits from final-normed residuals, as the HF head computes them (incl. soft-capping)."""
    logits = model.hf_model.lm_head(hidden).float()
    cap = getattr(model.hf_model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits


def score_hidden(model: Model, hidden: Tensor, batch: Batch, rows: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per-request summed target log-probability and all-greedy flag for one batch.

    ``rows`` remaps batch rows (used by the screener, whose batches repeat each row).
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
                   progress: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Run every batch through the model as it stands (hooks included): per-request summed
    target log-probability and all-greedy flag."""
    lp = np.zeros(len(prepared.requests))
    greedy = np.zeros(len(prepared.requests), dtype=bool)
    with torch.no_grad():
        for done, batch in enumerate(batches, start=1):
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
             heads: HeadSet | None = None, config: EvalConfig = EvalConfig(),
             progress: Callable[[int, int], None] | None = None) -> EvalResult:
    """Score ``examples`` with ``heads`` ablated (none by default). Never prints.

    Returns:
        per-example ``correct`` and the score behind it (summed target log-probability, the
        per-choice log-likelihoods, or the generated text), in the order of ``examples``.
    """
    heads = heads or HeadSet()
    with ablate(model, heads):
        if task.kind == "generate":
            return _evaluate_generation(model, task, examples, shots, config, progress)
        prepared = prepare(model, task, examples, shots, config.chat)
        batches = make_batches(prepared.requests, config.batch_size, model.tokenizer.pad_token_id)
        return aggregate(prepared, *score_requests(model, prepared, batches, progress))


def generate_greedy(model: Model, prompts: Sequence[str], max_new_tokens: int, stop: Sequence[str] = (),
                    batch_size: int = 8) -> list[str]:
    """Greedy continuations of ``prompts`` (left-padded batches), cut at the first stop string."""
    tok = model.tokenizer
    special = adds_bos(tok)
    outputs: list[str] = []
    side = tok.padding_side
    tok.padding_side = "left"
    try:
        for start in range(0, len(prompts), batch_size):
            enc = tok(list(prompts[start:start + batch_size]), return_tensors="pt", padding=True, add_special_tokens=special)
            with torch.no_grad():
                gen = model.hf_model.generate(**enc.to(model.device), do_sample=False, max_new_tokens=max_new_tokens,
                                              pad_token_id=tok.pad_token_id, stop_strings=list(stop) or None,
                                              tokenizer=tok if stop else None)
            for row in gen[:, enc.input_ids.shape[1]:]:
                text = tok.decode(row, skip_special_tokens=True)
                for s in stop:
                    text = text.split(s)[0] if s in text else text
                outputs.append(text)
    finally:
        tok.padding_side = side
    return outputs


def _evaluate_generation(model: Model, task: Task, examples: Sequence[Example], shots: Sequence[Example],
                         config: EvalConfig, progress: Callable[[int, int], None] | None) -> EvalResult:
    from celtk.tasks._sandbox import require_opt_in

    require_opt_in(config.allow_code)
    prompts = [format_prompt(model, task, e, shots, config.chat) for e in examples]
    texts = generate_greedy(model, prompts, task.max_new_tokens(), task.stop_strings(), config.batch_size)
    out = []
    for i, (example, text) in enumerate(zip(examples, texts), start=1):
        ok = task.grade_generation(example, text, config.allow_code)
        out.append(ExampleResult(example.id, bool(ok), float("nan"), {"generation": text}))
        if progress:
            progress(i, len(examples))
    return EvalResult(out)
