"""Atomic writes, locks, fingerprints and corrupted files."""

import errno
import json
import os
import stat
from dataclasses import dataclass
from typing import ClassVar

import pytest

from celtk.errors import RunStoreError
from celtk.store.directory import RunDirectory
from celtk.store.documents import Document
from celtk.store.files import (
    append_line,
    atomic_write_bytes,
    atomic_write_text,
    check_fingerprint,
    locked,
    read_json,
    sweep_if_idle,
    write_json,
)


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


def test_a_reader_sweeps_a_killed_writers_files_only_when_no_writer_holds_the_lock(tmp_path):
    """A finished stage is returned without the lock: its reader sweeps what a writer killed after the stage's last
    document left, but never while a writer holds the lock (it may be writing them)."""
    stale = tmp_path / ".digests.json.abc.partial"
    with locked(tmp_path):
        stale.write_text("{being written")
        sweep_if_idle(tmp_path)
        assert stale.exists()  # a writer holds the lock: untouched
    (tmp_path / "keep.json").write_text("{}")
    sweep_if_idle(tmp_path)
    assert not stale.exists() and (tmp_path / "keep.json").exists()
    sweep_if_idle(tmp_path / "never-run")  # no directory: nothing to do, no error


def test_fingerprint_mismatch_names_keys(tmp_path):
    check_fingerprint(tmp_path / "fp.json", {"model": "a", "seed": 1})
    check_fingerprint(tmp_path / "fp.json", {"model": "a", "seed": 1})
    with pytest.raises(RunStoreError, match="seed: stored 1, now 2"):
        check_fingerprint(tmp_path / "fp.json", {"model": "a", "seed": 2})


@dataclass(frozen=True, kw_only=True)
class _Note(Document):
    FILE: ClassVar[str] = "note.json"
    text: str


@pytest.mark.parametrize("first", [True, False], ids=["first write", "rewrite"])
@pytest.mark.parametrize("stopped_at", [1, 2, 3], ids=["announcing", "replacing", "recording"])
def test_a_save_stopped_at_any_step_leaves_a_directory_that_reads(tmp_path, monkeypatch, first, stopped_at):
    """A document's save announces its digest, replaces the file, then records the digest. Stopped (a kill) before
    any of the three, the directory still reads: the old document (or none) until the file was replaced, the new one
    after, never a refusal as an edited file; and the next save leaves digests.json as an uninterrupted one does."""
    from celtk.store.documents import digests

    whole = tmp_path / "whole"
    if not first:
        RunDirectory(whole).save(_Note(text="old"))
    RunDirectory(whole).save(_Note(text="new"))
    out = tmp_path / "stopped"
    if not first:
        RunDirectory(out).save(_Note(text="old"))
    calls = [0]

    def step(real):
        def stopped(*args, **kwargs):
            calls[0] += 1
            if calls[0] == stopped_at:
                raise KeyboardInterrupt
            return real(*args, **kwargs)
        return stopped
    monkeypatch.setattr(digests, "write_json", step(write_json))  # the writers the save calls, as digests imports them
    monkeypatch.setattr(digests, "atomic_write_bytes", step(atomic_write_bytes))
    with pytest.raises(KeyboardInterrupt):
        RunDirectory(out).save(_Note(text="new"))
    monkeypatch.undo()
    replaced = stopped_at == 3
    if replaced or not first:
        assert RunDirectory(out).load(_Note).text == ("new" if replaced else "old")
        assert _Note.load(out).text == ("new" if replaced else "old")
    else:
        assert not RunDirectory(out).has(_Note)
    RunDirectory(out).save(_Note(text="new"))
    assert (out / "digests.json").read_bytes() == (whole / "digests.json").read_bytes()
    assert RunDirectory(out).load(_Note).text == "new"


def test_a_document_matching_neither_digest_is_still_refused(tmp_path):
    """The announcement admits only the announced bytes: an edit after a stopped save is refused as before."""
    RunDirectory(tmp_path).save(_Note(text="old"))
    table = json.loads((tmp_path / "digests.json").read_text())
    (tmp_path / "digests.json").write_text(json.dumps({**table, "writing:note.json": "0" * 64}))
    (tmp_path / "note.json").write_text((tmp_path / "note.json").read_text().replace("old", "odd"))
    with pytest.raises(RunStoreError, match="changed after celtk wrote it"):
        RunDirectory(tmp_path).load(_Note)


def _record_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every fsync (of a file or of a directory) and every rename, in order."""
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor: int) -> None:
        events.append("fsync directory" if stat.S_ISDIR(os.fstat(descriptor).st_mode) else "fsync file")
        real_fsync(descriptor)

    def replace(source: str, target: str) -> None:
        events.append("rename")
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_a_written_file_and_then_its_name_reach_the_disk_before_the_write_returns(tmp_path, monkeypatch):
    events = _record_syncs(monkeypatch)
    atomic_write_bytes(tmp_path / "screen.json", b"{}\n")
    assert events == ["fsync file", "rename", "fsync directory"]
    assert (tmp_path / "screen.json").read_bytes() == b"{}\n"


def test_a_log_line_and_the_logs_name_reach_the_disk_before_the_append_returns(tmp_path, monkeypatch):
    events = _record_syncs(monkeypatch)
    append_line(tmp_path / "heldout_log.jsonl", "{}", "advice")
    assert events == ["fsync file", "fsync directory"]


def test_a_write_into_new_directories_makes_their_names_durable_too(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        if stat.S_ISDIR(os.fstat(descriptor).st_mode):
            synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write_bytes(tmp_path / "run" / "select_parts" / "sets.key", b"k")
    assert synced == [str(tmp_path / "run" / "select_parts"), str(tmp_path / "run"), str(tmp_path)]
    synced.clear()
    atomic_write_bytes(tmp_path / "run" / "select_parts" / "sets.key", b"k2")  # nothing new but the file
    assert synced == [str(tmp_path / "run" / "select_parts")]


def _directory_fsync_fails(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    real_fsync = os.fsync

    def fsync(descriptor: int) -> None:
        if stat.S_ISDIR(os.fstat(descriptor).st_mode):
            raise OSError(code, os.strerror(code))
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)


def test_a_file_system_that_cannot_sync_a_directory_keeps_the_write(tmp_path, monkeypatch):
    _directory_fsync_fails(monkeypatch, errno.EINVAL)
    atomic_write_bytes(tmp_path / "selection.json", b"[]\n")
    assert (tmp_path / "selection.json").read_bytes() == b"[]\n"


def test_a_disk_error_while_syncing_the_directory_is_reported(tmp_path, monkeypatch):
    _directory_fsync_fails(monkeypatch, errno.EIO)
    with pytest.raises(RunStoreError, match="durable: Input/output error"):
        atomic_write_bytes(tmp_path / "selection.json", b"[]\n")
