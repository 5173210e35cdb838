"""Failures to write the command line's outputs end in one line, never a traceback: a report into a read-only
directory or onto a full disk, standard output on a full device, and, under ``--log-format json``, every
error as one JSON object on stderr."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CELTK = [sys.executable, "-m", "celtk"]


@pytest.fixture(scope="module")
def screened(tiny_llama, tmp_path_factory):
    """A screened tiny run: enough for a report."""
    from celtk.run import RunConfig, run_screen

    data = tmp_path_factory.mktemp("data") / "task.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i} plus 1 is", "target": f" {i + 1}"}) + "\n" for i in range(30)))
    out = tmp_path_factory.mktemp("run")
    run_screen(RunConfig(model="tiny", task=f"jsonl:{data}", discovery=8, heldout=8, fewshot=0, batch_size=8), out,
               model=tiny_llama)
    return out


def _in_namespace(setup: str, command: list[str], after: str = "true") -> subprocess.CompletedProcess:
    """``command`` in a private mount namespace after the shell lines ``setup``, then ``after`` (its exit status
    is the command's; root only); skips where this machine has none."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare for a private mount namespace")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode().strip()}")
    script = f"{setup} && {' '.join(repr(c) for c in command)}; status=$?; {after}; exit $status"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)


def _one_error_line(result: subprocess.CompletedProcess, pattern: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    import re
    assert re.search(pattern, lines[0]), lines[0]


def test_report_into_a_read_only_directory_is_one_error(screened, tmp_path):
    target = tmp_path / "ro"
    target.mkdir()
    out = shutil.copytree(screened, tmp_path / "run")
    result = _in_namespace(f"mount --bind {target} {target} && mount -o remount,bind,ro {target} {target}",
                           [*CELTK, "report", str(out), "--to", str(target / "report")])
    _one_error_line(result, r"Cannot write the report in .*/ro/report: Read-only file system\. Give --to a writable")


def test_report_onto_a_full_disk_is_one_error_and_leaves_no_half_figure(screened, tmp_path):
    target = tmp_path / "small"
    target.mkdir()
    out = shutil.copytree(screened, tmp_path / "run")
    # a 16 kB file system holds no heat map; what the failed report leaves there is listed after it
    result = _in_namespace(f"mount -t tmpfs -o size=16k tmpfs {target}",
                           [*CELTK, "report", str(out), "--to", str(target)], after=f"ls -A {target}")
    _one_error_line(result, r"Could not write the report file .*small/gain\.png: the disk is full\. Nothing was "
                            r"half-written")
    assert result.stdout == ""  # no partial PNG, no index.html


def test_stdout_on_a_full_device_is_one_error(screened):
    with open("/dev/full", "w") as full:
        for args in (["circuits"], ["--version"], ["plan", "--model-config", str(Path(__file__).parents[2] / "examples"
                                                                          / "configs" / "SmolLM3-3B.json")]):
            result = subprocess.run([*CELTK, *args], stdout=full, stderr=subprocess.PIPE, text=True)
            _one_error_line(result, r"could not write its output \(standard output\): No space left on device")


def test_errors_are_json_lines_under_log_format_json(tmp_path):
    from click.testing import CliRunner

    from celtk.cli import main

    runner = CliRunner()
    cases = [(["plan", "--task", "foo"], 1, "ConfigError",
              r"only if it is a paper task or humaneval \(arithmetic, boolq, hellaswag, mbpp, humaneval\)"),
             (["report", str(tmp_path / "none")], 2, "BadParameter", r"does not exist"),
             (["plan", "--discovery", "0"], 2, "BadParameter", r"--discovery")]
    for args, code, kind, pattern in cases:
        result = runner.invoke(main, ["--log-format", "json", *args])
        assert result.exit_code == code, result.output
        (line,) = result.stderr.strip().splitlines()
        record = json.loads(line)
        assert set(record) == {"time", "level", "error", "message"} and record["level"] == "error"
        assert record["error"] == kind
        import re
        assert re.search(pattern, record["message"]), record
        text = runner.invoke(main, args)  # the default stays one plain line
        assert text.exit_code == code and text.stderr.strip().splitlines()[-1].startswith("Error: ")
    with open("/dev/full", "w") as full:
        process = subprocess.run([*CELTK, "--log-format", "json", "circuits"], stdout=full, stderr=subprocess.PIPE,
                                 text=True)
    assert process.returncode == 1 and json.loads(process.stderr)["error"] == "OSError"
