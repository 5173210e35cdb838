"""celtk.Run, the notebook handle: one model load for every stage, the same files as the CLI,
settings read from the run or refused when they differ, and its docstring examples run as doctests."""

from __future__ import annotations

import doctest
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from _support import as_users_call
from click.testing import CliRunner

import celtk
from celtk.errors import ArgumentError, ConfigError, RunStoreError
from celtk.heads import HeadSet

# Files every stage below writes whose bytes depend only on the settings and the model, not on the clock.
DOCUMENTS = ("screen.json", "screen.csv", "selection.json", "diagnostics.json", "test.json", "transfer.json",
             "calibration-search.json", "fingerprint.json")


def count_model_loads(monkeypatch) -> list[str]:
    """Wrap ``celtk.models.load_model`` wherever a celtk module holds it; returns the list of sources loaded."""
    import celtk.models

    original, loads = celtk.models.load_model, []

    def counting(source, *args, **kwargs):
        loads.append(str(source))
        return original(source, *args, **kwargs)

    for module in [m for name, m in sys.modules.items() if name.startswith("celtk") and m is not None]:
        if getattr(module, "load_model", None) is original:
            monkeypatch.setattr(module, "load_model", counting)
    return loads


def readable(path: Path):
    return json.loads(path.read_text()) if path.suffix == ".json" else path.read_text()


@pytest.fixture(scope="module")
def exported(planted, tmp_path_factory):
    """The planted model as a directory both paths load from (the CLI takes a model by name only)."""
    from celtk.ablation import export_ablated

    model, task = planted
    return str(export_ablated(model, HeadSet(()), tmp_path_factory.mktemp("model") / "planted")), task


def test_the_handle_loads_once_and_writes_what_the_cli_writes(exported, tmp_path, monkeypatch):
    import celtk.run.handle  # noqa: F401 - imported before the loader is counted, so its name is wrapped too

    model_dir, task = exported
    config = celtk.RunConfig(model=model_dir, task=task, discovery=40, heldout=40, fewshot=0, batch_size=8, p=4, k=2)
    loads = count_model_loads(monkeypatch)

    run = celtk.Run(tmp_path / "handle", config=config)
    assert loads == []  # nothing loads before a stage needs the model
    screen = run.screen()
    selection = run.select()
    test = run.test()
    transfer = run.transfer(shots_seeds=None, zero_shot=True, tasks=["arithmetic:1dc"], heldout=12)
    calibration = run.calibrate(repeats=20)
    page = run.report()
    assert loads == [model_dir]  # one load for six stages
    assert selection.heads == test.heads == HeadSet.parse("L1H2") and test.gain > 0  # the planted harmful head
    assert len(screen.heads) == 3 * 4 and calibration.repeats == 20 and page.name == "index.html"
    assert [r.variant for r in transfer.variants] == ["original", "arithmetic:1dc"]

    loads.clear()
    cli = str(tmp_path / "cli")
    monkeypatch.setenv("CELTK_LEDGER", str(tmp_path / "cli-ledger.jsonl"))  # the handle's held-out set, tested again
    runner = CliRunner()

    def ok(*args):
        result = runner.invoke(celtk.cli.main, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result.output

    settings = tmp_path / "run.json"  # the same settings, as a config file (the screen verb has no --k)
    settings.write_text(json.dumps(config.recorded()))
    ok("screen", "--config", settings, "--out", cli)
    ok("select", cli, "--p", 4, "--k", 2)
    ok("test", cli)
    ok("transfer", cli, "--tasks", "arithmetic:1dc", "--heldout", 12)
    ok("calibrate", cli, "--repeats", 20)
    assert len(loads) >= 4  # each verb loads the model again: what the handle saves
    handle_dir = tmp_path / "handle"
    for name in DOCUMENTS:
        assert readable(handle_dir / name) == readable(Path(cli) / name), name
    # the documents the handle returned are the files it wrote
    assert screen.to_json() == readable(handle_dir / "screen.json")
    assert test.to_json() == readable(handle_dir / "test.json")
    assert calibration.to_json() == readable(handle_dir / "calibration-search.json")


def test_a_handle_reopens_a_run_from_its_settings_and_refuses_others(planted, tmp_path, monkeypatch):
    model, task = planted
    config = celtk.RunConfig(model="tiny-planted", task=task, discovery=20, heldout=20, fewshot=0, batch_size=8,
                             p=3, k=2)
    with pytest.raises(ConfigError, match=r"holds no run yet .* Run\(out, config=RunConfig\(\.\.\.\)\)"):
        celtk.Run(tmp_path / "run", model=model)
    first = celtk.Run(tmp_path / "run", config=config, model=model)
    first.screen()
    again = celtk.Run(tmp_path / "run", model=model)
    assert again.config == config
    assert celtk.Run(tmp_path / "run", config=replace(config, batch_size=4), model=model).config.batch_size == 4
    with pytest.raises(RunStoreError, match=r"other settings \(discovery: recorded 20, given 30; fewshot: recorded 0, "
                                            r"given 1\)"):
        celtk.Run(tmp_path / "run", config=replace(config, discovery=30, fewshot=1), model=model)
    selection = again.select()  # reopened: the model given, no load; p and k from the recorded settings
    assert selection.pool is not None and len(selection.pool) == 3 and selection.k == 2
    example = again.splits.discovery[0]
    assert (again.prompt(example.id) == again.prompt(example) == example.context
            and again.answer(example.id) == example.target)
    with pytest.raises(ConfigError, match="No example 'nope'"):
        again.prompt("nope")
    with pytest.raises(ArgumentError, match=r"Run.select\(\) parameter p='3' violates type hint int \| None"):
        as_users_call(again.select)(p="3")  # deliberately the wrong type: the check under test
    looked = again.eval("L1H2", limit=5)  # an exploratory look at the held-out set, logged in the run
    assert looked.n == 5 and looked.heads == HeadSet.parse("L1H2") and looked.config["run"] == str(tmp_path / "run")


def test_the_handle_docstring_examples_run(tiny_llama, tmp_path):
    """The examples in celtk.run.handle's docstrings, on a tiny model (``model``) and a fresh directory (``out``)."""
    import celtk.run.handle as handle

    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(handle, globs={"model": tiny_llama, "out": tmp_path / "run"}):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0 and results.attempted >= 15, results
