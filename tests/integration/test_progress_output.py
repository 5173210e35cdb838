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
    assert {r["stage"] for r in records} == {"screen", "screen work"}
    heads = [r for r in records if r["stage"] == "screen"]
    assert heads[-1]["examples_per_s"] == pytest.approx(8 * heads[-1]["rate"], rel=1e-3)
    quiet = runner.invoke(main, ["--quiet", *_screen(tiny_dir, tmp_path / "q")])
    assert quiet.exit_code == 0, quiet.output
    assert "screen:" not in quiet.stderr and not re.search(BAR, quiet.output) and "{" not in quiet.stderr
    assert "Top single-head ablations" in quiet.stdout
