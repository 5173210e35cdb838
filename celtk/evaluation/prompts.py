"""Prompts and their tokens: the fixed chat date, chat templates, lm-evaluation-harness encoding, and
:func:`prepare`, which tokenises every request once.

Encoding follows lm-evaluation-harness: trailing spaces of the context move to the continuation, and the
continuation's tokens are those of ``encode(context + continuation)`` past ``encode(context)``.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from celtk.errors import ConfigError, TaskError
from celtk.models import Model
from celtk.tasks import Example, Task, build_context, continuation_delimiter

CHAT_DATE = "2024-07-26"
"""The date chat templates see (``strftime_now``; Llama-3.x and SmolLM3 write "today" into the
prompt): fixed so that prompts do not change from day to day; 26 Jul 2024 is the date Llama-3.x
templates fall back to when none is given. lm-eval renders the real date."""


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
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                             add_generation_prompt=True,
                                             chat_template=dated_template(template, chat_date), **kwargs)
    return cast(str, rendered)  # tokenize=False: the rendered text


def check_context(model: Model, example_id: str, prompt: int, continuation: int, kind: str = "target") -> None:
    """Refuse, before any forward pass, an example whose prompt (``prompt`` tokens) and continuation
    (``continuation`` tokens: the target, a choice, or the generation limit) need more positions than
    the model reads (:attr:`celtk.models.Model.n_ctx`). The model reads every token but the last.

    lm-eval cuts such a prompt from the left; celtk refuses instead of scoring a prompt the task did
    not write (and instead of an attention matrix that grows with the square of the length)."""
    n_ctx = model.n_ctx
    needed = prompt + continuation - 1
    if n_ctx is not None and needed > n_ctx:
        raise TaskError(f"Example {example_id}: its prompt ({prompt:,} tokens) and {kind} ({continuation:,} tokens) "
                        f"need {needed:,} positions, but {model.name} reads at most {n_ctx:,} ({model.n_ctx_source} "
                        f"in its config). Shorten that example's prompt, use fewer shots (--fewshot), or use a model "
                        "with a longer context.")


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
                raise TaskError(f"Example {example.id}: its target {cont!r} encodes to no tokens; every target needs "
                                "at least one token.")
            check_context(model, example.id, len(ctx), len(cont_ids), "target" if task.kind == "target" else "choice")
            requests.append(Request(i, tuple(ctx), tuple(cont_ids)))
    return Prepared(list(examples), requests, prompts, task.kind, bool(getattr(task, "normalize_by_length", False)))


def prepared_hash(prepared: Prepared) -> str:
    """Hash of every request's token ids (and how they are graded): any change of prompt,
    template, date, delimiter or tokenizer changes it, so a run fingerprint can refuse to mix."""
    digest = hashlib.sha256(f"{prepared.kind}\0{prepared.normalize}\n".encode())
    for r in prepared.requests:
        digest.update(f"{r.example}:{','.join(map(str, r.context))}|{','.join(map(str, r.continuation))}\n".encode())
    if prepared.kind == "generate":  # graded by generation: no scored requests, so the prompts themselves
        for example, prompt in zip(prepared.examples, prepared.prompts, strict=True):
            digest.update(f"{example.id}:{prompt}\n".encode())
    return digest.hexdigest()[:16]


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


MIN_SHARED_PREFIX = 8  # tokens; below this, sharing a prefix (the screen's, the held-out passes') is not worth it


def shared_prefix_length(requests: Sequence[Request]) -> int:
    """Tokens shared by every request's context, leaving at least one context token each
    (the first scored position reads the last context token)."""
    if not requests:
        return 0
    first = requests[0].context
    limit = min(len(r.context) for r in requests) - 1
    n = 0
    while n < limit and all(r.context[n] == first[n] for r in requests):
        n += 1
    return n
