"""The held-out contract on the planted tiny run: every use of the held-out set is a logged look,
the first test is the result, a select after any look is refused unless forced, the log is
hash-chained, and results are written after their log line."""

import json
import shutil

import pytest
from _support import edit_document, not_none, planted_config

from celtk.errors import ConfigError, RunStoreError
from celtk.heads import HeadSet
from celtk.report import write_report
from celtk.run import run_screen, run_select, run_stability, run_test
from celtk.run.eval import run_eval
from celtk.store.directory import RunDirectory
from celtk.store.documents import SelectionDocument, TestDocument
from celtk.store.heldout import HeldoutLog


@pytest.fixture(scope="module")
def screened_run(planted, tmp_path_factory):
    """The planted run screened, not yet selected (copy it before changing it)."""
    model, task = planted
    out = tmp_path_factory.mktemp("screened")
    run_screen(planted_config(task), out, model=model)
    return out


@pytest.fixture(scope="module")
def selected_run(screened_run, planted, tmp_path_factory):
    """The planted run screened and selected, not yet tested (copy it before changing it)."""
    model, _ = planted
    out = tmp_path_factory.mktemp("selected") / "run"
    shutil.copytree(screened_run, out)
    run_select(out, p=4, k=2, model=model)
    return out


@pytest.fixture
def run_copy(selected_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(selected_run, out)
    return out


def test_a_select_killed_before_its_file_is_written_has_already_put_its_heldout_set_in_the_ledger(
        screened_run, planted, tmp_path, monkeypatch):
    """selection.json marks the stage finished and a rerun returns it without recording anything, so the ledger
    records the frozen held-out set first: a kill while the file is written leaves the split guarded."""
    from celtk.store.ledger import Ledger

    model, _ = planted
    out = tmp_path / "run"
    shutil.copytree(screened_run, out)
    real = RunDirectory.save

    def killed(self, document, name=None):
        if document.file_name() == "selection.json":
            raise KeyboardInterrupt
        return real(self, document, name)
    monkeypatch.setattr(RunDirectory, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        run_select(out, p=4, k=2, model=model)
    assert not (out / "selection.json").exists()
    frozen = [e for e in Ledger().entries() if e.get("event") == "frozen" and e["run"] == str(out.resolve())]
    assert len(frozen) == 1 and frozen[0]["examples"]


def _killed_before_logging(monkeypatch):
    """The next test stops (a kill) after writing its files and before the log's result lines."""
    def killed(self, seq, *files, digests=None):
        raise KeyboardInterrupt
    monkeypatch.setattr(HeldoutLog, "complete", killed)


def test_a_test_killed_between_its_files_and_their_log_lines_is_read_back_as_the_result(run_copy, planted,
                                                                                      monkeypatch):
    """test.json written, the log's result line not: the test look is the log's last, and test.json (celtk's bytes,
    by digests.json) records that look complete, so the rerun logs the line under the lock and returns the stored
    result; no second look, nothing scored again."""
    model, _ = planted
    _killed_before_logging(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run_test(run_copy, model=model, n_boot=100)
    monkeypatch.undo()
    written = (run_copy / "test.json").read_bytes()
    assert run_test(run_copy, model=model, n_boot=100) == TestDocument.load(run_copy)
    assert (run_copy / "test.json").read_bytes() == written
    looks = RunDirectory(run_copy).looks()
    assert [(look.what, look.complete) for look in looks] == [("test", True)]
    RunDirectory(run_copy).verify()


def test_the_report_of_a_test_killed_before_logging_logs_it_and_shows_it_as_the_result(run_copy, planted,
                                                                                     monkeypatch):
    """The report holds the run's lock while it reads: the repair is made under that same lock."""
    model, _ = planted
    _killed_before_logging(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run_test(run_copy, model=model, n_boot=100)
    monkeypatch.undo()
    page = write_report(run_copy).read_text()
    assert "the result" in page and [look.complete for look in HeldoutLog(run_copy).looks()] == [True]


def test_a_forced_repeat_killed_before_logging_leaves_the_first_test_the_result(run_copy, planted, monkeypatch):
    model, _ = planted
    first = run_test(run_copy, model=model, n_boot=100)
    _killed_before_logging(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run_test(run_copy, model=model, n_boot=100, force=True)
    monkeypatch.undo()
    stored = run_test(run_copy, model=model, n_boot=100)
    assert (stored.gain, stored.heldout_hash) == (first.gain, first.heldout_hash)
    looks = RunDirectory(run_copy).looks()
    assert [look.complete for look in looks] == [True, True]
    lines = [entry for _, entry in HeldoutLog(run_copy).lines() if entry["event"] == "result"]
    # as an uninterrupted repeat logs them: its own file first, then test.json (which keeps the first result)
    assert [(e["look"], e["file"]) for e in lines] == [(looks[0].seq, "test.json"),
                                                        (looks[1].seq, f"test-repeat-{looks[1].seq}.json"),
                                                        (looks[1].seq, "test.json")]


def test_a_test_json_copied_from_a_run_that_froze_another_heldout_set_is_refused_after_a_cut_test(
        screened_run, run_copy, planted, tmp_path, monkeypatch):
    """A test killed while it scored leaves its look incomplete with no file; test.json and digests.json copied in
    from another run (its own held-out set frozen) are not taken for its result, and nothing is logged."""
    import celtk.run.test as stage

    model, _ = planted
    other = tmp_path / "other"
    shutil.copytree(screened_run, other)
    monkeypatch.setenv("CELTK_LEDGER", str(tmp_path / "other-ledger.jsonl"))
    run_select(other, p=4, k=2, heldout=30, model=model)
    run_test(other, model=model, n_boot=100)
    monkeypatch.setenv("CELTK_LEDGER", str(tmp_path / "own-ledger.jsonl"))

    def killed(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(stage, "score_streaming", killed)
    with pytest.raises(KeyboardInterrupt):
        run_test(run_copy, model=model, n_boot=100)
    monkeypatch.setattr(stage, "score_streaming", stage.score_streaming)
    assert TestDocument.load(other).heldout_hash != RunDirectory(run_copy).load(SelectionDocument).heldout.hash
    log = (run_copy / "heldout_log.jsonl").read_bytes()
    for name in ("test.json", "digests.json"):
        shutil.copyfile(other / name, run_copy / name)
    with pytest.raises(RunStoreError):
        run_test(run_copy, model=model, n_boot=100)
    assert (run_copy / "heldout_log.jsonl").read_bytes() == log  # no result line appended


def test_a_cut_test_whose_file_was_then_edited_is_refused(run_copy, planted, monkeypatch):
    model, _ = planted
    _killed_before_logging(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        run_test(run_copy, model=model, n_boot=100)
    monkeypatch.undo()
    edited = json.loads((run_copy / "test.json").read_text())
    (run_copy / "test.json").write_text(json.dumps({**edited, "gain": 0.5}))  # by hand: digests.json not updated
    with pytest.raises(RunStoreError, match="test.json"):
        run_test(run_copy, model=model, n_boot=100)
    assert [look.complete for look in HeldoutLog(run_copy).looks()] == [False]  # nothing logged for edited bytes


def test_selection_freezes_its_heldout_set(run_copy, planted):
    model, _ = planted
    selection = json.loads((run_copy / "selection.json").read_text())
    test = run_test(run_copy, model=model, n_boot=100)
    assert selection["heldout"]["n"] == 40 == test.n and selection["heldout"]["hash"] == test.heldout_hash
    assert not (run_copy / "heldout_log.jsonl").read_text().count('"heldout_hash": ""')


def test_stability_before_select_or_test_is_a_look_and_select_is_then_refused(run_copy, planted):
    """Stability scores on the held-out set what a select with its p and k would choose: it is logged,
    and a later select (which could pick by those held-out figures) is refused unless forced."""
    model, _ = planted
    doc = run_stability(run_copy, resamples=2, p=4, k=2, model=model, n_boot=50)
    assert all(row.exploratory for row in doc.selections)  # untested: no row is the test
    (look,) = HeldoutLog(run_copy).looks()
    assert look.what == "stability" and look.frozen and look.exploratory and look.result == "stability.json"
    with pytest.raises(RunStoreError, match=r"already been looked at on its held-out set \(stability at"):
        run_select(run_copy, p=3, k=1, model=model)
    forced = run_select(run_copy, p=3, k=1, model=model, force=True)
    assert forced.forced_after_test and [r.what for r in not_none(forced.prior_looks)] == ["stability"]
    assert HeldoutLog(run_copy).events("select-forced")[0]["after_looks"] == [0]
    # the test that follows lists the earlier look beside itself
    test = run_test(run_copy, model=model, n_boot=50)
    assert [(r.what, r.complete) for r in not_none(test.looks)] == [("stability", True), ("test", True)]
    assert test.look == HeldoutLog(run_copy).looks()[-1].seq  # the log's seq of the test's own look line
    assert "stability" in write_report(run_copy).read_text()


def test_a_second_test_returns_the_first_without_a_look_and_a_forced_one_keeps_the_first_result(run_copy, planted):
    model, _ = planted
    first = run_test(run_copy, model=model, n_boot=100)
    first_bytes = json.loads((run_copy / "test.json").read_text())
    assert run_test(run_copy, model=model, n_boot=100) == first  # the stored result: nothing scored, nothing logged
    assert len(HeldoutLog(run_copy).looks()) == 1
    with pytest.raises(ConfigError, match="fixed when the selection was frozen: 40 examples"):
        run_test(run_copy, model=model, heldout=30, n_boot=100, force=True)
    kept = run_test(run_copy, model=model, n_boot=100, force=True)
    now = json.loads((run_copy / "test.json").read_text())
    # the result is the first test's, field for field; only the list of looks grew
    assert {k: v for k, v in now.items() if k != "looks"} == {k: v for k, v in first_bytes.items() if k != "looks"}
    assert kept.gain == first.gain and kept.look == first.look
    assert kept.looks is not None
    assert [(r.what, r.forced, r.exploratory) for r in kept.looks] == [("test", False, False), ("test", True, True)]
    repeat = TestDocument.load(run_copy, kept.looks[-1].result)
    assert kept.looks[-1].result == f"test-repeat-{kept.looks[-1].seq}.json" and repeat.n == first.n
    html = write_report(run_copy).read_text()
    assert "Looks at the held-out set" in html and "(forced)" in html


def test_eval_on_a_runs_heldout_split_goes_through_the_run_and_is_logged(run_copy, planted, tmp_path):
    model, task = planted
    with pytest.raises(ConfigError, match="held-out split is a run's held-out set.*--run DIR"):
        run_eval(tmp_path / "ev", model=model, task=task, split="heldout", heads="L1H2")
    test = run_test(run_copy, model=model, n_boot=50)
    doc = run_eval(tmp_path / "ev", model=model, heads="L0H1", split="heldout", run=run_copy)
    assert [e.id for e in doc.examples] == [e.id for e in test.examples]  # the run's held-out set, exactly
    look = HeldoutLog(run_copy).looks()[-1]
    assert look.what == "eval" and look.heads == [HeadSet.parse("L0H1")] and look.exploratory and not look.frozen
    assert look.result == str((tmp_path / "ev" / "eval.json").resolve()) and doc.config["look"] == look.seq
    outside = run_eval(None, model=model, task=task, split="heldout", limit=5, exploratory=True, fewshot=0)
    assert outside.config["exploratory"] is True
    with pytest.raises(ConfigError, match="ISO date"):
        run_eval(None, model=model, task=task, limit=2, chat_date="yesterday", fewshot=0)


@pytest.mark.parametrize("damage", ["edit", "truncate", "drop-head", "insert"])
def test_an_edited_or_truncated_log_is_refused(run_copy, planted, damage):
    model, _ = planted
    run_test(run_copy, model=model, n_boot=50)
    run_stability(run_copy, resamples=2, p=4, k=2, model=model, n_boot=50)
    log = run_copy / "heldout_log.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    if damage == "edit":  # a look made to look like another
        lines[0] = lines[0].replace('"what": "test"', '"what": "eval"')
        log.write_text("".join(lines))
    elif damage == "truncate":
        log.write_text("".join(lines[:-2]))
    elif damage == "drop-head":
        (run_copy / "heldout_log.head").unlink()
    else:
        log.write_text(lines[0] + lines[0] + "".join(lines[1:]))
    for stage in (lambda: run_select(run_copy, p=4, k=2, model=model, force=True),
                  lambda: run_test(run_copy, model=model, force=True, n_boot=10),
                  lambda: write_report(run_copy)):
        with pytest.raises(RunStoreError, match="held-out log is append-only and hash-chained"):
            stage()


def test_documents_edited_by_hand_are_refused(run_copy, planted):
    model, _ = planted
    selection = json.loads((run_copy / "selection.json").read_text())
    (run_copy / "selection.json").write_text(json.dumps({**selection, "heads": ["L0H0"]}))
    with pytest.raises(RunStoreError, match="selection.json was changed after celtk wrote it"):
        run_test(run_copy, model=model, n_boot=10)
    (run_copy / "selection.json").write_text(json.dumps(selection))  # not the bytes celtk wrote (indentation)
    with pytest.raises(RunStoreError, match="changed after celtk wrote it"):
        run_test(run_copy, model=model, n_boot=10)
    edit_document(run_copy, "selection.json", lambda s: s)  # as celtk would have written it: accepted
    test = run_test(run_copy, model=model, n_boot=10)
    (run_copy / "test.json").write_text((run_copy / "test.json").read_text().replace(f'"gain": {test.gain}',
                                                                                     '"gain": 0.9'))
    with pytest.raises(RunStoreError, match="changed after celtk wrote it|edited after the test"):
        write_report(run_copy)


def test_the_result_is_written_after_its_log_line(run_copy, planted, monkeypatch):
    """A failure between the log line and the result leaves an incomplete look and no test.json; the
    rerun is then the first test, and it lists the interrupted look."""
    model, _ = planted
    original = RunDirectory.save

    def fail(self, document, name=None):  # a stage writes its documents through its run directory
        if isinstance(document, TestDocument):
            raise RunStoreError("disk full (simulated)")
        original(self, document, name)

    monkeypatch.setattr(RunDirectory, "save", fail)
    with pytest.raises(RunStoreError, match="simulated"):
        run_test(run_copy, model=model, n_boot=10)
    assert not (run_copy / "test.json").exists()
    (look,) = HeldoutLog(run_copy).looks()
    assert look.what == "test" and not look.complete
    monkeypatch.setattr(RunDirectory, "save", original)
    test = run_test(run_copy, model=model, n_boot=10)
    assert [(r.what, r.complete) for r in not_none(test.looks)] == [("test", False), ("test", True)]


def test_a_log_downgraded_to_unchained_lines_is_refused(run_copy, planted):
    """Lines without the chain were what celtk wrote before it kept one; read as trusted they would let anyone
    rewrite a log by stripping its chain, so they are refused (and the ledger would miss the lines anyway)."""
    model, _ = planted
    test = run_test(run_copy, model=model, n_boot=10)
    legacy = {"what": "test", "when": "2026-01-01T00:00:00Z", "heads": [test.heads.names()],
              "heldout_hash": test.heldout_hash, "n": test.n}
    (run_copy / "heldout_log.jsonl").write_text(json.dumps(legacy) + "\n")
    (run_copy / "heldout_log.head").unlink()
    with pytest.raises(RunStoreError, match="line 1 has no hash chain"):
        HeldoutLog(run_copy).looks()


def test_a_look_that_scored_the_selection_before_its_test_is_marked_seen_before_test(run_copy, planted):
    """eval --run --ablate of the frozen heads before the test showed its held-out comparison: the log's view, the
    test (its document and output), `celtk looks` and the report say so, worked out when the log is read (no line
    is rewritten); a look at other heads, or one after the test, is not marked."""
    from click.testing import CliRunner

    from celtk.cli import main
    from celtk.store.directory import RunDirectory
    from celtk.store.documents import SelectionDocument

    model, _ = planted
    heads = SelectionDocument.load(run_copy).heads
    other = run_eval(None, model=model, heads="L0H1", split="heldout", run=run_copy).config["look"]
    seen = run_eval(None, model=model, heads=heads, split="heldout", run=run_copy, limit=10).config["look"]
    before = (run_copy / "heldout_log.jsonl").read_text()
    test = run_test(run_copy, model=model, n_boot=50)
    assert (run_copy / "heldout_log.jsonl").read_text().startswith(before)  # earlier lines as they were
    assert test.seen_before_test == [seen] and other not in test.seen_before_test
    after = run_eval(None, model=model, heads=heads, split="heldout", run=run_copy, limit=5).config["look"]
    looks = {look.seq: look for look in RunDirectory(run_copy).looks()}
    assert looks[seen].seen_before_test == test.look and looks[seen].frozen
    assert looks[other].seen_before_test is None and looks[after].seen_before_test is None
    assert looks[not_none(test.look)].seen_by == [seen]
    assert [r.seen_before_test for r in not_none(test.looks)] == [None, test.look, None]
    stored = json.loads((run_copy / "test.json").read_text())
    assert stored["seen_before_test"] == [seen] and stored["looks"][1]["seen_before_test"] == test.look
    listing = " ".join(CliRunner().invoke(main, ["looks", str(run_copy)], env={"COLUMNS": "300"}).output.split())
    assert f"exploratory; seen before test (look {test.look})" in listing
    assert f"Test look {test.look} is not a first look: look(s) {seen} had already scored" in listing
    rerun = " ".join(CliRunner().invoke(main, ["test", str(run_copy)], env={"COLUMNS": "300"}).output.split())
    assert f"Not a first look: look(s) {seen} already scored this selection" in rerun, rerun
    page = write_report(run_copy).read_text()
    assert f"Not a first look: look {seen} had already scored this selection" in page
    assert f"<td>exploratory; seen before test (look {test.look})</td>" in page


def test_a_stability_look_before_select_is_seen_before_the_test_of_the_selection_it_scored(screened_run, planted,
                                                                                            tmp_path):
    """Before select nothing is frozen, so the stability look's line says "frozen": null (not false); once select
    freezes its reference row, the views show the look as having scored it, and the test marks it."""
    from celtk.store.directory import RunDirectory

    model, _ = planted
    out = tmp_path / "run"
    shutil.copytree(screened_run, out)
    stability = run_stability(out, resamples=2, p=4, k=2, model=model, n_boot=50)
    assert json.loads((out / "heldout_log.jsonl").read_text().splitlines()[0])["frozen"] is None
    forced = run_select(out, p=4, k=2, model=model, force=True)
    assert forced.heads == stability.reference_selection
    (look,) = RunDirectory(out).looks()
    assert look.frozen and look.seen_before_test is None  # scored what is frozen now; not tested yet
    test = run_test(out, model=model, n_boot=50)
    assert test.seen_before_test == [look.seq]
    assert RunDirectory(out).looks()[0].seen_before_test == test.look
    assert run_test(out, model=model, n_boot=50) == test  # tested after the forced select: the stored result
