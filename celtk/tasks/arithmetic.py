"""The GPT-3 arithmetic suite (Brown et al. 2020) as lm-evaluation-harness scores it.

Context ``Question: What is 98 plus 45?\\nAnswer:``, target `` 143``, no delimiter;
correct iff every target token is the greedy choice.

Official data: the raw GPT-3 files (``two_digit_addition.jsonl`` ...: one
``{"context": "\\n\\nQ: What is 98 plus 45?\\n\\nA:", "completion": " 143"}`` a line), read
from a local copy or from the hub's data files (``EleutherAI/arithmetic/data/*.jsonl``, the
files lm-eval 0.4 reads, without the dataset's loading script), normalised by
:func:`normalize_context` as lm-eval does. Its shots come from the official data too: the
pool is split once into an evaluation part and a few-shot part of :data:`SHOT_POOL` rows.

Offline generator: the GPT-3 paper defines the data as follows, and the generator
draws it the same way. ``Nda``/``Nds``/``2dm``: two integers drawn uniformly from
``[0, 10**N)``, added / subtracted (answers may be negative) / multiplied. ``1dc``:
three integers uniform on ``[0, 10)`` and two operators uniform on ``{+, -, *}``,
written as the official files write them (``What is (2 * 4) * 6?``). Each subtask's pool
has 2,000 examples, as the official files; the few-shot pool is drawn with another seed
and never repeats a question of the evaluation pool.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

from celtk.errors import DataFormatError, TaskError, suggest
from celtk.tasks._base import Example, Pools, Row, Task
from celtk.tasks._hub import load_json_rows
from celtk.tasks._registry import register

SUBTASKS = ("1dc", "2da", "2dm", "2ds", "3da", "3ds", "4da", "4ds", "5da", "5ds")
OFFICIAL_FILES = {
    "1dc": "single_digit_three_ops", "2da": "two_digit_addition", "2dm": "two_digit_multiplication",
    "2ds": "two_digit_subtraction", "3da": "three_digit_addition", "3ds": "three_digit_subtraction",
    "4da": "four_digit_addition", "4ds": "four_digit_subtraction", "5da": "five_digit_addition",
    "5ds": "five_digit_subtraction",
}
SUBTASK_DESCRIPTIONS = {  # what `celtk tasks` lists under arithmetic
    "1dc": "one-digit composite: three digits, two operators (+, -, *), e.g. (2 * 4) * 6",
    "2da": "two-digit addition, e.g. 98 plus 45",
    "2dm": "two-digit multiplication, e.g. 12 times 34",
    "2ds": "two-digit subtraction (answers may be negative), e.g. 45 minus 98",
    "3da": "three-digit addition",
    "3ds": "three-digit subtraction",
    "4da": "four-digit addition",
    "4ds": "four-digit subtraction",
    "5da": "five-digit addition",
    "5ds": "five-digit subtraction",
}
HUB_DATA = "hf://datasets/EleutherAI/arithmetic/data/{file}.jsonl"  # what lm-eval 0.4's arithmetic yaml reads
SHOT_POOL = 100  # official rows per subtask set aside for shots (never evaluated)
_WORDS: dict[str, tuple[str, Callable[[int, int], int]]] = {
    "a": ("plus", lambda x, y: x + y), "s": ("minus", lambda x, y: x - y), "m": ("times", lambda x, y: x * y)}
_OPS: dict[str, Callable[[int, int], int]] = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}
POOL_SIZE = 2000


def normalize_context(raw: str) -> str:
    """lm-eval's ``arithmetic`` ``process_docs`` (the old loading script's steps), verbatim:
    ``"\\n\\nQ: What is 98 plus 45?\\n\\nA:"`` -> ``"Question: What is 98 plus 45?\\nAnswer:"``."""
    return raw.strip().replace("\n\n", "\n").replace("Q:", "Question:").replace("A:", "Answer:")


def _question(sub: str, rng: random.Random) -> tuple[str, int]:
    if sub == "1dc":
        a, b, c = (rng.randrange(10) for _ in range(3))
        o1, o2 = rng.choice("+-*"), rng.choice("+-*")
        return f"({a} {o1} {b}) {o2} {c}", _OPS[o2](_OPS[o1](a, b), c)
    digits, op = int(sub[0]), sub[2]
    x, y = rng.randrange(10**digits), rng.randrange(10**digits)
    word, fn = _WORDS[op]
    return f"{x} {word} {y}", fn(x, y)


def make_example(sub: str, index: int, question: str, answer: str) -> Example:
    context = f"Question: What is {question}?\nAnswer:"
    return Example(id=f"{sub}-{index}", context=context, target=answer, meta={"subtask": sub})


def generate(sub: str, n: int, seed: int) -> list[Example]:
    """``n`` examples of subtask ``sub`` drawn as GPT-3's generator draws them."""
    rng = random.Random(f"celtk-arithmetic-{sub}-{seed}")
    out = []
    for i in range(n):
        question, value = _question(sub, rng)
        out.append(make_example(sub, i, question, f" {value}"))
    return out


_OPERAND = r"\d+"
_QUESTIONS = {  # what a subtask's (normalised) question looks like, so one subtask's file cannot pass as another's
    **{sub: re.compile(rf"Question: What is (\d+) {_WORDS[sub[2]][0]} (\d+)\?\nAnswer:")
       for sub in SUBTASKS if sub != "1dc"},
    "1dc": re.compile(r"Question: What is \(\d [-+*] \d\) [-+*] \d\?\nAnswer:"),
}


def check_subtask(sub: str, context: str, where: str) -> None:
    """Refuse a question that is not one of subtask ``sub``'s (operator word, operand digits)."""
    match = _QUESTIONS[sub].fullmatch(context)
    ok = match is not None and (sub == "1dc" or all(len(x) <= int(sub[0]) for x in match.groups()))
    if not ok:
        raise DataFormatError(f"{where}: {context!r} is not a question of arithmetic subtask {sub} "
                              f"({OFFICIAL_FILES[sub]}); give that subtask's file, or name the subtask the file "
                              "holds (e.g. arithmetic:2da for two_digit_addition.jsonl).")


def official_examples(sub: str, rows: list[Row], where: str) -> list[Example]:
    """Raw GPT-3 rows (or rows already normalised) -> examples, normalised as lm-eval does; every
    row must be a question of subtask ``sub`` (:func:`check_subtask`)."""
    examples = []
    for i, row in enumerate(rows):
        if not isinstance(row.get("context"), str) or not isinstance(row.get("completion"), str):
            raise DataFormatError(f"{where}: row {i} lacks string 'context'/'completion' (the GPT-3 arithmetic "
                                  f"schema): {row}")
        context = normalize_context(row["context"])
        check_subtask(sub, context, f"{where} row {i}")
        examples.append(Example(id=f"{sub}-{i}", context=context, target=row["completion"], meta={"subtask": sub}))
    return examples


def split_official(examples: list[Example], n_shots: int = SHOT_POOL) -> tuple[list[Example], list[Example]]:
    """A fixed, seeded split of one subtask's official rows into (evaluation, few-shot pool)."""
    order = list(range(len(examples)))
    random.Random("celtk-arithmetic-shots").shuffle(order)
    reserved = set(order[: min(n_shots, len(examples) // 4)])
    shots = [Example(id=f"shot-{e.id}", context=e.context, target=e.target, meta=e.meta)
             for i, e in enumerate(examples) if i in reserved]
    return [e for i, e in enumerate(examples) if i not in reserved], shots


@register
class Arithmetic(Task):
    name = "arithmetic"
    kind = "target"
    description = ("GPT-3 arithmetic (10 subtasks; ':2da' picks one); offline generator, or the official files "
                   "(--data hub|PATH)")
    target_delimiter = ""
    option_descriptions = SUBTASK_DESCRIPTIONS  # `celtk tasks` lists them (arithmetic:2da, ...)

    def __init__(self, option: str | None = None, data_path: str | None = None) -> None:
        super().__init__(option, data_path)
        if option is not None and option not in SUBTASKS:
            raise TaskError(f"Unknown arithmetic subtask {option!r}.{suggest(option, SUBTASKS)}")
        self.subtasks = (option,) if option else SUBTASKS

    def load_pools(self) -> Pools:
        if self.data_path is None or self.data_path == "generator":
            evaluation = [e for sub in self.subtasks for e in generate(sub, POOL_SIZE, seed=0)]
            seen = {e.content_hash for e in evaluation}
            shots = [e for sub in self.subtasks for e in generate(sub, 200, seed=1) if e.content_hash not in seen]
            shots = [Example(id=f"shot-{e.id}", context=e.context, target=e.target, meta=e.meta) for e in shots]
            return Pools(discovery=evaluation, heldout=None, fewshot=shots, source="generator")
        evaluation, shots, reserved = [], [], []
        for sub in self.subtasks:
            rows = self._official_rows(sub)
            part, pool = split_official(rows)
            kept = {e.id for e in part}
            evaluation += part
            shots += pool
            reserved += [e for e in rows if e.id not in kept]
        return Pools(discovery=evaluation, heldout=None, fewshot=shots,
                     source="hub" if self.data_path == "hub" else "file", reserved=reserved)

    def _official_rows(self, sub: str) -> list[Example]:
        source = HUB_DATA.format(file=OFFICIAL_FILES[sub]) if self.data_path == "hub" else self._local_file(sub)
        return official_examples(sub, load_json_rows(source), source)

    def _local_file(self, sub: str) -> str:
        """A subtask's file in a local copy: the hub layout (``data/two_digit_addition.jsonl``),
        the files side by side, or the older ``arithmetic_2da/validation.jsonl``; or one file."""
        assert self.data_path is not None
        path = Path(self.data_path)
        if path.is_file():
            if len(self.subtasks) > 1:  # one file holds one subtask: it must not stand in for all ten
                raise TaskError(f"{self.data_path} is one file, which holds one arithmetic subtask; name it "
                                f"(e.g. --task arithmetic:2da --data {self.data_path}), or give the directory that "
                                "holds the ten GPT-3 files (the hub's EleutherAI/arithmetic layout).")
            return str(path)
        name = OFFICIAL_FILES[sub]
        candidates = [path / "data" / f"{name}.jsonl", path / f"{name}.jsonl",
                      path / f"arithmetic_{sub}" / "validation.jsonl"]
        for candidate in candidates:
            if candidate.is_file():
                return str(candidate)
        raise TaskError(f"No arithmetic data for {sub} under {self.data_path}: expected one of "
                        f"{', '.join(str(c) for c in candidates)} (the GPT-3 files, as on the hub's "
                        "EleutherAI/arithmetic).")

    def config(self) -> dict[str, object]:
        return {**super().config(), "subtasks": list(self.subtasks)}
