"""CLI edges that need no model: instant help, clear errors without tracebacks."""

import subprocess
import sys

from click.testing import CliRunner

from celtk.cli import main


def test_help_does_not_import_torch():
    code = "import sys; from celtk.cli import main; import celtk; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_user_errors_are_one_line(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["eval", "--task", "arithmatic", "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert "Unknown task 'arithmatic'. Did you mean: 'arithmetic'?" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(main, ["screen", "--out", str(tmp_path / "o"), "--shard", "3/2"])
    assert result.exit_code == 1 and "need 0 ≤ i < N" in result.output
    result = runner.invoke(main, ["run", "--out", str(tmp_path / "o"), "--p", "2", "--k", "3"])
    assert result.exit_code == 1 and "k = 3 exceeds p = 2" in result.output


def test_config_file_precedence_and_unknown_keys(tmp_path):
    from celtk.run.config import resolve_config

    cfg = tmp_path / "c.toml"
    cfg.write_text('discovery = 50\nseed = 7\n')
    resolved = resolve_config(str(cfg), {"seed": 9, "heldout": None})
    assert (resolved.discovery, resolved.seed, resolved.heldout) == (50, 9, 500)
    cfg.write_text('discovry = 50\n')
    runner = CliRunner()
    result = runner.invoke(main, ["screen", "--config", str(cfg), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "Unknown key(s) discovry" in result.output


import pytest


@pytest.mark.parametrize("args,message", [
    (["eval", "--model", "smollm2-13m"], "Did you mean: 'smollm2-135m'"),
    (["eval", "--dtype", "float8"], "dtype 'float8' is not supported"),
    (["eval", "--device", "cuda:3"], "is not available"),
    (["eval", "--task", "jsonl:/nonexistent/t.jsonl"], "does not exist"),
    (["eval", "--discovery", "5"], "No such option '--discovery'"),
    (["select", "{tmp}"], "screen.json does not exist; run the stage that writes it first"),
    (["merge", "{tmp}"], "No shard directories"),
    (["test", "{tmp}"], "selection.json does not exist"),
])
def test_cli_user_errors_have_no_traceback(tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if args[0] == "eval":
        args += ["--out", str(tmp_path / "o"), "--limit", "2"] + ([] if "--task" in args else ["--task", "arithmetic"])
    result = CliRunner().invoke(main, args)
    assert result.exit_code in (1, 2), result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception


def test_tables_written_to_a_log_are_not_cut(monkeypatch, capsys):
    """Off a terminal (a log file, a Slurm output) rich would assume 80 columns and cut a wide
    table's cells to '…'; celtk's console is 160 wide there unless COLUMNS says otherwise."""
    from rich.table import Table

    from celtk.cli._common import console

    def render() -> str:
        table = Table(*[f"column {i}" for i in range(10)])
        table.add_row(*["shots seed=2" for _ in range(10)])
        console().print(table)
        return capsys.readouterr().out

    monkeypatch.delenv("COLUMNS", raising=False)
    wide = render()
    assert wide.count("shots seed=2") == 10 and "…" not in wide
    monkeypatch.setenv("COLUMNS", "80")
    assert "…" in render()  # an explicit width is honoured
