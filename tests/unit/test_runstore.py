"""Atomic writes, locks, fingerprints and corrupted files."""

import errno
import os

import pytest

from celtk.errors import RunStoreError
from celtk.store.files import atomic_write_text, check_fingerprint, locked, read_json, write_json


def test_atomic_write_and_read(tmp_path):
    write_json(tmp_path / "a" / "x.json", {"k": [1, 2]})
    assert read_json(tmp_path / "a" / "x.json") == {"k": [1, 2]}
    assert not list((tmp_path / "a").glob(".*partial"))


def test_corrupted_file_is_named(tmp_path):
    (tmp_path / "screen.json").write_text('{"heads": [')
    with pytest.raises(RunStoreError, match=r"screen.json is corrupted \(invalid JSON at line 1"):
        read_json(tmp_path / "screen.json")
    with pytest.raises(RunStoreError, match="does not exist; run the stage"):
        read_json(tmp_path / "selection.json")


def test_disk_full_leaves_nothing_half_written(tmp_path, monkeypatch):
    target = tmp_path / "screen.json"
    write_json(target, {"old": True})
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(RunStoreError, match="the disk is full"):
        atomic_write_text(target, '{"new": true}')
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert read_json(target) == {"old": True}
    assert not list(tmp_path.glob(".*partial"))


def test_unwritable_directory(tmp_path):
    if os.geteuid() == 0:
        blocker = tmp_path / "file"
        blocker.write_text("x")
        with pytest.raises(RunStoreError, match="Choose a writable output directory"):
            write_json(blocker / "sub" / "x.json", {})
    else:
        os.chmod(tmp_path, 0o500)
        with pytest.raises(RunStoreError, match="Choose a writable"):
            write_json(tmp_path / "x.json", {})


def test_second_writer_is_refused(tmp_path):
    with locked(tmp_path):
        with pytest.raises(RunStoreError, match=r"in use by celtk pid \d+"):
            with locked(tmp_path):
                pass
    with locked(tmp_path):  # released afterwards
        pass


def test_stale_partial_files_are_removed_under_lock(tmp_path):
    (tmp_path / "parts").mkdir()
    stale = tmp_path / "parts" / ".L3.json.abc.partial"
    stale.write_text("{half")
    with locked(tmp_path):
        assert not stale.exists()


def test_fingerprint_mismatch_names_keys(tmp_path):
    check_fingerprint(tmp_path / "fp.json", {"model": "a", "seed": 1})
    check_fingerprint(tmp_path / "fp.json", {"model": "a", "seed": 1})
    with pytest.raises(RunStoreError, match="seed: stored 1, now 2"):
        check_fingerprint(tmp_path / "fp.json", {"model": "a", "seed": 2})
