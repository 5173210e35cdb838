"""`celtk eval` end to end on a tiny model saved as an HF directory."""

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from celtk.ablation import export_ablated
from celtk.cli import main
from celtk.heads import HeadSet
from celtk.store.documents import EvalDocument

FIX = Path(__file__).parent.parent / "fixtures"


@pytest.fixture(scope="module")
def tiny_dir(tiny_llama, tmp_path_factory):
    return export_ablated(tiny_llama, HeadSet(), tmp_path_factory.mktemp("m") / "tiny")


def test_eval_writes_documented_json(tiny_dir, tmp_path):
    runner = CliRunner()
    out = tmp_path / "ev"
    result = runner.invoke(main, ["eval", "--model", str(tiny_dir), "--task", "arithmetic:2da", "--limit", "9",
                                  "--fewshot", "2", "--ablate", "L1H0", "--batch-size", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "eval.json").read_text())
    assert {"model", "task", "heads", "n", "accuracy", "examples", "config"} <= set(doc)
    assert doc["heads"] == ["L1H0"] and doc["n"] == 9 and len(doc["examples"]) == 9
    assert all({"id", "correct", "logprob"} <= set(e) for e in doc["examples"])
    assert all(isinstance(e["logprob"], float) for e in doc["examples"])
    assert doc["config"]["splits"]["shot_ids"] and doc["config"]["fewshot"] == 2


def test_eval_choice_task_logprob_lists(tiny_dir, tmp_path):
    runner = CliRunner()
    args = ["eval", "--model", str(tiny_dir), "--task", "boolq", "--data", str(FIX / "boolq"), "--split", "heldout",
            "--out", str(tmp_path / "b")]
    refused = runner.invoke(main, args)
    assert refused.exit_code == 1 and "--run DIR" in refused.output and "Traceback" not in refused.output
    result = runner.invoke(main, args + ["--exploratory"])
    assert result.exit_code == 0, result.output
    assert "outside any run" in result.output
    doc = json.loads((tmp_path / "b" / "eval.json").read_text())
    assert doc["n"] == 6 and all(len(e["logprob"]) == 2 for e in doc["examples"]) and doc["config"]["exploratory"]


def test_eval_head_out_of_range_is_one_line(tiny_dir, tmp_path):
    result = CliRunner().invoke(main, ["eval", "--model", str(tiny_dir), "--task", "arithmetic:2da", "--limit", "2",
                                       "--ablate", "L7H0", "--out", str(tmp_path / "x")])
    assert result.exit_code == 1 and "layers are 0..2" in result.output and "Traceback" not in result.output


def test_mbpp_generation_is_graded_when_opted_in(tiny_llama):
    from celtk.evaluation import evaluate
    from celtk.evaluation.results import EvalConfig
    from celtk.tasks import get_task, make_splits

    task = get_task("mbpp", data_path=str(FIX / "mbpp"))
    splits = make_splits(task, 1, 2, fewshot=1)
    result = evaluate(tiny_llama, task, splits.heldout, splits.shots, config=EvalConfig(batch_size=2, allow_code=True))
    assert len(result.examples) == 2 and all("generation" in e.extra for e in result.examples)
    assert not any(e.correct for e in result.examples)  # a random tiny model does not write passing code


def test_cli_eval_equals_one_library_call(tiny_dir, tmp_path):
    """`celtk eval` writes exactly what `celtk.run_eval` returns for the same arguments."""
    from celtk.run import run_eval

    args: dict[str, Any] = dict(model=str(tiny_dir), task="arithmetic:2da", limit=7, fewshot=2, heads="L1H0",
                                batch_size=4, seed=3)
    result = CliRunner().invoke(main, ["eval", "--model", args["model"], "--task", args["task"], "--limit", "7",
                                       "--fewshot", "2", "--ablate", "L1H0", "--batch-size", "4", "--seed", "3",
                                       "--out", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    library = run_eval(None, **args)
    assert json.loads((tmp_path / "cli" / "eval.json").read_text()) == library.to_json()
    assert EvalDocument.load(tmp_path / "cli") == library and library.heads == HeadSet.parse("L1H0")
    assert library.config["fewshot"] == 2 and library.config["seed"] == 3 and library.n == 7
    assert library.accuracy == library.correct().mean()


def test_split_all_scores_every_row_it_can_and_names_the_rest(tiny_dir, tmp_path):
    """An 80-row official file with no shots drawn: 60 rows scored, and the 20 of the task's few-shot
    reserve named in the output and in eval.json with the reason."""
    rows = [json.dumps({"context": f"\n\nQ: What is {i} plus {i + 7}?\n\nA:", "completion": f" {2 * i + 7}"})
            for i in range(80)]
    data = tmp_path / "two_digit_addition.jsonl"
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "all"
    result = CliRunner().invoke(main, ["eval", "--model", str(tiny_dir), "--task", "arithmetic:2da", "--data",
                                       str(data), "--split", "all", "--fewshot", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "eval.json").read_text())
    scored = {e["id"] for e in doc["examples"]}
    held = {r["id"]: r["reason"] for r in doc["held_back"]}
    assert doc["n"] == 60 and len(held) == 20 and set(held.values()) == {"few-shot pool"}
    assert doc["accuracy_stderr"] == pytest.approx((doc["accuracy"] * (1 - doc["accuracy"]) / 59) ** 0.5)
    assert "2da-" not in result.output  # the held-back rows as a count; their ids stay in eval.json
    assert scored | set(held) == {f"2da-{i}" for i in range(80)} and not scored & set(held)
    assert ("Held back 20 row(s) of the task's data, in no split: 20 in the task's few-shot pool"
            in " ".join(result.output.split()))


def test_eval_on_a_run_refuses_settings_the_run_fixes(tmp_path):
    """With --run the run's model, task, data, seed, shots and template are used: giving one is refused, not ignored
    (refused before anything loads: the directory need not even be a run)."""
    out = tmp_path / "run"
    out.mkdir()
    for flags in (["--task", "arithmetic:2ds"], ["--seed", "3", "--fewshot", "1"], ["--model", "gemma3-270m"]):
        refused = CliRunner().invoke(main, ["eval", "--split", "heldout", "--run", str(out), *flags,
                                            "--out", str(tmp_path / "ev")])
        assert refused.exit_code == 2 and "cannot change them" in refused.output, refused.output
        assert all(flag in refused.output for flag in flags if flag.startswith("--"))
