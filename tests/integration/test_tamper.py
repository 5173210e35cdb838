"""What a text editor or a shell cannot do to a finished run without being refused: every document needs the
digest celtk recorded when it wrote it (a deleted, malformed or partial digests.json, a document copied in from
another run), and every bookkeeping file is read only from a regular file of bounded size (a link to /dev/zero
is one clear error, not a process that grows until the kernel kills it)."""

import json
import os
import shutil
from pathlib import Path

import pytest
from _support import planted_config

from celtk.errors import RunStoreError
from celtk.report import write_report
from celtk.run import run_screen, run_select, run_test
from celtk.run.directory import RunDirectory
from celtk.run.documents import ScreenDocument, SelectionDocument
from celtk.runstore import read_bounded


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


def test_without_digests_json_no_document_is_read(run_copy, planted):
    model, _ = planted
    (run_copy / "digests.json").unlink()
    for read in (lambda: ScreenDocument.load(run_copy), lambda: run_test(run_copy, model=model, force=True),
                 lambda: write_report(run_copy)):
        with pytest.raises(RunStoreError, match="has no digest: .*digests.json is missing") as refused:
            read()
        assert "delete" not in str(refused.value)


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


@pytest.mark.parametrize("name", ["heldout_log.jsonl", "heldout_log.head", "digests.json"])
def test_a_bookkeeping_file_linked_to_a_device_is_one_clear_error(run_copy, name):
    (run_copy / name).unlink()
    os.symlink("/dev/zero", run_copy / name)
    with pytest.raises(RunStoreError, match="is not a regular file"):
        RunDirectory(run_copy).require("test", force=True)
        SelectionDocument.load(run_copy)


def test_reads_stop_at_their_bound(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 1001)
    assert len(read_bounded(path, limit=1001)) == 1001
    with pytest.raises(RunStoreError, match="holds more than 1,000 bytes"):
        read_bounded(path, limit=1000)
    with pytest.raises(RunStoreError, match="is a directory"):
        read_bounded(tmp_path)
