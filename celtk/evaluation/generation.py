"""Greedy generation, shared by the plain path and the generation screener: when a generation stops
(:class:`StopRule`), left-padded batched decoding with a KV cache, and grading a generated text."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
from jaxtyping import Int
from torch import Tensor

from celtk.ablation_kinds import Ablation, AblationKind
from celtk.errors import ConfigError
from celtk.evaluation.prompts import format_prompt, prompt_ids
from celtk.evaluation.results import EvalConfig, EvalResult, ExampleResult
from celtk.evaluation.scoring import unembed
from celtk.models import Model
from celtk.registry import annotation_names
from celtk.tasks import Example, Task, require_opt_in

if TYPE_CHECKING:  # transformers loads where a generation runs, not with this module
    from transformers import DynamicCache

__getattr__ = annotation_names({"DynamicCache": "transformers"})  # what the type checks under pytest resolve


@runtime_checkable
class Decoder(Protocol):
    """What a :class:`StopRule` reads of a tokenizer: token ids back to text."""

    def decode(self, token_ids: list[int], skip_special_tokens: bool = ...) -> str: ...


def refuse_resample_generation(ablation: Ablation | AblationKind) -> None:
    """Resample ablation is defined on the positions teacher forcing reads; a generation runs past them."""
    if (ablation.kind if isinstance(ablation, Ablation) else ablation).name == "resample":
        raise ConfigError("Resample ablation is not offered for generation-graded tasks: a greedy generation reads "
                          "positions no reference example has, and its left-padded batches move every position. Use "
                          "zero, mean or scale:α.")


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
            raise ConfigError(f"max_new_tokens = {max_new_tokens:,} cannot fit in the context of {model.name}, which "
                              f"reads at most {model.n_ctx:,} positions ({model.n_ctx_source} in its config) for "
                              f"prompt and generation together; use --max-new-tokens below {model.n_ctx:,} (the "
                              "prompt's length comes off it too).")
        eos = getattr(model.hf_model.generation_config, "eos_token_id", None)  # what HF generate stops on
        eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        return cls(tuple(s for s in stop if s), frozenset(eos), max_new_tokens)

    def text(self, tokenizer: Decoder, tokens: Sequence[int]) -> str:
        text: str = tokenizer.decode(list(tokens), skip_special_tokens=True)
        cuts = [text.index(s) for s in self.stop if s in text]
        return text[:min(cuts)] if cuts else text

    def done(self, tokenizer: Decoder, tokens: Sequence[int]) -> bool:
        if len(tokens) >= self.max_new_tokens or (tokens and tokens[-1] in self.eos):
            return True
        return bool(self.stop) and any(s in tokenizer.decode(list(tokens), skip_special_tokens=True) for s in self.stop)


def new_cache(model: Model) -> DynamicCache:
    """An empty KV cache of the kind HF generation makes for this model (sliding layers included)."""
    from transformers import DynamicCache

    return DynamicCache(config=model.hf_model.config)


def decode_step(model: Model, tokens: Int[Tensor, " rows"], attention_mask: Int[Tensor, "rows cols"],
                positions: Int[Tensor, " rows"], cache: DynamicCache) -> Int[Tensor, " rows"]:
    """Append one token per row to ``cache`` and return each row's greedy next token.

    ``attention_mask`` covers every cached column plus the new one; ``positions`` are the new
    tokens' position ids (the row's count of real tokens before it, as HF's left-padded generation).
    """
    hidden = model.arch.decoder(input_ids=tokens[:, None].to(model.device),
                                attention_mask=attention_mask.to(model.device),
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
                for row, tok in zip(made, nxt.tolist(), strict=True):
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


def evaluate_generation(model: Model, task: Task, examples: Sequence[Example], shots: Sequence[Example],
                         config: EvalConfig, progress: Callable[[int, int], None] | None) -> EvalResult:
    if task.runs_code:
        require_opt_in(config.allow_code)
    prompts = [format_prompt(model, task, e, shots, config.chat, config.chat_date) for e in examples]
    rule = StopRule.for_task(model, task)
    made = generate_tokens(model, prompt_ids(model, prompts, examples, rule.max_new_tokens), rule, config.batch_size)
    out = []
    for i, (example, tokens) in enumerate(zip(examples, made, strict=True), start=1):
        out.append(generation_result(task, example, rule.text(model.tokenizer, tokens), len(tokens), config.allow_code))
        if progress:
            progress(i, len(examples))
    return EvalResult(out)
