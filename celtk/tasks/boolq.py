"""SuperGLUE BoolQ (Clark et al. 2019) as lm-evaluation-harness scores it.

``{passage}\\nQuestion: {question}?\\nAnswer:`` and the log-likelihood of `` no`` / `` yes``.
Held-out = validation (3,270); discovery and few-shot shots come from train, disjointly.
"""

from __future__ import annotations

import random

from celtk.errors import TaskError
from celtk.tasks._base import Example, Pools, Row, Task
from celtk.tasks._hub import load_rows
from celtk.tasks._registry import register


def _example(split: str, i: int, row: Row) -> Example:
    try:
        context = f"{row['passage']}\nQuestion: {row['question']}?\nAnswer:"
        label = int(row["label"])
    except (KeyError, TypeError, ValueError) as error:
        raise TaskError(f"boolq {split} row {i} does not fit the hub schema (passage, question, label 0/1): "
                        f"{error}") from None
    if label not in (0, 1):
        raise TaskError(f"boolq {split} row {i} has label {label}; labels are 0 (no) or 1 (yes).")
    answer = ("no", "yes")[label]
    return Example(id=f"{split}-{row.get('idx', i)}", context=context, choices=("no", "yes"), label=label,
                   shot_text=f"{context} {answer}")


@register
class BoolQ(Task):
    name = "boolq"
    kind = "choice"
    description = "SuperGLUE BoolQ (hub aps/super_glue, boolq); log-likelihood of ' no' / ' yes'"
    target_delimiter = " "

    def load_pools(self) -> Pools:
        train = [_example("train", i, r)
                 for i, r in enumerate(load_rows("aps/super_glue", "boolq", "train", self.data_path))]
        valid = [_example("validation", i, r)
                 for i, r in enumerate(load_rows("aps/super_glue", "boolq", "validation", self.data_path))]
        return Pools(discovery=train, heldout=valid, fewshot=_split_fewshot(train),
                     source="file" if self.data_path else "hub")


def _split_fewshot(train: list[Example], n: int = 64) -> list[Example]:
    """Reserve a fixed slice of a training split for shots; discovery never draws from it."""
    order = list(range(len(train)))
    random.Random("celtk-fewshot").shuffle(order)
    reserved = set(order[: min(n, len(train) // 4)])
    return [train[i] for i in sorted(reserved)]
