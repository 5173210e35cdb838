"""examples/slurm on a real one-node Slurm (tests/slurm_cluster.py), with the planted tiny model saved
as an HF directory: `submit.sh` queues an array of 3 shards and the dependent merge/select/test job;
its results equal one `celtk run` byte for byte, also after `scontrol requeue` of a running shard;
a failing shard keeps the dependent job from running. Skipped (with the reason) where Slurm cannot
start; `.ci/run` sets CELTK_REQUIRE_SLURM=1, which turns that skip into a failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, SlurmUnavailable

pytestmark = pytest.mark.slurm
SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "slurm"
RESULTS = ("screen.json", "screen.csv", "selection.json", "diagnostics.json", "test.json")
SETTINGS = {"DISCOVERY": "40", "HELDOUT": "40", "FEWSHOT": "0", "SEED": "0", "P": "4", "K": "3", "DEVICE": "cpu",
            "DTYPE": "float32", "BATCH_SIZE": "8", "N": "3"}
SBATCH_OPTIONS = ["--gres=none"]  # the node has no GPU; the scripts' CPU, memory and time lines stay as written
TIMEOUT = 420


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except SlurmUnavailable as why:
        cluster.stop()
        if os.environ.get("CELTK_REQUIRE_SLURM") == "1":
            pytest.fail(f"Slurm is required here (CELTK_REQUIRE_SLURM=1) but cannot start: {why}")
        pytest.skip(f"no one-node Slurm here: {why}")
    try:
        yield cluster
    finally:
        cluster.stop()
        assert not cluster.stray_pids(), "processes of the test cluster outlived it"


# The first attempt of array task HOLD_SHARD stops for good right after writing screen_parts/L0.json,
# so the test requeues a shard that is running and has finished a layer, not one that has already
# ended: a breakpoint in the test's own `celtk` on PATH; the library and the scripts are unchanged.
_CELTK = """\
#!{python}
import os, sys, time
if (os.environ.get("HOLD_SHARD") == os.environ.get("SLURM_ARRAY_TASK_ID")
        and os.environ.get("SLURM_RESTART_COUNT", "0") == "0"):
    import celtk.runstore
    _write = celtk.runstore.write_json

    def write_json(path, obj):
        _write(path, obj)
        if path.name == "L0.json" and path.parent.name == "screen_parts":
            time.sleep(3600)  # held here until the test's `scontrol requeue` ends this attempt

    celtk.runstore.write_json = write_json
from celtk.cli import run
sys.exit(run())
"""


@dataclass
class Scenario:
    ok: Path  # the submission that succeeds (with shard 0 requeued while running)
    failing: Path  # the submission whose shard 1 fails
    reference: Path  # one `celtk run` process
    ids: dict[str, str] = field(default_factory=dict)  # ok_array, ok_merge, bad_array, bad_merge
    queued: str = ""  # squeue right after submitting
    merge_dependency: str = ""  # the merge job's Dependency field while it waits
    held_layers: list[str] = field(default_factory=list)  # shard 0's layer parts when it was requeued
    jobs: dict[str, dict] = field(default_factory=dict)  # scontrol fields per job / array task, at the end
    never_ran: dict = field(default_factory=dict)  # the failing submission's merge, before it is cancelled
    sacct: list = field(default_factory=list)

    def log(self, submission: Path, name: str) -> str:
        return (submission / name).read_text()


def _submit(slurm: SlurmCluster, workdir: Path, env: dict) -> tuple[str, str]:
    done = slurm.run(["bash", SCRIPTS / "submit.sh", *SBATCH_OPTIONS], cwd=workdir, env=env)
    ids = dict(re.findall(r"(array|merge)=(\d+)", done.stdout))
    return ids["array"], ids["merge"]


@pytest.fixture(scope="module")
def scenario(slurm, planted, tmp_path_factory) -> Scenario:
    from celtk.ablation import export_ablated
    from celtk.heads import HeadSet

    model, task = planted
    root = tmp_path_factory.mktemp("slurm-runs")
    model_dir = export_ablated(model, HeadSet(()), root / "model")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "celtk").write_text(_CELTK.format(python=sys.executable))
    (bin_dir / "celtk").chmod(0o755)
    common = {**SETTINGS, "MODEL": str(model_dir), "TASK": task, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
              "OMP_NUM_THREADS": "1", "CELTK_LOG_FORMAT": "text", "CELTK_QUIET": ""}  # the logs' plain progress lines
    s = Scenario(ok=root / "ok", failing=root / "failing", reference=root / "reference")
    for d in (s.ok, s.failing):
        d.mkdir()
    (s.failing / "out").mkdir()
    (s.failing / "out" / "shard-1-of-3").write_text("a file where shard 1's directory should go")

    s.ids["ok_array"], s.ids["ok_merge"] = _submit(slurm, s.ok, {**common, "OUT": str(s.ok / "out"), "HOLD_SHARD": "0"})
    s.queued = slurm.run(["squeue", "-h", "-o", "%i %j %T %r"]).stdout
    s.merge_dependency = slurm.tasks(s.ids["ok_merge"])[s.ids["ok_merge"]]["Dependency"]
    held = f"{s.ids['ok_array']}_0"
    parts = s.ok / "out" / "shard-0-of-3" / "screen_parts"
    slurm.wait_for(lambda: (parts / "L0.json").exists() and slurm.state(held) == "RUNNING", TIMEOUT,
                   "shard 0 did not finish its first layer")
    s.held_layers = sorted(p.name for p in parts.glob("L*.json"))
    slurm.run(["scontrol", "requeue", held])
    slurm.wait_for(lambda: slurm.state(held) == "PENDING", 60, "the requeued shard did not return to the queue")
    slurm.run(["scontrol", "update", f"JobId={held}", "StartTime=now"])  # Slurm delays a requeued job's start by 2 min
    # the failing submission and the one-process reference run beside the rest, off the critical path
    s.ids["bad_array"], s.ids["bad_merge"] = _submit(slurm, s.failing, {**common, "OUT": str(s.failing / "out")})
    reference = subprocess.Popen(
        [sys.executable, "-m", "celtk.cli", "run", "--model", str(model_dir), "--task", task, "--discovery", "40",
         "--heldout", "40", "--fewshot", "0", "--seed", "0", "--p", "4", "--k", "3", "--device", "cpu",
         "--dtype", "float32", "--batch-size", "8", "--out", str(s.reference)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})

    merges = (s.ids["ok_merge"], s.ids["bad_merge"])
    finished = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
    slurm.wait_for(lambda: slurm.state(merges[0]) in finished and all(
        t["JobState"] in finished for t in slurm.tasks(s.ids["bad_array"]).values()), TIMEOUT,
        "the jobs did not finish")
    _, err = reference.communicate(timeout=TIMEOUT)
    assert reference.returncode == 0, err[-2000:]
    s.never_ran = slurm.tasks(merges[1])[merges[1]]
    slurm.run(["scancel", merges[1]])
    slurm.wait_for(lambda: slurm.state(merges[1]) == "CANCELLED", 60, "the waiting merge was not cancelled")
    slurm.wait_for(lambda: any(r[0] == merges[1] for r in slurm.sacct()), 30, "the cancel did not reach sacct")
    for job in (s.ids["ok_array"], s.ids["bad_array"], *merges):
        s.jobs.update(slurm.tasks(job))
    s.sacct = slurm.sacct()
    return s


def _states(s: Scenario, job: str) -> list[str]:
    """sacct's states of one job or array task, oldest attempt first (sacct names tasks by Slurm's own job ids)."""
    raw = s.jobs[job]["JobId"]
    return [state for jobid, _, state in s.sacct if jobid == raw]


def test_submit_queues_an_array_of_shards_and_a_merge_after_them(scenario):
    s = scenario
    array, merge = s.ids["ok_array"], s.ids["ok_merge"]
    assert re.search(rf"^{merge} celtk-merge PENDING Dependency$", s.queued, re.M), s.queued
    assert s.merge_dependency.startswith(f"afterok:{array}_*"), s.merge_dependency
    tasks = {k: v for k, v in s.jobs.items() if k.startswith(f"{array}_")}
    assert sorted(tasks) == [f"{array}_{i}" for i in range(3)]
    assert all(t["JobName"] == "celtk-screen" and t["JobState"] == "COMPLETED" for t in tasks.values())
    assert s.jobs[merge]["JobState"] == "COMPLETED" and s.jobs[merge]["ExitCode"] == "0:0"
    assert s.jobs[merge]["StartTime"] >= max(t["EndTime"] for t in tasks.values())  # ISO times sort as text
    for i in range(3):
        assert _states(s, f"{array}_{i}")[-1] == "COMPLETED"
    assert _states(s, merge) == ["COMPLETED"]
    log = s.log(s.ok, f"celtk-merge-{merge}.out")
    assert "Held-out test on 40 examples" in log and (s.ok / "out" / "report" / "index.html").is_file()


def test_array_results_equal_one_process_byte_for_byte(scenario):
    s = scenario
    for name in RESULTS:
        assert (s.ok / "out" / name).read_bytes() == (s.reference / name).read_bytes(), name


def test_requeued_running_shard_resumes_from_its_finished_layers(scenario):
    s = scenario
    task = f"{s.ids['ok_array']}_0"
    assert s.held_layers == ["L0.json"]  # it was requeued mid-screen, one layer of three written
    assert s.jobs[task]["Restarts"] == "1" and s.jobs[task]["JobState"] == "COMPLETED"
    log = s.log(s.ok, f"celtk-screen-{task}.out")  # --open-mode=append keeps both attempts
    first, second = log.split(f"shard 0/3 of {s.ok / 'out'}, attempt 2")
    assert "attempt 1" in first and "DUE TO JOB REQUEUE" in first
    # the second attempt scores only what the first left: its first progress line starts at 2 of 4 heads
    assert re.search(r"^.*screen: 2/4 heads", second, re.M) and not re.search(r"screen: [01]/4 heads", second)
    # sacct: the requeued attempt (jobcomp logs it as PENDING, the state it was put back in), then the finished one
    assert _states(s, task) == ["PENDING", "COMPLETED"]


def test_failed_shard_keeps_the_merge_from_running_and_its_log_says_why(scenario):
    s = scenario
    array, merge = s.ids["bad_array"], s.ids["bad_merge"]
    assert [s.jobs[f"{array}_{i}"]["JobState"] for i in range(3)] == ["COMPLETED", "FAILED", "COMPLETED"]
    log = s.log(s.failing, f"celtk-screen-{array}_1.out")
    assert re.search(r"^Error: Cannot use output directory .*shard-1-of-3", log, re.M), log[-1000:]
    assert s.never_ran["JobState"] == "PENDING" and s.never_ran["Reason"] == "DependencyNeverSatisfied"
    assert not (s.failing / f"celtk-merge-{merge}.out").exists()  # it never started
    assert not (s.failing / "out" / "screen.json").exists()
    assert _states(s, f"{array}_1") == ["FAILED"] and _states(s, merge) == ["CANCELLED"]


def test_scripts_document_their_gpu_resources():
    for name in ("screen_array.sbatch", "merge_select_test.sbatch"):
        text = (SCRIPTS / name).read_text()
        for line in ("#SBATCH --gres=gpu:1", "#SBATCH --mem=", "#SBATCH --time=", "#SBATCH --cpus-per-task="):
            assert line in text, (name, line)
        assert "celtk plan" in text, name
    assert "#SBATCH --requeue" in (SCRIPTS / "screen_array.sbatch").read_text()
    assert s_options_pass_through((SCRIPTS / "submit.sh").read_text())


def s_options_pass_through(text: str) -> bool:
    """submit.sh hands its arguments to both sbatch calls (how the tests, and users, override the lines)."""
    calls = [line for line in text.splitlines() if "$(sbatch " in line]
    return len(calls) == 2 and all('"$@"' in line for line in calls)
