"""benchmarks/table1.py in a checkout without ``runs/`` (git-ignored, so a fresh clone has the page but not the run
directories behind it): the page's seeds stand, are not run again, and combine with seeds run here into the same
row ``celtk replicate`` would have summarised over all of them."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from celtk.run.config import RunConfig
from celtk.run.replicate import ReplicateRow, summarise

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # table1.py imports its neighbours
_SPEC = importlib.util.spec_from_file_location("table1", BENCHMARKS / "table1.py")
assert _SPEC and _SPEC.loader
table1 = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(table1)

PAGE = json.loads(table1.DATA.read_text(encoding="utf-8"))
FINISHED = [(r["model"], r["task"]) for r in PAGE["rows"] if r["status"] == "finished" and r["n_tested"] >= 2]


def _page_row(alias: str, task: str) -> dict:
    return next(r for r in PAGE["rows"] if (r["model"], r["task"]) == (alias, task))


def _run_here(out: Path, alias: str, task: str, seeds: list[dict]) -> None:
    """What ``celtk replicate --seeds`` leaves for ``seeds``: their run directories and its summary of them."""
    directory = out / alias / task.replace(":", "-")
    directory.mkdir(parents=True)
    rows = [ReplicateRow.from_json({k: v for k, v in s.items() if k != "wall_seconds"}) for s in seeds]
    document = summarise(RunConfig(model=alias, task=task), [s["seed"] for s in seeds], rows, 0.05)
    (directory / "replicate.json").write_text(json.dumps(document.to_json()))
    for s in seeds:
        (directory / s["run"]).mkdir()
        (directory / s["run"] / "run_timing.json").write_text(json.dumps({"wall_seconds": s["wall_seconds"]}))
    (directory / "table1_job.json").write_text(json.dumps({"finished": True, "sessions": []}))


@pytest.mark.parametrize(("alias", "task"), FINISHED[:2])
def test_seeds_on_the_page_and_seeds_run_here_make_the_pages_row(tmp_path, monkeypatch, alias, task):
    monkeypatch.setattr(table1, "OUT", tmp_path)
    old = _page_row(alias, task)
    _run_here(tmp_path, alias, task, [s for s in old["seeds"] if s["seed"] != 1])
    assert [s["seed"] for s in table1.carried(alias, task)["seeds"]] == [1]
    new = table1.row(alias, task, PAGE["sweep"])
    # Holm over all three seeds, the t interval, head frequencies and the time: as the page has them
    assert {k: v for k, v in new.items() if k != "running"} == {k: v for k, v in old.items() if k != "running"}


def test_a_row_the_page_finished_is_kept_and_not_run_again(tmp_path, monkeypatch):
    monkeypatch.setattr(table1, "OUT", tmp_path)
    alias, task = FINISHED[0]

    def no_run(*args, **kwargs):
        raise AssertionError("a finished row was run again")
    monkeypatch.setattr(table1.subprocess, "run", no_run)
    monkeypatch.setattr(table1, "matmul_gflops", no_run)
    assert table1.run_job(alias, task)["finished"]
    assert table1.row(alias, task, PAGE["sweep"]) == _page_row(alias, task)
    assert not (tmp_path / alias).exists()  # nothing written for it


def test_the_large_model_gets_one_subtask_and_runs_after_every_other_row() -> None:
    accuracies = {"1dc": 0.40, "2da": 0.95, "2dm": 0.30, "2ds": 0.74, "3da": 0.62, "3ds": 0.05}
    swept = {alias: {"subtasks": {s: {"accuracy": a} for s, a in accuracies.items()}}
             for alias in (*table1.MODELS, *table1.LARGE)}
    picks = table1.chosen(swept)
    assert picks[table1.LARGE[0]] == ["arithmetic:1dc"]  # inside the band, closest to 50 %
    assert picks["qwen2.5-coder-0.5b"] == ["arithmetic:1dc", "arithmetic:3da"]
    assert picks[table1.DEMO[0]] == [table1.DEMO[1], "arithmetic:1dc"]  # the demo's own first
    order = table1.jobs(swept)
    assert order[0] == table1.DEMO and order[-1] == (table1.LARGE[0], "arithmetic:1dc")
    assert len(order) == len(set(order)) == 2 * len(table1.MODELS) + len(table1.LARGE)  # the demo's row is its first


def test_the_large_models_sweep_waits_for_every_other_row(tmp_path, monkeypatch):
    monkeypatch.setattr(table1, "OUT", tmp_path)  # no sweep.json here: the page's sweep, of the small models only
    small = {alias: entry for alias, entry in PAGE["sweep"].items() if alias not in table1.LARGE}
    monkeypatch.setattr(table1, "on_page", lambda: {**PAGE, "sweep": dict(small)})
    events: list[tuple[str, ...]] = []

    def sweep_model(alias):
        events.append(("sweep", alias))
        return {s: {"accuracy": 0.4 if s == "1dc" else 0.9} for s in table1.SUBTASKS}

    monkeypatch.setattr(table1, "sweep_model", sweep_model)
    monkeypatch.setattr(table1, "matmul_gflops", lambda: 1.0)
    monkeypatch.setattr(table1, "finish", lambda alias, task: events.append(("finish", alias, task)))
    table1.run()
    large = table1.LARGE[0]
    before = events[:events.index(("sweep", large))]
    assert {e[1:] for e in before if e[0] == "finish"} == set(table1.jobs(small))  # every other row
    assert events[-1] == ("finish", large, "arithmetic:1dc")
    finished = [e for e in events if e[0] == "finish"]
    assert len(finished) == len(set(finished))  # each row once
    assert [e for e in events if e[0] == "sweep"] == [("sweep", large)]  # the others are on the page


def test_a_resumed_job_keeps_the_plan_printed_before_it_first_started(tmp_path, monkeypatch):
    monkeypatch.setattr(table1, "OUT", tmp_path)
    alias, task = table1.LARGE[0], "arithmetic:1dc"
    monkeypatch.setattr(table1, "matmul_gflops", lambda: 1.0)
    monkeypatch.setattr(table1, "plan", lambda *args: "the plan now")
    monkeypatch.setattr(table1.subprocess, "run", lambda *args, **kwargs: type("Done", (), {"returncode": 1})())
    assert table1.run_job(alias, task)["plan"] == "the plan now"  # the first session (it fails: rc 1)
    monkeypatch.setattr(table1, "plan", lambda *args: "a later plan")
    record = table1.run_job(alias, task)
    assert record["plan"] == "the plan now" and len(record["sessions"]) == 2


def test_a_job_started_before_its_first_seed_finished_shows_its_plan(tmp_path, monkeypatch):
    monkeypatch.setattr(table1, "OUT", tmp_path)
    alias, task = table1.LARGE[0], "arithmetic:2dm"
    assert table1.row(alias, task, {}) == {"model": alias, "task": task, "status": "pending",
                                            "in_band": None}  # not swept, never started
    directory = table1.job_dir(alias, task)
    directory.mkdir(parents=True)
    (directory / "table1_job.json").write_text(json.dumps({"plan": "the plan", "finished": False, "sessions": []}))
    started = table1.row(alias, task, {})
    assert (started["status"], started["plan"], started["running"]) == ("pending", "the plan", True)
