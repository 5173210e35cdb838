"""Rerunning finished work changes nothing: every stage whose result is stored for the same settings returns
it (the CLI prints it, exit 0) without loading a model or rewriting a file; other settings are refused
before any model loads, naming them; and a search that finds no gain freezes nothing, so the held-out look
is not spent on it."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from _support import edit_document, forget_documents, make_tiny, not_none, planted_config
from click.testing import CliRunner

from celtk.ablation import export_ablated
from celtk.cli import main
from celtk.errors import NothingToFreezeError, RunStoreError
from celtk.heads import HeadSet
from celtk.run import Run, run_screen, run_select, run_test
from celtk.store.documents import ScreenDocument, SelectionDocument
from celtk.store.heldout import HeldoutLog


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``directory``: its bytes and its modification time (a rewrite of the same bytes shows)."""
    return {str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _no_model_loads(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded to rerun finished work")

    import celtk.models
    import celtk.run.full
    import celtk.run.handle

    for module in (celtk.models, celtk.run.full, celtk.run.handle):
        monkeypatch.setattr(module, "load_model", refuse)


@pytest.fixture(scope="module")
def cli_run(planted, tmp_path_factory):
    """`celtk run` on the planted model, exported as a plain checkpoint the CLI loads: (flags, run directory)."""
    model, task = planted
    root = tmp_path_factory.mktemp("cli")
    model_dir = export_ablated(model, HeadSet(()), root / "model")
    base = ["--model", str(model_dir), "--task", task, "--discovery", "24", "--heldout", "24", "--fewshot", "0",
            "--batch-size", "8", "--p", "4", "--k", "2"]
    out = root / "run"
    result = CliRunner().invoke(main, ["run", *base, "--out", str(out)], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    return base, out


def test_a_finished_run_rerun_prints_its_results_and_changes_no_file(cli_run, tmp_path, monkeypatch):
    base, finished = cli_run
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    before = _snapshot(out)
    _no_model_loads(monkeypatch)
    runner = CliRunner()
    again = runner.invoke(main, ["run", *base, "--out", str(out)], env={"COLUMNS": "240"})
    assert again.exit_code == 0, again.output
    assert "already holds this run, finished" in again.output and "Held-out test on 24 examples" in again.output
    # batch size and device do not change results: a rerun with others is the same run
    other_batch = [*base[:-6], "--batch-size", "3", *base[-4:]]
    assert runner.invoke(main, ["run", *other_batch, "--out", str(out)]).exit_code == 0
    for verb in (["screen", *base[:-4], "--out", str(out)], ["select", str(out)], ["select", "--out", str(out)],
                 ["test", str(out)], ["test", "--out", str(out), "--device", "cpu", "--batch-size", "3"]):
        shown = runner.invoke(main, verb, env={"COLUMNS": "240"})
        assert shown.exit_code == 0, (verb, shown.output)
        assert "already there for these settings" in shown.output, verb
    assert _snapshot(out) == before  # not one byte, not one modification time
    assert [look.what for look in HeldoutLog(out).looks()] == ["test"]


def test_a_rerun_with_other_settings_is_refused_before_a_model_loads_naming_them(cli_run, tmp_path, monkeypatch):
    base, finished = cli_run
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    before = _snapshot(out)
    _no_model_loads(monkeypatch)
    changed = [*base[:4], "--discovery", "30", *base[6:]]
    refused = CliRunner().invoke(main, ["run", *changed, "--out", str(out)])
    assert refused.exit_code == 1 and "Traceback" not in refused.output
    assert "discovery: stored 24, now 30" in refused.output and "--discovery 24" in refused.output
    assert _snapshot(out) == before


def test_select_with_other_options_after_the_test_is_still_refused(cli_run, tmp_path):
    _, finished = cli_run
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    refused = CliRunner().invoke(main, ["select", str(out), "--k", "1"])
    assert refused.exit_code == 1 and "already been looked at on its held-out set" in refused.output
    both = CliRunner().invoke(main, ["select", str(out), "--out", str(finished)])
    assert both.exit_code == 2 and "Two run directories given" in both.output


def test_run_methods_return_the_stored_documents_and_a_reopened_run_shows_them(planted, tmp_path, monkeypatch):
    model, task = planted
    out = tmp_path / "run"
    run = Run(out, config=planted_config(task), model=model)
    assert run.screen_result is None and run.selection is None and run.test_result is None
    screen, selection, test = run.screen(), run.select(), run.test(n_boot=100)
    before = _snapshot(out)
    _no_model_loads(monkeypatch)
    reopened = Run(out)  # no model given: a rerun of finished stages must not need one
    assert reopened.screen() == screen and reopened.select() == selection and reopened.test() == test
    assert reopened.screen_result == screen and reopened.selection == selection and reopened.test_result == test
    assert _snapshot(out) == before
    assert [look.what for look in HeldoutLog(out).looks()] == ["test"]  # no second look was logged


def test_a_rerun_given_the_model_still_refuses_a_changed_prompt(planted, tmp_path, monkeypatch):
    """Given a model, a stored screen is compared with the weights and the prompts it tokenises too."""
    import celtk.evaluation.prompts as evaluator

    model, task = planted
    out = tmp_path / "run"
    first = run_screen(planted_config(task), out, model=model)
    assert run_screen(planted_config(task), out, model=model) == first
    from celtk.tasks import build_context as original  # what the prompts module calls
    monkeypatch.setattr(evaluator, "build_context", lambda *a: original(*a) + " ")
    with pytest.raises(RunStoreError, match="different configuration .*prompt_hash"):
        run_screen(planted_config(task), out, model=model)


def test_a_selection_depends_on_the_screens_outcomes_not_its_float_diagnostics(planted, tmp_path):
    model, task = planted
    out = tmp_path / "run"
    run_screen(planted_config(task), out, model=model)
    selection = run_select(out, p=4, k=2, model=model)
    # a screen recomputed elsewhere: the null control's float difference moved, no outcome did
    edit_document(out, "screen.json", lambda d: {**d, "null_ablation": {**d["null_ablation"],
                                                                        "max_abs_logprob_diff": 1.5e-6}})
    assert run_select(out, p=4, k=2, model=model) == selection  # still the stored selection: nothing searched again
    # the screen's digest with the float diagnostics included is another digest: refused, not matched by a rule
    with_diagnostics = hashlib.sha256(json.dumps({k: v for k, v in json.loads((out / "screen.json").read_text())
                                                  .items() if k != "config"}, sort_keys=True).encode()).hexdigest()
    edited = edit_document(out, "selection.json", lambda d: {**d, "screen_digest": with_diagnostics})
    with pytest.raises(RunStoreError, match="searched on another screen.json"):
        run_test(out, model=model, n_boot=50)
    edit_document(out, "selection.json", lambda d: {**edited, "screen_digest": selection.screen_digest})
    assert run_test(out, model=model, n_boot=50).heads == selection.heads
    # an outcome that moved is another screen
    flip = {"0": "1", "1": "0"}
    edit_document(out, "screen.json", lambda d: {**d, "intact_correct": flip[d["intact_correct"][0]]
                                                 + d["intact_correct"][1:]})
    with pytest.raises(RunStoreError, match="searched on another screen.json"):
        run_test(out, model=model, n_boot=50, force=True)


def test_a_search_that_finds_no_gain_freezes_nothing_and_spends_no_look(planted, smol_tokenizer, tmp_path):
    """The planted task's targets are the clean model's own next tokens, so the clean model is at the ceiling
    (100 %) and no set can gain: select refuses to freeze one, `celtk run` stops before the test, and --force
    freezes it with the fact recorded."""
    _, task = planted
    clean = export_ablated(make_tiny("llama", smol_tokenizer, seed=3), HeadSet(()), tmp_path / "clean")
    out = tmp_path / "run"
    flags = ["--model", str(clean), "--task", task, "--discovery", "24", "--heldout", "24", "--fewshot", "0",
             "--batch-size", "8", "--p", "4", "--k", "2"]
    runner = CliRunner()
    screened = runner.invoke(main, ["screen", *flags[:-4], "--out", str(out)], env={"COLUMNS": "240"})
    assert screened.exit_code == 0, screened.output
    assert ScreenDocument.load(out).intact_accuracy == 1.0 and "at the ceiling of this task" in screened.output
    stopped = runner.invoke(main, ["run", *flags, "--out", str(out)])
    assert stopped.exit_code == 1 and "No head set gains on the discovery set" in stopped.output
    assert "Nothing was frozen and the held-out set is untouched" in stopped.output
    assert not (out / "selection.json").exists() and not (out / "test.json").exists()
    assert HeldoutLog(out).looks() == []
    with pytest.raises(NothingToFreezeError, match="--force"):
        run_select(out, p=4, k=2)
    forced = run_select(out, p=4, k=2, force=True)
    assert forced.forced_no_gain is True and forced.discovery_gain <= 0
    assert json.loads((out / "selection.json").read_text())["forced_no_gain"] is True
    assert not_none(SelectionDocument.load(out).forced_no_gain)


def test_select_and_test_take_another_device_and_batch_size_and_find_the_same(cli_run, tmp_path):
    _, finished = cli_run
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    forget_documents(out, "selection.json", "diagnostics.json", "test.json", "heldout_log.jsonl", "heldout_log.head")
    shutil.rmtree(out / "select_parts")
    runner = CliRunner()
    for verb in ("select", "test"):
        done = runner.invoke(main, [verb, "--out", str(out), "--device", "cpu", "--batch-size", "3"])
        assert done.exit_code == 0, done.output
    before, after = (json.loads((d / "selection.json").read_text()) for d in (finished, out))
    assert after["heads"] == before["heads"] and after["ranking"] == before["ranking"]
    assert after["config"]["batch_size"] == 3  # recorded beside the result, as every stage records its settings
    tested = [json.loads((d / "test.json").read_text()) for d in (finished, out)]
    verdicts = [[(e["id"], e["intact_correct"], e["ablated_correct"]) for e in t["examples"]] for t in tested]
    assert verdicts[0] == verdicts[1] and tested[0]["gain"] == tested[1]["gain"]
