"""HellaSwag (Zellers et al. 2019) with lm-evaluation-harness's preprocessing.

Query ``activity_label: ctx_a + " " + ctx_b.capitalize()`` with bracket clean-up;
choices scored by log-likelihood; ``correct`` is acc_norm (log-likelihood divided by the
choice's character length); acc is reported beside it. Held-out = validation (10,042).
"""

from __future__ import annotations

import re

from celtk.errors import TaskError
from celtk.tasks._base import Example, Pools, Row, Task
from celtk.tasks._hub import load_rows
from celtk.tasks._registry import register
from celtk.tasks.boolq import _split_fewshot


def preprocess(text: str) -> str:
    text = text.strip()
    text = text.replace(" [title]", ". ")  # WikiHow artefacts
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def _example(split: str, i: int, row: Row) -> Example:
    try:
        ctx = row["ctx_a"] + " " + row["ctx_b"].capitalize()
        query = preprocess(row["activity_label"] + ": " + ctx)
        choices = tuple(preprocess(e) for e in row["endings"])
        label = int(row["label"]) if str(row["label"]).strip() != "" else None
    except (KeyError, TypeError, ValueError) as error:
        raise TaskError(f"hellaswag {split} row {i} does not fit the hub schema (activity_label, ctx_a, ctx_b, "
                        f"endings, label): {error}") from None
    if label is not None and not 0 <= label < len(choices):
        raise TaskError(f"hellaswag {split} row {i} has label {label}; it must index one of its {len(choices)} "
                        "endings.")
    shot = f"{query} {choices[label]}" if label is not None else None
    return Example(id=f"{split}-{row.get('ind', i)}", context=query, choices=choices, label=label, shot_text=shot)


@register
class HellaSwag(Task):
    name = "hellaswag"
    kind = "choice"
    description = "HellaSwag (hub Rowan/hellaswag); acc_norm, acc reported too"
    target_delimiter = " "
    normalize_by_length = True

    def load_pools(self) -> Pools:
        train = [_example("train", i, r)
                 for i, r in enumerate(load_rows("Rowan/hellaswag", None, "train", self.data_path))]
        valid = [_example("validation", i, r)
                 for i, r in enumerate(load_rows("Rowan/hellaswag", None, "validation", self.data_path))]
        return Pools(discovery=train, heldout=valid, fewshot=_split_fewshot(train),
                     source="file" if self.data_path else "hub")
