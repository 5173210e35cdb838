"""Progress as a user sees it: lines in a log file, a rich bar on a terminal, JSON lines, silence."""

import json
import os
import pty
import re
import subprocess
import sys

import pytest
from _support import not_none
from click.testing import CliRunner

from celtk.ablation import export_ablated
from celtk.cli import main
from celtk.heads import HeadSet

PROGRESS_VARIABLES = ("CELTK_QUIET", "CELTK_LOG_FORMAT", "CELTK_PROGRESS_EVERY")
BAR = r"━+\s+\d+/\d+"  # rich's progress bar: the bar, then done/total (tables use ━ too, without the count)


@pytest.fixture(autouse=True)
def _default_progress(monkeypatch):
    """The tests set the progress options themselves; a caller's CELTK_* settings must not leak in."""
    for name in PROGRESS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def tiny_dir(tiny_llama, tmp_path_factory):
    return export_ablated(tiny_llama, HeadSet(), tmp_path_factory.mktemp("m") / "tiny")


def _screen(tiny_dir, out) -> list[str]:
    return ["screen", "--model", str(tiny_dir), "--task", "arithmetic:2da", "--discovery", "8", "--fewshot", "0",
            "--batch-size", "4", "--out", str(out)]


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "celtk.cli", *args]


def test_a_run_redirected_to_a_file_shows_progress_lines(tiny_dir, tmp_path):
    log = tmp_path / "run.log"
    with open(log, "w") as handle:  # as `celtk … > log 2>&1` under nohup or Slurm
        done = subprocess.run(_command("--progress-every", "0", *_screen(tiny_dir, tmp_path / "r")), stdout=handle,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    text = log.read_text()
    assert done.returncode == 0, text[-2000:]
    # the tiny Llama has 3 layers of 4 heads; the screen reports as each layer's heads are written
    assert re.findall(r"^\S+Z screen: (\d+)/12 heads", text, re.M) == ["0", "4", "8", "12"], text[:2000]
    last = not_none(re.search(r"^.*screen: 12/12 heads.*$", text, re.M)).group(0)
    assert re.search(r"\(100%\), [\d.e+]+ heads/s, [\d.e+]+ examples/s, elapsed \d+:\d\d, ETA 0:00$", last), last
    assert not re.search(BAR, text) and "\r" not in text  # no bar drawn into the file
    # within the layers too: the replay's work, weighted by what each layer costs, one line per batch pass here
    work = [int(d) for d in re.findall(r"^\S+Z screen work: (\d+)/1000 ‰ of its work", text, re.M)]
    assert len(work) > 4 and work == sorted(work) and work[-1] == 1000, text[:2000]
    assert re.search(r"^\S+Z load: 0/1 models", text, re.M) is None  # `celtk screen` loads inside the stage
    assert "Top single-head ablations" in text  # the results still print


def test_a_terminal_shows_the_bar(tiny_dir, tmp_path):
    leader, follower = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120"}
    child = subprocess.Popen(_command(*_screen(tiny_dir, tmp_path / "r")), stdin=follower, stdout=follower,
                             stderr=follower, env=env, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's last writer exited
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert child.wait(timeout=300) == 0
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))  # colours, cursor moves
    assert re.search(BAR, text) and re.search(r"screen\s+━+\s+12/12 .*ETA", text), text[-2000:]
    assert not re.search(r"screen: \d+/12 heads", text)  # the bar, not log lines


def test_json_lines_and_quiet(tiny_dir, tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["--log-format", "json", "--progress-every", "0", *_screen(tiny_dir, tmp_path / "j")])
    assert result.exit_code == 0, result.output
    records = [json.loads(l) for l in result.stderr.splitlines() if l.startswith("{")]
    assert [(r["stage"], r["done"], r["total"], r["unit"]) for r in records if r["stage"] == "screen"] == [
        ("screen", d, 12, "heads") for d in (0, 4, 8, 12)]
    records = [r for r in records if not r.get("still_working")]  # a heartbeat, had the machine stalled 30 s
    assert {r["stage"] for r in records} == {"screen", "screen work"}
    heads = [r for r in records if r["stage"] == "screen"]
    assert heads[-1]["examples_per_s"] == pytest.approx(8 * heads[-1]["rate"], rel=1e-3)
    quiet = runner.invoke(main, ["--quiet", *_screen(tiny_dir, tmp_path / "q")])
    assert quiet.exit_code == 0, quiet.output
    assert "screen:" not in quiet.stderr and not re.search(BAR, quiet.output) and "{" not in quiet.stderr
    assert "Top single-head ablations" in quiet.stdout


def test_a_slow_step_off_a_terminal_still_prints_a_line_every_interval():
    """A step far longer than --progress-every (a model load, an intact pass, one long batch): the heartbeat thread
    the progress context starts writes "still working" lines at that cadence, and stops with the context."""
    import time

    from celtk.cli._common import ProgressLines, progress_bar

    stamps: list[float] = []
    lines = ProgressLines(lambda text: stamps.append(time.monotonic()), every=0.2)
    with lines.heartbeat():
        lines("slow", 0, 1)
        time.sleep(3.0)  # one step of 15 intervals
        lines("slow", 1, 1)
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    assert len(stamps) >= 6 and max(gaps) < 1.5, gaps  # about every 0.2 s; the bound is generous for a busy machine

    @main.command("slow-stage", hidden=True)
    def slow() -> None:
        with progress_bar() as progress:
            assert progress is not None  # not --quiet
            progress("slow", 0, 1)
            time.sleep(2.0)
            progress("slow", 1, 1)
        time.sleep(0.6)  # the context has ended: no heartbeat now

    try:
        result = CliRunner().invoke(main, ["--progress-every", "0.2", "slow-stage"])
    finally:
        main.commands.pop("slow-stage")
    assert result.exit_code == 0, result.output
    text = result.stderr.splitlines()
    assert re.search(r"slow: 0/1 steps", text[0]) and re.search(r"slow: 1/1 steps \(100%\)", text[-1]), text
    beats = [line for line in text[1:-1] if re.search(r"slow: still working, 0/1 steps \(0%\), elapsed 0:0\d, "
                                                      r"last step 0:0\d ago$", line)]
    assert len(beats) >= 3 and len(beats) == len(text) - 2, text


def test_every_stage_reports_within_its_work(planted, smol_tokenizer, tmp_path):
    """A log of `celtk run` shows the model load and the intact pass (the screen's first work line, before any
    layer's heads are written); transfer, stability and calibrate report within their passes, not only at their
    ends: the held-out passes after every batch, the searches per resample, the search null per chunk of repeats."""
    from _support import make_tiny

    model, task = planted
    model_dir = export_ablated(model, HeadSet(()), tmp_path / "model")
    other_dir = export_ablated(make_tiny("llama", smol_tokenizer, seed=5), HeadSet(()), tmp_path / "other")
    out = tmp_path / "run"
    runner = CliRunner()

    def records(*verb: str) -> list[dict]:
        result = runner.invoke(main, ["--log-format", "json", "--progress-every", "0", *verb])
        assert result.exit_code == 0, result.output + result.stderr
        return [r for r in (json.loads(l) for l in result.stderr.splitlines() if l.startswith("{"))
                if not r.get("still_working")]

    def counts(rs: list[dict], stage: str) -> list[tuple[int, int]]:
        return [(r["done"], r["total"]) for r in rs if r["stage"] == stage]

    ran = records("run", "--model", str(model_dir), "--task", task, "--discovery", "24", "--heldout", "16",
                  "--fewshot", "0", "--batch-size", "8", "--p", "3", "--k", "2", "--out", str(out))
    assert counts(ran, "load") == [(0, 1), (1, 1)] and ran[0]["stage"] == "load"
    stages = [r["stage"] for r in ran]
    first_work = stages.index("screen work")
    assert stages[:first_work] == ["load", "load", "screen"] and counts(ran, "screen")[0] == (0, 12)
    assert 0 < ran[first_work]["done"] < 1000  # the intact pass, done before any head is
    # select's subsets: a count per layer's sets, and the replay work within them (Algorithm 1 scores them at once)
    chosen = [done for done, _ in counts(ran, "select work")]
    assert len(chosen) >= 3 and chosen == sorted(chosen) and chosen[-1] == 1000, chosen
    assert counts(ran, "select")[-1] == (3, 3)  # the pool of 3 gives 3 pairs

    text = tmp_path / "plain.txt"
    text.write_text("the quick brown fox jumps over the lazy dog " * 40)
    moved = records("transfer", str(out), "--other-model", str(other_dir), "--plain-text", str(text),
                    "--n-boot", "50")
    assert counts(moved, "transfer") == [(0, 2), (1, 2), (2, 2)]
    assert counts(moved, "load") == [(0, 1), (1, 1)]  # the other model, before any variant is scored
    work = [done for done, _ in counts(moved, "transfer work")]
    assert len(work) >= 4 and work == sorted(work) and work[0] == 0 and work[-1] == 1000, work
    loss = counts(moved, "plain-text loss")
    assert len(loss) >= 4 and loss[-1][0] == loss[-1][1] and [d for d, _ in loss] == sorted(d for d, _ in loss)

    stable = records("stability", str(out), "--resamples", "2")
    assert counts(stable, "resamples") == [(0, 3), (1, 3), (2, 3), (3, 3)]
    held = [done for done, _ in counts(stable, "held-out work")]
    assert len(held) >= 4 and held == sorted(held) and held[-1] == 1000, held

    null = records("calibrate", str(out), "--null", "search", "--repeats", "60")
    assert [d for d, _ in counts(null, "search null")] == list(range(1, 61))  # at least 50 chunks: one repeat each
    from celtk.run.calibrate import run_calibration
    from celtk.store.documents import CalibrationDocument

    shown = CalibrationDocument.load(out, "calibration-search.json")
    assert run_calibration(out, null="search", repeats=60) == shown  # the same draws without progress
    pools = records("calibrate", str(out), "--null", "random-heads", "--repeats", "2")
    held = [done for done, _ in counts(pools, "calibrate held-out")]
    assert len(held) >= 4 and held == sorted(held) and held[-1] == 1000, held
