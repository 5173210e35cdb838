"""The GPT-3 arithmetic suite (Brown et al. 2020) as lm-evaluation-harness scores it.

Context ``Question: What is 98 plus 45?\\nAnswer:``, target `` 143``, no delimiter;
correct iff every target token is the greedy choice.

Offline generator: the GPT-3 paper defines the data as follows, and the generator
draws it the same way. ``Nda``/``Nds``/``2dm``: two integers drawn uniformly from
``[0, 10**N)``, added / subtracted (answers may be negative) / multiplied. ``1dc``:
three integers uniform on ``[0, 10)`` and two operators uniform on ``{+, -, *}``, with
parentheses around the last two (``What is 6+(4*8)?``). Each subtask's pool has 2,000
examples, as the hub's validation split; the few-shot pool is drawn with another seed
and never repeats a question of the evaluation pool.
"""

from __future__ import annotations

import random

from celtk.errors import TaskError
from celtk.tasks._base import Example, Pools, Task
from celtk.tasks._hub import load_rows
from celtk.tasks._registry import register

SUBTASKS = ("1dc", "2da", "2dm", "2ds", "3da", "3ds", "4da", "4ds", "5da", "5ds")
_WORDS = {"a": ("plus", lambda x, y: x + y), "s": ("minus", lambda x, y: x - y), "m": ("times", lambda x, y: x * y)}
_OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}
POOL_SIZE = 2000


def _question(sub: str, rng: random.Random) -> tuple[str, int]:
    if sub == "1dc":
        a, b, c = (rng.randrange(10) for _ in range(3))
        o1, o2 = rng.choice("+-*"), rng.choice("+-*")
        return f"{a}{o1}({b}{o2}{c})", _OPS[o1](a, _OPS[o2](b, c))
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


@register
class Arithmetic(Task):
    name = "arithmetic"
    kind = "target"
    description = "GPT-3 arithmetic (10 subtasks; ':2da' picks one); offline generator or hub EleutherAI/arithmetic"
    target_delimiter = ""

    def __init__(self, option: str | None = None, data_path: str | None = None) -> None:
        super().__init__(option, data_path)
        if option is not None and option not in SUBTASKS:
            from celtk.errors import suggest

            raise TaskError(f"Unknown arithmetic subtask {option!r}.{suggest(option, SUBTASKS)}")
        self.subtasks = (option,) if option else SUBTASKS

    def load_pools(self) -> Pools:
        if self.data_path is None or self.data_path == "generator":
            evaluation = [e for sub in self.subtasks for e in generate(sub, POOL_SIZE, seed=0)]
            source = "generator"
        else:
            evaluation = [e for sub in self.subtasks for e in self._hub_rows(sub)]
            source = "hub" if self.data_path == "hub" else "file"
        seen = {e.content_hash for e in evaluation}
        shots = [e for sub in self.subtasks for e in generate(sub, 200, seed=1) if e.content_hash not in seen]
        shots = [Example(id=f"shot-{e.id}", context=e.context, target=e.target, meta=e.meta) for e in shots]
        return Pools(discovery=evaluation, heldout=None, fewshot=shots, source=source)

    def _hub_rows(self, sub: str) -> list[Example]:
        rows = load_rows("EleutherAI/arithmetic", f"arithmetic_{sub}", "validation", self._sub_path(sub))
        examples = []
        for i, row in enumerate(rows):
            if "context" not in row or "completion" not in row:
                raise TaskError(f"arithmetic row {i} of {sub} lacks 'context'/'completion' (hub schema): {row}")
            examples.append(Example(id=f"{sub}-{i}", context=row["context"], target=row["completion"], meta={"subtask": sub}))
        return examples

    def _sub_path(self, sub: str) -> str | None:
        from pathlib import Path

        if self.data_path in (None, "hub"):
            return None
        path = Path(self.data_path)
        if path.is_dir() and (path / f"arithmetic_{sub}").is_dir():
            return str(path / f"arithmetic_{sub}")
        return str(path)

    def config(self) -> dict:
        return {**super().config(), "subtasks": list(self.subtasks)}
