"""Grade every HumanEval reference solution, and a wrong body, through celtk's humaneval task.

lm-eval's ``code_eval`` passes all 164 ``canonical_solution``s; so must celtk's grader, and a body
of ``return None`` must fail them all. Prints the counts and the wall time (about 0.45 s a program
as root on a 2-core machine: each runs in fresh namespaces).

    CELTK_ALLOW_CODE_EXEC=1 .venv/bin/python benchmarks/humaneval_references.py
"""

from __future__ import annotations

import time

from celtk.tasks import get_task
from celtk.tasks.humaneval import packaged_problems, read_problems


def main() -> None:
    task = get_task("humaneval")
    reference = {row["task_id"]: row["canonical_solution"] for row in read_problems(packaged_problems())}
    examples = task.load_pools().discovery
    start = time.perf_counter()
    right = [e.id for e in examples if task.grade_generation(e, reference[e.id], allow_code=True)]
    wrong = [e.id for e in examples if task.grade_generation(e, "    return None\n", allow_code=True)]
    seconds = time.perf_counter() - start
    print(f"{len(examples)} problems: reference passes {len(right)}, 'return None' passes {len(wrong)}; "
          f"{seconds:.0f} s for {2 * len(examples)} programs")
    print("references that fail:", sorted(set(reference) - set(right)) or "none")
    print("'return None' that passes:", wrong or "none")


if __name__ == "__main__":
    main()
