"""MBPP (Austin et al. 2021) with lm-evaluation-harness's 3-shot ``[BEGIN]``/``[DONE]`` prompt.

Greedy generation until ``[DONE]``; pass@1 by running, in the sandbox
(:mod:`celtk.tasks._sandbox`), the program lm-eval's ``code_eval`` runs: the generation, a
newline, the three ``test_list`` assertions (no ``test_setup_code``, no challenge tests). It
passes only if every statement ran without raising. Held-out = test (500); discovery from train
(374); shots are task_ids 2, 3 and 4 of the ``prompt`` split, lm-eval's fixed ``first_n`` list.
Running model-written code is opt-in.
"""

from __future__ import annotations

from celtk.errors import TaskError
from celtk.tasks._base import Example, Pools, Row, Task
from celtk.tasks._hub import load_rows
from celtk.tasks._registry import register
from celtk.tasks._sandbox import run_untrusted

# lm-eval's mbpp task lists these prompt-split rows as its three shots (utils.list_fewshot_samples)
LM_EVAL_SHOT_IDS = (2, 3, 4)


def _example(split: str, i: int, row: Row) -> Example:
    try:
        tests = list(row["test_list"])
        context = (f"You are an expert Python programmer, and here is your task: {row['text']} "
                   f"Your code should pass these tests:\n\n{tests[0]}\n{tests[1]}\n{tests[2]}\n[BEGIN]\n")
        code = row["code"]
    except (KeyError, IndexError, TypeError) as error:
        raise TaskError(f"mbpp {split} row {i} does not fit the hub schema (text, code, test_list with 3 tests): "
                        f"{error}") from None
    return Example(id=f"{split}-{row.get('task_id', i)}", context=context, shot_text=f"{context}{code}\n[DONE]",
                   meta={"tests": tests, "setup": row.get("test_setup_code", "") or ""})


@register
class MBPP(Task):
    name = "mbpp"
    kind = "generate"
    runs_code = True
    description = "MBPP (hub google-research-datasets/mbpp, full); 3-shot, pass@1 in a sandbox (opt-in)"
    fewshot_sampler = "first_n"

    def load_pools(self) -> Pools:
        def rows(split: str) -> list[Example]:
            return [_example(split, i, r)
                    for i, r in enumerate(load_rows("google-research-datasets/mbpp", "full", split, self.data_path))]

        prompt = rows("prompt")
        first = {f"prompt-{i}": i for i in LM_EVAL_SHOT_IDS}
        shots = (sorted((e for e in prompt if e.id in first), key=lambda e: first[e.id])
                 + [e for e in prompt if e.id not in first])
        return Pools(discovery=rows("train"), heldout=rows("test"), fewshot=shots,
                     source="file" if self.data_path else "hub")

    def stop_strings(self) -> list[str]:
        return ["[DONE]"]

    def max_new_tokens(self) -> int:
        return 256

    def grade_generation(self, example: Example, text: str, allow_code: bool) -> bool:
        return run_untrusted(program_for(example, text), allow=allow_code).passed


def program_for(example: Example, text: str) -> str:
    """What lm-eval's ``code_eval`` executes: the generation cut at ``[DONE]``, then the tests."""
    return text.split("[DONE]")[0] + "\n" + "\n".join(example.meta["tests"][:3])
