"""A user's own task from a JSONL file: ``jsonl:PATH``.

Generative lines ``{"id", "prompt", "target"}`` are scored like arithmetic (target
appended with no delimiter; correct iff every target token is the greedy choice).
Multiple-choice lines ``{"id", "prompt", "choices": [...], "label": i}`` are scored by
log-likelihood (acc). ``id`` defaults to the line number. All lines share one kind.
Lines with ``"split": "fewshot"`` form the few-shot pool.
"""

from __future__ import annotations

import json
from pathlib import Path

from celtk.errors import DataFormatError, TaskError
from celtk.tasks._base import Example, Pools, Task
from celtk.tasks._registry import register


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
    if "choices" in row:
        choices, label = row["choices"], row.get("label")
        if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
            raise DataFormatError(f"{where}: 'choices' must be a list of at least two strings.")
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
        ex = Example(id=ident, context=row["prompt"], target=row["target"])
        kind = "target"
    else:
        raise DataFormatError(f"{where}: a line needs either 'target' (generative) or 'choices' and 'label' (multiple choice).")
    return kind, ex, str(row.get("split", "eval"))


@register
class JsonlTask(Task):
    name = "jsonl"
    description = "your own task: jsonl:PATH with prompt+target or prompt+choices+label lines"

    def __init__(self, option: str | None = None, data_path: str | None = None) -> None:
        super().__init__(option, data_path)
        if not option:
            raise TaskError("The jsonl task needs a file: use jsonl:PATH, e.g. jsonl:data/my_task.jsonl.")
        self.path = option
        self._pools: Pools | None = None
        self._kind = self._load()

    @property
    def kind(self):  # type: ignore[override]
        return self._kind

    @property
    def target_delimiter(self) -> str:  # type: ignore[override]
        return " " if self._kind == "choice" else ""

    def _load(self) -> str:
        path = Path(self.path)
        if not path.is_file():
            raise TaskError(f"jsonl task file {self.path!r} does not exist.")
        evaluation, fewshot, kinds, ids = [], [], set(), set()
        with open(path, encoding="utf-8") as handle:
            for lineno, raw in enumerate(handle, start=1):
                if not raw.strip():
                    continue
                kind, ex, split = _parse_line(self.path, lineno, raw)
                if ex.id in ids:
                    raise DataFormatError(f"{self.path}:{lineno}: id {ex.id!r} repeats an earlier line; ids must be unique.")
                ids.add(ex.id)
                kinds.add(kind)
                (fewshot if split == "fewshot" else evaluation).append(ex)
        if len(kinds) > 1:
            raise DataFormatError(f"{self.path}: mixes generative ('target') and multiple-choice ('choices') lines; use one kind per file.")
        if not evaluation:
            raise TaskError(f"jsonl task file {self.path!r} has no examples.")
        self._pools = Pools(discovery=evaluation, heldout=None, fewshot=fewshot, source="file")
        return kinds.pop()

    def load_pools(self) -> Pools:
        assert self._pools is not None
        return self._pools
