"""The task protocol: examples, few-shot pools, prompt building and grading rules.

A task knows nothing of models or search. It yields :class:`Example` objects of one
of three kinds:

* ``target`` — a fixed continuation; correct iff every target token is the greedy choice.
* ``choice`` — multiple choice scored by log-likelihood of each choice.
* ``generate`` — free generation graded by a task function (MBPP).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from celtk.errors import TaskError

Kind = Literal["target", "choice", "generate"]

Row = dict[str, Any]
"""One row of a task's data as read (a JSON object or a ``datasets`` row): field names to JSON values."""


@dataclass(frozen=True)
class Example:
    """One evaluable item. ``context`` is the prompt without few-shot shots."""

    id: str
    context: str
    target: str | None = None
    choices: tuple[str, ...] | None = None
    label: int | None = None
    shot_text: str | None = None  # how this example reads as a solved shot (context + answer)
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def content_hash(self) -> str:
        """Hash of what the model sees and what is graded; used to prove split disjointness."""
        payload = json.dumps([self.context, self.target, self.choices, self.label], ensure_ascii=False)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Pools:
    """Where discovery, held-out and few-shot examples may come from.

    When ``heldout`` is None, discovery and held-out are drawn disjointly from ``discovery``.
    ``reserved``: rows of the task's evaluation data it set aside, before ``discovery``, as its
    few-shot pool (never evaluated, whatever the shot count), so that splits can name them.
    """

    discovery: list[Example]
    heldout: list[Example] | None
    fewshot: list[Example]
    source: str  # "hub" | "generator" | "fixture" | "file"
    reserved: list[Example] = field(default_factory=list)


class Task:
    """Base class; subclasses set ``name``, ``kind`` and implement :meth:`load_pools`."""

    name: ClassVar[str] = ""
    kind: ClassVar[Kind] = "target"
    description: ClassVar[str] = ""
    target_delimiter: ClassVar[str] = ""  # between context and answer, as lm-eval's target_delimiter
    fewshot_delimiter: ClassVar[str] = "\n\n"
    runs_code: ClassVar[bool] = False  # grading executes what the model writes (sandboxed, opt-in)

    def __init__(self, option: str | None = None, data_path: str | os.PathLike[str] | None = None) -> None:
        self.option = option
        self.data_path = os.fspath(data_path) if data_path is not None else None  # a Path too; recorded as text

    @property
    def full_name(self) -> str:
        return f"{self.name}:{self.option}" if self.option else self.name

    def load_pools(self) -> Pools:
        raise NotImplementedError

    def config(self) -> dict[str, object]:
        return {"task": self.full_name, "kind": self.kind, "data_path": self.data_path}

    def grade_generation(self, example: Example, text: str, allow_code: bool) -> bool:
        raise NotImplementedError(f"task {self.name} has no generation grader")

    def stop_strings(self) -> list[str]:
        return []

    def max_new_tokens(self) -> int:
        return 256


def lone_surrogate(text: str) -> int | None:
    """Where ``text`` holds a lone UTF-16 surrogate (JSON ``"\\ud800"``), which no tokenizer or hash can encode;
    ``None`` when it holds none."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def draw_shots(pool: list[Example], k: int, seed: int) -> list[Example]:
    """``k`` shots drawn reproducibly from ``pool`` (one fixed set shared by every example)."""
    if k == 0:
        return []
    if k > len(pool):
        raise TaskError(f"fewshot={k} (--fewshot {k}) needs {k} shots but the few-shot pool has only {len(pool)} "
                        f"examples; use --fewshot {len(pool)} or fewer.")
    return random.Random(seed).sample(pool, k)


def build_context(task: Task, example: Example, shots: list[Example]) -> str:
    """The full prompt: shots (each context + delimiter + answer) then the example's context."""
    parts = [s.shot_text if s.shot_text is not None else s.context + task.target_delimiter + (s.target or "")
             for s in shots]
    return task.fewshot_delimiter.join([*parts, example.context])


def continuation_delimiter(task: Task, chat: bool) -> str:
    """What goes between the prompt and each scored choice: ``task.target_delimiter``, except
    under a chat template, where lm-eval drops it for multiple choice (the answer starts the
    assistant turn). Fixed-target tasks carry any space in the target itself (`` 143``)."""
    if task.kind == "choice" and chat:
        return ""
    return task.target_delimiter if task.kind == "choice" else ""
