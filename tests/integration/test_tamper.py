"""What a text editor or a shell cannot do to a finished run without being refused: every document needs the
digest celtk recorded when it wrote it (a deleted, malformed or partial digests.json, a document copied in from
another run), and every bookkeeping file is read only from a regular file of bounded size (a link to /dev/zero
is one clear error, not a process that grows until the kernel kills it)."""

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from _support import planted_config

from celtk.errors import RunStoreError
from celtk.report import write_report
from celtk.run import run_screen, run_select, run_test
from celtk.store.directory import RunDirectory
from celtk.store.documents import SelectionDocument
from celtk.store.files import append_line, read_bounded
from celtk.store.heldout import HeldoutLog


@pytest.fixture(scope="module")
def tested(planted, tmp_path_factory):
    model, task = planted
    out = tmp_path_factory.mktemp("tested")
    run_screen(planted_config(task), out, model=model)
    run_select(out, p=4, k=2, model=model)
    run_test(out, model=model, n_boot=50)
    return out


@pytest.fixture
def run_copy(tested, tmp_path):
    return Path(shutil.copytree(tested, tmp_path / "run"))


def _files(directory: Path) -> dict[Path, bytes]:
    """Every file's bytes, except the lock (which names its latest holder)."""
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def _every_reader(run: Path, model, task, tmp_path: Path) -> dict[str, Callable[[], object]]:
    """Every stage and view that opens a tested run directory, each as a call (``replicate``: its summary reads the
    run as the one seed of ``tmp_path/replicate``, a copy made by the caller)."""
    from click.testing import CliRunner

    from celtk.cli import main
    from celtk.run import (
        run_ablation_kinds,
        run_altscreen,
        run_calibration,
        run_eval,
        run_replicate,
        run_stability,
        run_transfer,
        variant_grid,
    )
    from celtk.run.analyses import run_attributes

    def looks_cli() -> None:
        """``celtk looks``: a refusal is its message and exit status 1 (raised again here as the error it names)."""
        result = CliRunner().invoke(main, ["looks", str(run)])
        assert result.exit_code == 1, result.output
        raise RunStoreError(" ".join(result.output.split()))

    return {
        "select": lambda: run_select(run, p=4, k=2, model=model, force=True),
        "test": lambda: run_test(run, model=model, n_boot=50, force=True),
        "report": lambda: write_report(run),
        "transfer": lambda: run_transfer(run, variant_grid(task, zero_shot=True), model=model, n_boot=50),
        "calibrate": lambda: run_calibration(run, null="random-heads", repeats=1, n_candidates=2, model=model),
        "ablations": lambda: run_ablation_kinds(run, model=model, n_boot=50),
        "stability": lambda: run_stability(run, resamples=2, model=model, n_boot=50),
        "altscreen": lambda: run_altscreen(run, method="gradient", p=4, masks=4, model=model),
        "attributes": lambda: run_attributes(run, model=model, length=4, batch=1),
        "eval": lambda: run_eval(None, model=model, heads="L1H2", split="heldout", run=run),
        "replicate": lambda: run_replicate(planted_config(task), tmp_path / "replicate", [0], model=model),
        "looks": lambda: RunDirectory(run).looks(),
        "celtk looks": looks_cli,
    }


def test_without_digests_json_every_stage_and_reader_refuses_the_run(run_copy, planted, tmp_path):
    """digests.json is how celtk tells its documents from edited or copied ones: a tested run without it is read by
    no stage and no view, each refusal names what is missing and what to do, and nothing in the run changes."""
    model, task = planted
    assert planted_config(task).seed == 0
    shutil.copytree(run_copy, tmp_path / "replicate" / "seed-0")
    for run in (run_copy, tmp_path / "replicate" / "seed-0"):
        (run / "digests.json").unlink()
    before = _files(run_copy)
    for name, read in _every_reader(run_copy, model, task, tmp_path).items():
        with pytest.raises(RunStoreError, match="has no digest: .*digests.json is missing") as refused:
            read()
        assert "restore digests.json, or start a new run directory" in str(refused.value), name
        assert "delete" not in str(refused.value), name
        assert _files(run_copy) == before, name


def test_without_fingerprint_json_no_stage_compares_settings_against_nothing(run_copy, planted, tmp_path):
    """fingerprint.json holds the settings the screen ran with; without it a stage would have nothing to compare its
    own with (and would write its own there), so every stage that loads a model, and the report, refuses."""
    model, task = planted
    (run_copy / "fingerprint.json").unlink()
    before = _files(run_copy)
    readers = _every_reader(run_copy, model, task, tmp_path)
    for name in ("select", "test", "report", "transfer", "calibrate", "ablations", "stability", "altscreen",
                 "attributes", "eval"):
        with pytest.raises(RunStoreError, match="fingerprint.json is missing: the screen records the run's settings "
                                                "there.*rerun the screen into a new run directory"):
            readers[name]()
        assert _files(run_copy) == before, name


@pytest.mark.parametrize(("name", "field"), [("screen.json", "schema_version"), ("selection.json", "schema_version"),
                                             ("selection.json", "screen_digest"), ("selection.json", "heldout")])
def test_a_document_lacking_a_field_celtk_writes_is_refused_naming_it(run_copy, planted, name, field):
    """A document celtk writes carries every field of its kind (schema_version, the screen a selection was searched
    on, the held-out set it froze); one without is from another celtk version, or edited, and is not read with a
    guess in its place (even with its digest recorded)."""
    from _support import edit_document

    model, _ = planted
    edit_document(run_copy, name, lambda d: {k: v for k, v in d.items() if k != field})
    lacks = "has no schema_version" if field == "schema_version" else f"lacks {field}, which celtk writes in every"
    with pytest.raises(RunStoreError, match=f"{name} {lacks}.*into a new run directory with this celtk version"):
        run_test(run_copy, model=model, n_boot=50, force=True)
    with pytest.raises(RunStoreError, match=f"{name} {lacks}"):
        write_report(run_copy)


def test_a_fingerprint_lacking_a_field_is_refused_naming_it(run_copy, planted):
    model, _ = planted
    stored = json.loads((run_copy / "fingerprint.json").read_text())
    (run_copy / "fingerprint.json").write_text(json.dumps({k: v for k, v in stored.items() if k != "prompt_hash"}))
    with pytest.raises(RunStoreError, match="fingerprint.json lacks prompt_hash, which celtk records in every run's "
                                            "fingerprint.*into a new run directory with this celtk version"):
        run_test(run_copy, model=model, n_boot=50, force=True)


def test_a_log_line_lacking_a_field_is_refused_naming_it(run_copy):
    """Every look line names what looked, when, at which heads, on which held-out set, and whether it was the test;
    one that lacks a field (re-chained after the edit, so only the missing field is wrong) is refused."""
    import hashlib

    log = run_copy / "heldout_log.jsonl"
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    del entries[0]["exploratory"]
    texts, prev = [], "0" * 64
    for entry in entries:
        texts.append(json.dumps({**entry, "prev": prev}))
        prev = hashlib.sha256(texts[-1].encode()).hexdigest()
    log.write_text("".join(text + "\n" for text in texts))
    (run_copy / "heldout_log.head").write_text(json.dumps({"lines": len(texts), "sha256": prev}))
    with pytest.raises(RunStoreError, match="line 1 lacks exploratory, which celtk writes in every look line"):
        RunDirectory(run_copy).looks()


@pytest.mark.parametrize("book", ["[]", '{"screen.json": 5}', "{not json"])
def test_a_malformed_digests_json_is_refused_and_never_to_be_deleted(run_copy, book):
    (run_copy / "digests.json").write_text(book)
    with pytest.raises(RunStoreError, match="digests.json") as refused:
        SelectionDocument.load(run_copy)
    assert "cannot be rebuilt: restore it" in str(refused.value) and "delete" not in str(refused.value)


def test_a_selection_copied_into_a_fresh_directory_is_not_tested(tested, tmp_path, planted):
    model, _ = planted
    fresh = tmp_path / "r2"
    fresh.mkdir()
    shutil.copy(tested / "selection.json", fresh)
    with pytest.raises(RunStoreError, match="no digest"):
        run_test(fresh, model=model, n_boot=50)
    shutil.copy(tested / "screen.json", fresh)
    (fresh / "digests.json").write_text(json.dumps({"screen.json": json.loads((tested / "digests.json").read_text())
                                                    ["screen.json"]}))
    with pytest.raises(RunStoreError, match="selection.json has no digest in .*did not write it in this directory"):
        run_test(fresh, model=model, n_boot=50)
    assert not (fresh / "test.json").exists() and not (fresh / "heldout_log.jsonl").exists()


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/full"])
@pytest.mark.parametrize("name", ["heldout_log.jsonl", "heldout_log.head", "digests.json"])
def test_a_bookkeeping_file_linked_to_a_device_is_one_clear_error(run_copy, name, device):
    (run_copy / name).unlink()
    os.symlink(device, run_copy / name)
    with pytest.raises(RunStoreError, match="is not a regular file"):
        RunDirectory(run_copy).require("test", force=True)
        SelectionDocument.load(run_copy)


def test_a_fifo_in_a_bookkeeping_file_s_place_is_one_clear_error_not_a_hang(tmp_path):
    fifo = tmp_path / "heldout_log.jsonl"
    os.mkfifo(fifo)  # nothing ever writes to it or reads from it: a blocking open would wait forever
    with pytest.raises(RunStoreError, match="is not a regular file"):
        read_bounded(fifo)
    with pytest.raises(RunStoreError, match="Could not append to .*heldout_log.jsonl"):
        append_line(fifo, "{}", "Restore the log.")


def test_reads_stop_at_their_bound(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 1001)
    assert len(read_bounded(path, limit=1001)) == 1001
    with pytest.raises(RunStoreError, match="holds more than 1,000 bytes"):
        read_bounded(path, limit=1000)
    with pytest.raises(RunStoreError, match="is a directory"):
        read_bounded(tmp_path)


# ---- the ledger outside the run directories (celtk.store.ledger) ----------------------------------------------------


@pytest.fixture(scope="module")
def screened(planted, tmp_path_factory):
    model, task = planted
    out = tmp_path_factory.mktemp("screened")
    run_screen(planted_config(task), out, model=model)
    return out


@pytest.fixture
def fresh_run(screened, planted, tmp_path):
    """A copy of the screened run, selected and tested in this test (so this test's ledger records both)."""
    model, _ = planted
    out = Path(shutil.copytree(screened, tmp_path / "run"))
    run_select(out, p=4, k=2, model=model)
    return out


def test_a_test_json_the_log_records_no_test_writing_is_refused(fresh_run, tested, planted):
    """A selected run given a test.json (and its digest) from another run: the log holds no look that wrote it."""
    from _support import copy_document

    model, _ = planted
    (fresh_run / "test.json").write_text("{}")
    copy_document(tested, fresh_run, "test.json")
    with pytest.raises(RunStoreError, match="test.json exists, but the held-out log records no test that wrote it"):
        run_test(fresh_run, model=model, n_boot=50, force=True)
    with pytest.raises(RunStoreError, match="records no test that wrote it"):
        write_report(fresh_run)


def test_a_copied_run_gets_no_second_first_test(fresh_run, planted, tmp_path, capsys):
    from celtk.cli.pipeline_cmds import _print_test

    model, _ = planted
    copy = Path(shutil.copytree(fresh_run, tmp_path / "copy"))  # selected, not yet tested: digests and all
    first = run_test(fresh_run, model=model, n_boot=50)
    with pytest.raises(RunStoreError, match="already tested under the same weights and task in another run directory"):
        run_test(copy, model=model, n_boot=50)
    assert not (copy / "test.json").exists()
    again = run_test(copy, model=model, n_boot=50, force=True)  # looked at anyway: on record as seen before
    (look,) = HeldoutLog(copy).looks()
    assert look.forced and look.exploratory and look.extra["seen_before"] == [f"{fresh_run.resolve()}#0"]
    assert again.gain == first.gain
    assert again.looks is not None and again.looks[0].seen_elsewhere == [f"{fresh_run.resolve()}#0"]
    _print_test(again)  # what `celtk test --force` prints
    shown = " ".join(capsys.readouterr().out.split())
    assert f"Seen before: this held-out set was already tested under the same weights and task in another run " \
           f"directory ({fresh_run.resolve()}#0)" in shown, shown


def test_a_log_rewritten_consistently_is_refused_by_the_ledger(fresh_run, planted):
    """Drop the test's lines, re-chain what is left with plain SHA-256, rewrite the head, delete test.json:
    everything inside the directory agrees, and the ledger still knows."""
    import hashlib

    model, _ = planted
    run_test(fresh_run, model=model, n_boot=50)
    log = fresh_run / "heldout_log.jsonl"
    kept = [json.loads(line) for line in log.read_text().splitlines() if json.loads(line).get("event") == "nothing"]
    log.write_text("".join(json.dumps(entry) + "\n" for entry in kept))
    (fresh_run / "heldout_log.head").write_text(json.dumps({"lines": 0, "sha256": hashlib.sha256(b"").hexdigest()}))
    (fresh_run / "test.json").unlink()
    for stage in (lambda: run_test(fresh_run, model=model, n_boot=50), lambda: write_report(fresh_run)):
        with pytest.raises(RunStoreError, match="does not hold the line 0 that celtk's ledger .* recorded"):
            stage()


def test_a_downgraded_log_is_refused(fresh_run, planted):
    model, _ = planted
    run_test(fresh_run, model=model, n_boot=50)
    log = fresh_run / "heldout_log.jsonl"
    stripped = [{k: v for k, v in json.loads(line).items() if k not in ("seq", "prev")}
                for line in log.read_text().splitlines()]
    log.write_text("".join(json.dumps(entry) + "\n" for entry in stripped))
    (fresh_run / "heldout_log.head").unlink()
    with pytest.raises(RunStoreError, match="has no hash chain"):
        RunDirectory(fresh_run).looks()


def test_a_head_whose_line_count_is_text_is_refused_saying_so(fresh_run, planted):
    model, _ = planted
    run_test(fresh_run, model=model, n_boot=50)
    lines = len((fresh_run / "heldout_log.jsonl").read_text().splitlines())
    head = json.loads((fresh_run / "heldout_log.head").read_text())
    (fresh_run / "heldout_log.head").write_text(json.dumps({**head, "lines": str(lines)}))
    with pytest.raises(RunStoreError, match=f"has {lines} line\\(s\\), and heldout_log.head holds no line count "
                                            f"\\('{lines}' where a whole number belongs\\)"):
        RunDirectory(fresh_run).looks()


def test_a_rewound_head_is_refused(fresh_run, planted):
    model, _ = planted
    run_test(fresh_run, model=model, n_boot=50)
    (fresh_run / "heldout_log.head").write_text(json.dumps({"lines": 0}))
    with pytest.raises(RunStoreError, match="heldout_log.head says 0: the head was rewound"):
        RunDirectory(fresh_run).looks()


@pytest.mark.parametrize("head", [[1, 2], {"lines": 2, "sha256": "0" * 64}])
def test_a_deleted_log_is_refused_whatever_its_head_holds(fresh_run, planted, head):
    """The log deleted, test.json kept, and the head left as it was or replaced by JSON of another shape."""
    model, _ = planted
    run_test(fresh_run, model=model, n_boot=50)
    (fresh_run / "heldout_log.jsonl").unlink()
    (fresh_run / "heldout_log.head").write_text(json.dumps(head))
    with pytest.raises(RunStoreError, match="heldout_log.jsonl is missing, (and heldout_log.head is not the object|"
                                            "but heldout_log.head says it had 2)"):
        RunDirectory(fresh_run).looks()


def test_eval_outside_a_run_does_not_score_its_frozen_heldout_set(fresh_run, planted, tmp_path):
    from celtk.errors import ConfigError
    from celtk.run.eval import run_eval

    model, task = planted
    selection = SelectionDocument.load(fresh_run)
    for split, exploratory in (("all", False), ("heldout", True)):
        with pytest.raises(ConfigError, match="include a frozen held-out set .*--split heldout --run"):
            run_eval(None, model=model, task=task, split=split, exploratory=exploratory, fewshot=0)  # the run's shots
    with pytest.raises(ConfigError, match="include a frozen held-out set .*--split heldout --run"):
        run_eval(None, model=model, task=task, split="discovery", limit=80, fewshot=0)  # reaches the 40 the run froze
    assert run_eval(None, model=model, task=task, split="discovery", limit=10, fewshot=0).n == 10  # none frozen there
    with pytest.raises(ConfigError, match="the run's own task and data; leave task"):
        run_eval(None, model=model, task=task, heads=selection.heads, split="heldout", run=fresh_run)
    logged = run_eval(None, model=model, heads=selection.heads, split="heldout", run=fresh_run)
    assert logged.n == 40 and [look.what for look in HeldoutLog(fresh_run).looks()] == ["eval"]


def test_transfer_and_calibrate_refuse_a_test_of_another_selection(fresh_run, planted):
    """After a forced reselection of other heads, test.json (the run's first test) tests the old ones."""
    from _support import edit_document

    from celtk.run import run_calibration, run_transfer, variant_grid

    model, task = planted
    run_test(fresh_run, model=model, n_boot=50)
    edit_document(fresh_run, "selection.json", lambda d: {**d, "heads": ["L0H0"], "forced_after_test": True})
    with pytest.raises(RunStoreError, match=r"test.json tests .* but selection.json now holds L0H0"):
        run_transfer(fresh_run, variant_grid(task, zero_shot=True), model=model)
    with pytest.raises(RunStoreError, match=r"selection.json now holds L0H0 .*calibrate reads"):
        run_calibration(fresh_run, null="permutation", repeats=5, model=model)


def test_a_reselection_with_another_heldout_set_is_not_shown_beside_the_old_test(fresh_run, planted):
    """select --force with another held-out size after the test freezes a new held-out set; test.json (the run's
    result) scored the old one, so transfer, calibrate, ablations and the report refuse to show them side by side."""
    from celtk.run import run_ablation_kinds, run_calibration, run_transfer, variant_grid

    model, task = planted
    run_test(fresh_run, model=model, n_boot=50)
    run_select(fresh_run, p=4, k=2, model=model, force=True, heldout=20)
    for stage in (lambda: run_transfer(fresh_run, variant_grid(task, zero_shot=True), model=model),
                  lambda: run_calibration(fresh_run, null="permutation", repeats=5, model=model),
                  lambda: run_ablation_kinds(fresh_run, model=model), lambda: write_report(fresh_run)):
        with pytest.raises(RunStoreError, match=r"test.json tested a held-out set of 40 examples .* another held-out "
                                                r"set, 20 examples"):
            stage()


@pytest.mark.parametrize(("field", "value"), [("task", "boolq"), ("model", "another-model")])
def test_a_test_document_naming_another_task_or_model_does_not_belong_to_the_selection(tested, field, value):
    """The same-run check compares test.json's model and task names with the selection's records, and says both as
    the files write them."""
    from celtk.store.documents import TestDocument, short
    from celtk.store.integrity import check_test_matches_selection

    selection = SelectionDocument.from_json(json.loads((tested / "selection.json").read_text()))
    data = json.loads((tested / "test.json").read_text())
    check_test_matches_selection(tested, TestDocument.from_json(data), selection)  # the run's own: no error
    recorded = short(selection.task.name if field == "task" else selection.model.name)  # quoted, cut to 60 characters
    with pytest.raises(RunStoreError, match=rf"does not belong to the run of selection.json \({field}: "
                                            rf"{re.escape(recorded)} in selection.json, '{value}' in test.json\)"):
        check_test_matches_selection(tested, TestDocument.from_json({**data, field: value}), selection)
