"""A user's own task from a JSONL file: ``jsonl:PATH``.

Generative lines ``{"id", "prompt", "target"}`` are scored like arithmetic (target
appended with no delimiter; correct iff every target token is the greedy choice).
Multiple-choice lines ``{"id", "prompt", "choices": [...], "label": i}`` are scored by
log-likelihood (acc). ``id`` defaults to the line number. All lines share one kind.
Lines with ``"split": "fewshot"`` form the few-shot pool.

Generative lines can instead be graded on what the model writes:
``jsonl:PATH?grading=generate`` decodes greedily until a stop string (default: a newline;
``stop`` may repeat, ``stop=`` means none) or ``max_new_tokens`` (default 32), and an example
is correct iff the generation, stripped of surrounding whitespace, equals the stripped target.
Option values are URL-encoded (:func:`jsonl_spec` writes the spelling).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode

from celtk.errors import DataFormatError, TaskError
from celtk.tasks._base import Example, Pools, Task, lone_surrogate
from celtk.tasks._registry import register

GRADINGS = ("teacher", "generate")  # teacher-forced targets (default) or greedy generation graded by string
DEFAULT_STOP = ("\n",)
DEFAULT_MAX_NEW_TOKENS = 32
_OPTION_KEYS = ("grading", "stop", "max_new_tokens")


def jsonl_spec(path: str, grading: str = "teacher", stop: tuple[str, ...] | None = None,
               max_new_tokens: int | None = None) -> str:
    """The task name for ``get_task``, e.g. ``jsonl_spec("a.jsonl", "generate")`` →
    ``jsonl:a.jsonl?grading=generate``."""
    query: list[tuple[str, str | int]] = []
    if grading != "teacher":
        query.append(("grading", grading))
    if stop is not None:
        query += [("stop", s) for s in stop] or [("stop", "")]
    if max_new_tokens is not None:
        query.append(("max_new_tokens", max_new_tokens))
    return f"jsonl:{path}" + (f"?{urlencode(query)}" if query else "")


def _parse_option(option: str) -> tuple[str, str, tuple[str, ...], int]:
    """``PATH[?grading=…&stop=…&max_new_tokens=…]`` → path, grading, stop strings, token limit."""
    path, _, query = option.rpartition("?")
    if not path or "=" not in query:  # no options: a '?' (if any) belongs to the path
        return option, "teacher", DEFAULT_STOP, DEFAULT_MAX_NEW_TOKENS
    fields = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(fields) - set(_OPTION_KEYS))
    if unknown:
        raise TaskError(f"jsonl task option(s) {', '.join(unknown)} unknown; valid: {', '.join(_OPTION_KEYS)}.")
    grading = fields.get("grading", ["teacher"])[-1]
    if grading not in GRADINGS:
        raise TaskError(f"jsonl grading {grading!r} unknown; use one of {', '.join(GRADINGS)}.")
    if grading == "teacher" and ("stop" in fields or "max_new_tokens" in fields):
        raise TaskError("jsonl options stop and max_new_tokens apply only to grading=generate.")
    stop = tuple(s for s in fields.get("stop", DEFAULT_STOP) if s)
    limit = fields.get("max_new_tokens", [str(DEFAULT_MAX_NEW_TOKENS)])[-1]
    if not limit.isdigit() or int(limit) < 1:
        raise TaskError(f"jsonl max_new_tokens must be a positive integer, got {limit!r}.")
    return path, grading, stop, int(limit)


def _parse_line(path: str, lineno: int, raw: str) -> tuple[str, Example, str]:
    where = f"{path}:{lineno}"
    try:
        row = json.loads(raw)
    except json.JSONDecodeError as error:
        raise DataFormatError(f"{where}: not valid JSON ({error.msg} at column {error.colno}).") from None
    if not isinstance(row, dict):
        raise DataFormatError(f"{where}: each line must be a JSON object, got {type(row).__name__}.")
    if not isinstance(row.get("prompt"), str):
        raise DataFormatError(f"{where}: missing or non-string field 'prompt'; every line needs a prompt.")
    ident = str(row.get("id", lineno))
    _check_encodable(where, "id", ident)
    _check_encodable(where, "prompt", row["prompt"])
    if "choices" in row:
        choices, label = row["choices"], row.get("label")
        if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
            raise DataFormatError(f"{where}: 'choices' must be a list of at least two strings.")
        for i, choice in enumerate(choices):
            if choice == "":  # acc_norm divides a choice's log-likelihood by its length
                raise DataFormatError(f"{where}: choice {i} is the empty string; every choice needs at least one "
                                      "character to be scored.")
            _check_encodable(where, f"choices[{i}]", choice)
        if isinstance(label, bool) or not isinstance(label, int):
            raise DataFormatError(f"{where}: 'label' must be an integer index into 'choices', got {label!r}.")
        if not 0 <= label < len(choices):
            raise DataFormatError(f"{where}: label {label} is out of range; it must be 0..{len(choices) - 1}.")
        ex = Example(id=ident, context=row["prompt"], choices=tuple(choices), label=label,
                     shot_text=f"{row['prompt']} {choices[label]}")
        kind = "choice"
    elif "target" in row:
        if not isinstance(row["target"], str) or row["target"] == "":
            raise DataFormatError(f"{where}: 'target' must be a non-empty string.")
        _check_encodable(where, "target", row["target"])
        ex = Example(id=ident, context=row["prompt"], target=row["target"])
        kind = "target"
    else:
        raise DataFormatError(f"{where}: a line needs either 'target' (generative) or 'choices' and 'label' "
                              "(multiple choice).")
    return kind, ex, _split(where, row.get("split", "eval"))


def _split(where: str, split: object) -> str:
    """A line's ``split``: ``"fewshot"`` puts it in the shot pool, any other string among the evaluated lines."""
    if not isinstance(split, str):
        raise DataFormatError(f"{where}: 'split' must be a string (\"fewshot\" for the shot pool, omitted for an "
                              f"evaluated line), got {type(split).__name__} {split!r}.")
    if split != "fewshot" and split.lower().replace("-", "").replace("_", "").replace(" ", "") == "fewshot":
        raise DataFormatError(f"{where}: 'split' is {split!r}; write \"fewshot\" exactly to put the line in the "
                              "shot pool.")
    return split


def _check_encodable(where: str, name: str, text: str) -> None:
    """Refuse a lone UTF-16 surrogate (JSON ``"\\ud800"``): no tokenizer or hash can encode it."""
    at = lone_surrogate(text)
    if at is not None:
        raise DataFormatError(f"{where}: '{name}' holds a lone surrogate {text[at]!r} at character "
                              f"{at} (half of a UTF-16 pair, as the escape \\ud800 writes one); write the "
                              "character itself or its whole pair.")


@register
class JsonlTask(Task):
    name = "jsonl"
    description = ("your own task: jsonl:PATH with prompt+target or prompt+choices+label lines (?grading=generate: "
                   "graded on the generation)")

    def __init__(self, option: str | None = None, data_path: str | None = None) -> None:
        super().__init__(option, data_path)
        if not option:
            raise TaskError("The jsonl task needs a file: use jsonl:PATH, e.g. jsonl:data/my_task.jsonl.")
        self.path, self.grading, self.stop, self.limit = _parse_option(option)
        self._pools: Pools | None = None
        self._kind = self._load()

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self._kind

    @property
    def target_delimiter(self) -> str:  # type: ignore[override]
        return " " if self._kind == "choice" else ""

    def config(self) -> dict[str, object]:
        out = super().config()
        if self.grading == "generate":
            out.update(grading="generate", stop=list(self.stop), max_new_tokens=self.limit)
        return out

    def stop_strings(self) -> list[str]:
        return list(self.stop)

    def max_new_tokens(self) -> int:
        return self.limit

    def grade_generation(self, example: Example, text: str, allow_code: bool) -> bool:
        """Correct iff the generation equals the target, both stripped of surrounding whitespace."""
        return text.strip() == (example.target or "").strip()

    def _check_generate(self, lineno: int, kind: str, ex: Example) -> None:
        where = f"{self.path}:{lineno}"
        if kind != "target":
            raise DataFormatError(f"{where}: grading=generate needs prompt+target lines; multiple-choice lines are "
                                  "scored by log-likelihood, so drop ?grading=generate for this file.")
        target = (ex.target or "").strip()
        if not target:
            raise DataFormatError(f"{where}: 'target' is only whitespace; generate grading compares stripped text, "
                                  "so every target needs a visible character.")
        for stop in self.stop:
            if stop in target:
                raise DataFormatError(f"{where}: target {target!r} contains the stop string {stop!r}, so no generation "
                                      "(cut at the stop) could equal it; change the stop (&stop=…) or the target.")

    def _load(self) -> str:
        path = Path(self.path)
        if not path.is_file():
            raise TaskError(f"jsonl task file {self.path!r} does not exist.")
        evaluation: list[Example] = []
        fewshot: list[Example] = []
        kinds, ids = set(), set()
        with open(path, "rb") as handle:
            for lineno, raw in enumerate(utf8_lines(handle, self.path), start=1):
                if not raw.strip():
                    continue
                kind, ex, split = _parse_line(self.path, lineno, raw)
                if ex.id in ids:
                    raise DataFormatError(f"{self.path}:{lineno}: id {ex.id!r} repeats an earlier line; ids must be "
                                          "unique.")
                if self.grading == "generate":
                    self._check_generate(lineno, kind, ex)
                ids.add(ex.id)
                kinds.add(kind)
                (fewshot if split == "fewshot" else evaluation).append(ex)
        if len(kinds) > 1:
            raise DataFormatError(f"{self.path}: mixes generative ('target') and multiple-choice ('choices') lines; "
                                  "use one kind per file.")
        if not evaluation:
            raise TaskError(f"jsonl task file {self.path!r} has no examples.")
        self._pools = Pools(discovery=evaluation, heldout=None, fewshot=fewshot, source="file")
        return "generate" if self.grading == "generate" else kinds.pop()

    def load_pools(self) -> Pools:
        assert self._pools is not None
        return self._pools


def utf8_lines(handle: Iterable[bytes], where: str) -> Iterator[str]:
    """The lines of a binary ``handle`` as text; a line that is not UTF-8 is refused with its number."""
    for lineno, raw in enumerate(handle, start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataFormatError(f"{where}:{lineno}: not UTF-8 text (byte {error.start} of the line); "
                                  "save the file as UTF-8.") from None
