"""examples/slurm on a real one-node Slurm (tests/slurm_cluster.py), with the planted tiny model saved
as an HF directory: `submit.sh` queues an array of 3 shards and the dependent merge/select/test job;
its results equal one `celtk run` byte for byte, also after `scontrol requeue` of a running shard;
a failing shard keeps the dependent job from running; a shard requeued while it launches (before its
script starts) goes back to the queue and the merge still runs. Skipped (with the reason) where Slurm
cannot start; `.ci/run` sets CELTK_REQUIRE_SLURM=1, which turns that skip into a failure.

A requeue targets one exact array task of the test's own submission, once Slurm reports it RUNNING
and its script has shown that it started (or, for the launch test, once the prolog holds it), and the
requeued task starts again when Slurm's own hold ends: never `scontrol update StartTime=now`, whose
relaunch in the second of the requeue slurmd refuses (`Job credential revoked`: the task fails and
its `afterok` merge can never run). Every wait fails early on a state it cannot leave, and says why
with the jobs' `.out` files and the controller's log lines for them (tests/slurm_cluster.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
from slurm_cluster import CRED_EXPIRE, HOLD_FILE, SlurmCluster, SlurmUnavailable

pytestmark = pytest.mark.slurm
SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "slurm"
RESULTS = ("screen.json", "screen.csv", "selection.json", "diagnostics.json", "test.json")
SETTINGS = {"DISCOVERY": "40", "HELDOUT": "40", "FEWSHOT": "0", "SEED": "0", "P": "4", "K": "3", "DEVICE": "cpu",
            "DTYPE": "float32", "BATCH_SIZE": "8", "N": "3"}
SBATCH_OPTIONS = ["--gres=none"]  # the node has no GPU; the scripts' CPU, memory and time lines stay as written
TIMEOUT = 420
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE"}


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
    import celtk.store.files
    _write = celtk.store.files.write_json

    def write_json(path, obj):
        _write(path, obj)
        if path.name == "L0.json" and path.parent.name == "screen_parts":
            time.sleep(3600)  # held here until the test's `scontrol requeue` ends this attempt

    celtk.store.files.write_json = write_json
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
    ctld_log: str = ""  # slurmctld's log at the end

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
              "OMP_NUM_THREADS": "1", "CELTK_LOG_FORMAT": "text", "CELTK_QUIET": "",  # the logs' plain progress lines
              # celtk's ledger refuses a second first test of one held-out set; the reference stands for a run
              # elsewhere, so the submissions and the reference each keep their own
              "CELTK_LEDGER": str(root / "slurm-ledger.jsonl")}
    s = Scenario(ok=root / "ok", failing=root / "failing", reference=root / "reference")
    for d in (s.ok, s.failing):
        d.mkdir()
    (s.failing / "out").mkdir()
    (s.failing / "out" / "shard-1-of-3").write_text("a file where shard 1's directory should go")

    s.ids["ok_array"], s.ids["ok_merge"] = _submit(slurm, s.ok, {**common, "OUT": str(s.ok / "out"), "HOLD_SHARD": "0"})
    s.queued = slurm.run(["squeue", "-h", "-o", "%i %j %T %r"]).stdout
    s.merge_dependency = slurm.tasks(s.ids["ok_merge"])[s.ids["ok_merge"]]["Dependency"]
    ok_jobs = (s.ids["ok_array"], s.ids["ok_merge"])
    held = f"{s.ids['ok_array']}_0"
    parts = s.ok / "out" / "shard-0-of-3" / "screen_parts"
    held_log = s.ok / f"celtk-screen-{held}.out"

    def held_is_running_its_first_attempt() -> bool:
        # this submission's task 0, RUNNING, its script started (its log line) and holding after layer 0
        task = slurm.tasks(s.ids["ok_array"]).get(held)
        return (task is not None and task["JobState"] == "RUNNING" and task["Restarts"] == "0"
                and task["ArrayJobId"] == s.ids["ok_array"] and task["ArrayTaskId"] == "0"
                and Path(task["WorkDir"]).resolve() == s.ok.resolve()
                and held_log.is_file() and "attempt 1" in held_log.read_text()
                and (parts / "L0.json").exists())

    slurm.wait_for(held_is_running_its_first_attempt, TIMEOUT, "shard 0 did not finish its first layer",
                   jobs=ok_jobs, dirs=[s.ok], broken=lambda: _any_finished(slurm, held))
    s.held_layers = sorted(p.name for p in parts.glob("L*.json"))
    slurm.run(["scontrol", "requeue", held])
    # the requeue has landed when the task counts a restart; Slurm starts it again CRED_EXPIRE + 1 s later
    slurm.wait_for(lambda: slurm.tasks(held)[held]["Restarts"] == "1", 60,
                   "the requeued shard did not return to the queue", jobs=ok_jobs, dirs=[s.ok])
    # the failing submission and the one-process reference run beside the rest, off the critical path
    s.ids["bad_array"], s.ids["bad_merge"] = _submit(slurm, s.failing, {**common, "OUT": str(s.failing / "out")})
    reference_err = root / "reference.err"  # a file, not a pipe: a full pipe would stall the run
    with reference_err.open("wb") as err_file:
        reference = subprocess.Popen(
            [sys.executable, "-m", "celtk.cli", "run", "--model", str(model_dir), "--task", task, "--discovery", "40",
             "--heldout", "40", "--fewshot", "0", "--seed", "0", "--p", "4", "--k", "3", "--device", "cpu",
             "--dtype", "float32", "--batch-size", "8", "--out", str(s.reference)],
            stdout=subprocess.DEVNULL, stderr=err_file,
            env={**os.environ, "OMP_NUM_THREADS": "1", "CELTK_LEDGER": str(root / "reference-ledger.jsonl")})

    merges = (s.ids["ok_merge"], s.ids["bad_merge"])
    all_jobs = (s.ids["ok_array"], s.ids["bad_array"], *merges)

    def done() -> bool:
        never = slurm.tasks(merges[1])[merges[1]]
        return (slurm.state(merges[0]) in FINISHED and never["Reason"] == "DependencyNeverSatisfied"
                and all(t["JobState"] in FINISHED for t in slurm.tasks(s.ids["bad_array"]).values()))

    def broken() -> str | None:
        for key, t in slurm.tasks(s.ids["ok_array"]).items():
            if t["JobState"] in FINISHED - {"COMPLETED"}:
                return f"{key} ended {t['JobState']} (exit {t['ExitCode']})"
        ok_merge = slurm.tasks(merges[0])[merges[0]]
        if ok_merge["Reason"] == "DependencyNeverSatisfied":
            return f"merge {merges[0]} can never start"
        if slurm.state(merges[1]) != "PENDING":
            return f"merge {merges[1]} left the queue although shard 1 of its array fails"
        if reference.poll() not in (None, 0):
            return f"the reference run failed: {reference_err.read_text(errors='replace')[-2000:]}"
        return None

    try:
        slurm.wait_for(done, TIMEOUT, "the jobs did not finish", jobs=all_jobs, dirs=[s.ok, s.failing], broken=broken)
    except BaseException:
        reference.kill()
        reference.wait()
        raise
    reference.wait(timeout=TIMEOUT)
    assert reference.returncode == 0, reference_err.read_text(errors="replace")[-2000:]
    s.never_ran = slurm.tasks(merges[1])[merges[1]]
    slurm.run(["scancel", merges[1]])
    slurm.wait_for(lambda: slurm.state(merges[1]) == "CANCELLED", 60, "the waiting merge was not cancelled",
                   jobs=[merges[1]])
    slurm.wait_for(lambda: any(r[0] == merges[1] for r in slurm.sacct()), 30, "the cancel did not reach sacct",
                   jobs=[merges[1]])
    for job in (s.ids["ok_array"], s.ids["bad_array"], *merges):
        s.jobs.update(slurm.tasks(job))
    s.sacct = slurm.sacct()
    s.ctld_log = (slurm.root / "log" / "slurmctld.log").read_text(errors="replace")
    return s


def _any_finished(slurm: SlurmCluster, job: str) -> str | None:
    """Why waiting for ``job`` (a job or one array task) to run is pointless: it already ended."""
    task = slurm.tasks(job).get(job)
    if task is not None and task["JobState"] in FINISHED:
        return f"{job} ended {task['JobState']} (exit {task['ExitCode']})"
    return None


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
    # the second attempt started when Slurm's own hold ended, so its launch credential postdates the revoked one
    raw = s.jobs[task]["JobId"]
    assert not re.search(rf"non-startable batch JobId={raw}\b", s.ctld_log)
    requeued = re.findall(rf"^\[([0-9T:-]+)\.\d+\] Requeuing JobId={task}\({raw}\)", s.ctld_log, re.M)
    assert len(requeued) == 1, requeued
    started = datetime.fromisoformat(s.jobs[task]["StartTime"])
    assert (started - datetime.fromisoformat(requeued[0])).total_seconds() >= CRED_EXPIRE


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


# A `celtk` that only says what it was asked: the launch test checks Slurm's handling of the scripts, not celtk.
_STUB = """\
#!/bin/sh
echo "stub celtk $*"
"""


@dataclass
class Prestart:
    work: Path
    array: str
    merge: str
    raw: str  # Slurm's own job id of array task 0
    revoked_launch: list[str]  # slurmd's lines refusing task 0's first launch
    jobs: dict[str, dict] = field(default_factory=dict)
    sacct: list = field(default_factory=list)


@pytest.fixture(scope="module")
def prestart(slurm, tmp_path_factory) -> Prestart:
    """submit.sh with every task held in the prolog (launching, its script not started); task 0 is
    requeued there, then the prolog lets them go."""
    root = tmp_path_factory.mktemp("slurm-prestart")
    bin_dir, work = root / "bin", root / "work"
    bin_dir.mkdir()
    work.mkdir()
    (bin_dir / "celtk").write_text(_STUB)
    (bin_dir / "celtk").chmod(0o755)
    (work / HOLD_FILE).touch()
    env = {"N": "3", "OUT": str(work / "out"), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    array, merge = _submit(slurm, work, env)
    task0 = f"{array}_0"
    jobs, dirs = (array, merge), [work]

    def in_prolog() -> bool:
        task = slurm.tasks(array).get(task0)
        return (task is not None and task["JobState"] == "RUNNING" and task["Restarts"] == "0"
                and (work / f"in-prolog-{task['JobId']}").exists())

    try:
        slurm.wait_for(in_prolog, 120, "task 0 did not reach the prolog", jobs=jobs, dirs=dirs,
                       broken=lambda: _any_finished(slurm, task0))
        raw = slurm.tasks(task0)[task0]["JobId"]
        assert not list(work.glob("*.out")), "a script started while the prolog held it"
        slurm.run(["scontrol", "requeue", task0])
        # slurmd has the kill (it ends the prolog's wait only after the prolog, so the file goes after it)
        slurm.wait_for(lambda: slurm.log_lines("slurmd.log", f"credential for job {raw} revoked"), 60,
                       "slurmd did not revoke the requeued task's credential", jobs=jobs, dirs=dirs)
    finally:
        (work / HOLD_FILE).unlink()
    slurm.wait_for(lambda: slurm.tasks(task0)[task0]["Restarts"] == "1", 60,
                   "the requeued task did not return to the queue", jobs=jobs, dirs=dirs)

    def merge_broken() -> str | None:
        for key, t in slurm.tasks(array).items():
            if t["JobState"] in FINISHED - {"COMPLETED"}:
                return f"{key} ended {t['JobState']} (exit {t['ExitCode']})"
        if slurm.tasks(merge)[merge]["Reason"] == "DependencyNeverSatisfied":
            return f"merge {merge} can never start"
        return None

    slurm.wait_for(lambda: slurm.state(merge) == "COMPLETED", 120, "the merge did not run", jobs=jobs, dirs=dirs,
                   broken=merge_broken)
    slurm.wait_for(lambda: any(r[0] == raw and r[2] == "COMPLETED" for r in slurm.sacct()), 30,
                   "task 0's end did not reach sacct", jobs=jobs)
    p = Prestart(work=work, array=array, merge=merge, raw=raw,
                 revoked_launch=slurm.log_lines("slurmd.log", f"Job {raw} already killed, do not launch batch job"))
    for job in jobs:
        p.jobs.update(slurm.tasks(job))
    p.sacct = slurm.sacct()
    return p


def test_shard_requeued_while_it_launches_returns_to_the_queue_and_the_merge_still_runs(prestart):
    p = prestart
    task0 = f"{p.array}_0"
    assert p.revoked_launch, "the requeue did not land before task 0's script started"  # slurmd refused it
    assert p.jobs[task0]["JobState"] == "COMPLETED" and p.jobs[task0]["Restarts"] == "1"
    log = (p.work / f"celtk-screen-{task0}.out").read_text()
    assert "attempt 2" in log and "attempt 1" not in log  # its script ran once, after the requeue
    assert [state for jobid, _, state in p.sacct if jobid == p.raw] == ["PENDING", "COMPLETED"]
    assert all(p.jobs[f"{p.array}_{i}"]["JobState"] == "COMPLETED" for i in (1, 2))
    assert p.jobs[p.merge]["JobState"] == "COMPLETED"
    assert "stub celtk merge" in (p.work / f"celtk-merge-{p.merge}.out").read_text()


def test_scripts_document_their_gpu_resources():
    for name in ("screen_array.sbatch", "merge_select_test.sbatch"):
        text = (SCRIPTS / name).read_text()
        for line in ("#SBATCH --gres=gpu:1", "#SBATCH --mem=", "#SBATCH --time=", "#SBATCH --cpus-per-task="):
            assert line in text, (name, line)
        assert "celtk plan" in text, name
    screen = (SCRIPTS / "screen_array.sbatch").read_text()
    assert "#SBATCH --requeue" in screen and "#SBATCH --open-mode=append" in screen
    assert "#SBATCH --kill-on-invalid-dep=no" in (SCRIPTS / "merge_select_test.sbatch").read_text()
    assert s_options_pass_through((SCRIPTS / "submit.sh").read_text())


def s_options_pass_through(text: str) -> bool:
    """submit.sh hands its arguments to both sbatch calls (how the tests, and users, override the lines)."""
    calls = [line for line in text.splitlines() if "$(sbatch " in line]
    return len(calls) == 2 and all('"$@"' in line for line in calls)
