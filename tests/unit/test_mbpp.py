"""MBPP as lm-eval's ``mbpp`` task runs it: the same shots, the same program, the same verdicts."""

import json
import shutil
from pathlib import Path

import pytest

from celtk.tasks import get_task, make_splits
from celtk.tasks.mbpp import program_for

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "mbpp"


def _row(task_id: int, name: str, setup: str = "") -> dict:
    return {"task_id": task_id, "text": f"Write {name}.", "code": f"def {name}(a, b):\n    return a + b",
            "test_list": [f"assert {name}(1, 2) == 3", f"assert {name}(0, 0) == 0", f"assert {name}(2, 2) == 4"],
            "test_setup_code": setup, "challenge_test_list": [f"assert {name}(9, 9) == 0"]}


@pytest.fixture
def data(tmp_path):
    """The hub's layout: the prompt split holds task_ids 1 to 10, in order; one test row has setup code."""
    for split in ("train", "test"):
        shutil.copy(FIX / f"{split}.jsonl", tmp_path / f"{split}.jsonl")
    (tmp_path / "prompt.jsonl").write_text("".join(json.dumps(_row(i, f"f{i}")) + "\n" for i in range(1, 11)))
    with open(tmp_path / "test.jsonl", "a") as handle:
        handle.write(json.dumps(_row(99, "g", setup="def g(a, b):\n    return a + b")) + "\n")
    return str(tmp_path)


def test_shots_are_lm_evals_task_ids_2_3_4(data):
    splits = make_splits(get_task("mbpp", data_path=data), 1, 2, fewshot=3)
    assert [s.id for s in splits.shots] == ["prompt-2", "prompt-3", "prompt-4"]
    assert splits.shots[0].shot_text == splits.shots[0].context + "def f2(a, b):\n    return a + b\n[DONE]"


def test_program_is_code_evals_generation_then_tests_without_setup(data):
    task = get_task("mbpp", data_path=data)
    heldout = task.load_pools().heldout
    assert heldout is not None
    example = next(e for e in heldout if e.id == "test-99")
    assert program_for(example, "x = 1\n[DONE]junk") == ("x = 1\n\nassert g(1, 2) == 3\nassert g(0, 0) == 0\n"
                                                         "assert g(2, 2) == 4")
    # lm-eval does not prepend test_setup_code: an empty answer fails even though the setup defines g
    assert not task.grade_generation(example, "", allow_code=True)
    assert task.grade_generation(example, "def g(a, b):\n    return a + b\n", allow_code=True)


@pytest.mark.parametrize("trick", ["import sys\nsys.exit(0)", "raise SystemExit", "import os\nos._exit(0)",
                                   "import atexit, os\natexit.register(lambda: os._exit(0))"])
def test_wrong_code_that_exits_early_is_graded_wrong(data, trick):
    task = get_task("mbpp", data_path=data)
    heldout = task.load_pools().heldout
    assert heldout is not None
    example = next(e for e in heldout if e.id == "test-99")
    assert not task.grade_generation(example, f"def g(a, b):\n    return a - b\n{trick}\n[DONE]", allow_code=True)
