"""Run directories: atomic JSON/CSV writes, a lock, and a config fingerprint that refuses
to mix results of different models, tasks, data or settings."""

from __future__ import annotations

import csv
import errno
import fcntl
import hashlib
import io
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ForwardRef, TypeAlias, Union

from celtk.errors import RunStoreError

# A JSON value as json.loads gives it back: what a run's files hold once read. Recursive: mypy reads the first
# spelling; at run time (the jaxtyping/beartype checks under pytest) the self-reference names this module, since a
# bare "JsonValue" would be looked up in each module that uses the alias, and not found there.
if TYPE_CHECKING:
    JsonValue: TypeAlias = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]
else:
    _JSON_VALUE = ForwardRef("JsonValue", module=__name__)
    JsonValue = Union[None, bool, int, float, str, list[_JSON_VALUE], dict[str, _JSON_VALUE]]  # noqa: UP007
JsonObject = dict[str, JsonValue]


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename: readers never see half a file."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename (:func:`atomic_write_text`): the file holds exactly
    these bytes, so their SHA-256 is the file's."""
    path = Path(path)
    made: list[Path] = []  # the directories this write creates: usually none, found with one stat
    directory = path.parent
    while not directory.exists():
        made.append(directory)
        directory = directory.parent
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    except OSError as error:
        raise RunStoreError(f"Cannot write in {path.parent}: {error.strerror}. "
                            "Choose a writable output directory.") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    except OSError as error:
        Path(tmp).unlink(missing_ok=True)
        what = "the disk is full" if error.errno == errno.ENOSPC else error.strerror
        raise RunStoreError(f"Could not write {path}: {what}. Nothing was half-written; free space or pick another "
                            "directory and rerun the same command to resume.") from None
    for directory in (path.parent, *(d.parent for d in made)):  # the new name, and those of new directories
        sync_directory(directory)


# what fsync on a directory answers where the file system cannot sync one (some network and FUSE mounts)
_CANNOT_SYNC = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EROFS, errno.EBADF, errno.EACCES}


def sync_directory(directory: Path) -> None:
    """Make the names in ``directory`` durable (a rename or a new file survives a power cut once this returns), so
    that two writes made in order reach the disk in that order: a document before the digest that records it. A
    file system that cannot sync a directory keeps its own guarantees; a failing disk is a :class:`RunStoreError`."""
    try:
        descriptor = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as error:
        if error.errno in _CANNOT_SYNC:
            return
        raise RunStoreError(f"Could not open {directory} to make its files durable: {error.strerror}.") from None
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno not in _CANNOT_SYNC:
            raise RunStoreError(f"Could not make the files in {directory} durable: {error.strerror}. The disk may "
                                "be failing; the files written are in place, check them before relying on them."
                                ) from None
    finally:
        os.close(descriptor)


def append_line(path: Path, text: str, advice: str) -> None:
    """Append ``text`` and a newline to ``path``, flushed and fsynced: an append-only log's next line. A failure is a
    :class:`RunStoreError` naming the file and the cause, then ``advice``."""
    try:
        # O_NONBLOCK: a FIFO put in the file's place fails now (no reader: ENXIO) instead of blocking this open
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise RunStoreError(f"Could not append to {path}: it is not a regular file (a device, FIFO or directory, "
                                f"perhaps through a link). {advice}")
        with os.fdopen(descriptor, "a", encoding="utf-8") as handle:
            handle.write(text + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        raise RunStoreError(f"Could not append to {path}: {error.strerror}. {advice}") from None
    sync_directory(path.parent)  # the log's name, when this line made the file (logs are appended a few times a run)


def dumps(obj: object) -> str:
    """Strict JSON: NaN and infinity are refused (strict parsers reject them); write ``None`` with a reason."""
    try:
        return json.dumps(obj, indent=1, sort_keys=False, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError:
        raise RunStoreError(f"Refusing to write NaN or infinity into JSON (in {_non_finite_path(obj)}); "
                            "an undefined value must be written as null with a reason.") from None


def _non_finite_path(obj: object, where: str = "$") -> str:
    """The JSON path of the first NaN/infinity in ``obj`` (for the error message)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return where
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else []
    for key, value in items:
        found = _non_finite_path(value, f"{where}.{key}" if isinstance(obj, dict) else f"{where}[{key}]")
        if found:
            return found
    return "" if where != "$" else "the document"


def write_json(path: Path, obj: object) -> None:
    atomic_write_text(path, dumps(obj))


# The most a run's file may hold before celtk refuses to read it: documents (a screen of every head on every
# discovery example, a test with generations) and the held-out log stay far below; a bound keeps a device, a FIFO
# or a runaway file from growing celtk until the kernel kills it.
MAX_FILE_BYTES = 1 << 30


def read_bounded(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path`` if it is a regular file (a link to one counts) of at most ``limit`` bytes; a device,
    FIFO, directory or larger file is one clear :class:`RunStoreError`, read no further than ``limit`` bytes."""
    path = Path(path)
    try:
        # O_NONBLOCK: a FIFO in the file's place is opened at once (and refused below) instead of blocking until
        # something writes to it; reads of a regular file do not block either way
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError
            if not stat.S_ISREG(info.st_mode):
                raise RunStoreError(f"{path} is not a regular file (a device, FIFO or directory, perhaps through a "
                                    "link); celtk reads a run's files only from regular files. Restore the file celtk "
                                    "wrote, or start a new run directory.")
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise RunStoreError(f"{path} does not exist; run the stage that writes it first.") from None
    except IsADirectoryError:
        raise RunStoreError(f"{path} is a directory, not a file celtk wrote; remove it or start a new run "
                            "directory.") from None
    except OSError as error:
        raise RunStoreError(f"Cannot read {path}: {error.strerror}.") from None
    if len(data) > limit:
        raise RunStoreError(f"{path} holds more than {limit:,} bytes, far more than celtk writes there: it is not "
                            "a file celtk wrote. Restore it, or start a new run directory.")
    return data


# read_json and parse_json return the value unnarrowed: their readers index the document they expect at once
# (read_json(path)["seconds"])
def read_json(path: Path, *, advice: str = "delete it and rerun the stage that writes it.",
              limit: int = MAX_FILE_BYTES) -> Any:
    """The JSON value in ``path`` (bounded: :func:`read_bounded`); a damaged file is named, with ``advice``."""
    return parse_json(path, read_bounded(path, limit), advice=advice)


def parse_json(path: Path, data: bytes, *, advice: str = "delete it and rerun the stage that writes it.") -> Any:
    """The JSON value in ``data``, the bytes read from ``path`` (:func:`read_json` without the read); a damaged
    file is named, with ``advice``."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise RunStoreError(f"{path} is corrupted (not UTF-8 text); {advice}") from None
    except json.JSONDecodeError as error:
        raise RunStoreError(f"{path} is corrupted (invalid JSON at line {error.lineno}, column {error.colno}); "
                            f"{advice}") from None


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    atomic_write_text(path, buffer.getvalue())


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` for one writer; a second writer is refused."""
    directory = Path(directory)
    made = [d for d in (directory, *directory.parents) if not d.exists()]  # what this call creates, deepest first
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle = open(directory / ".lock", "a+")
    except OSError as error:
        raise RunStoreError(f"Cannot use output directory {directory}: {error.strerror}. "
                            "Choose a writable directory.") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunStoreError(f"{directory} is in use by {holder}; "
                                "wait for it to finish or use another --out.") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"celtk pid {os.getpid()}")
        handle.flush()
        _sweep(directory)
        yield
    except BaseException:
        handle.close()
        _remove_if_unused(made)
        raise
    finally:
        handle.close()


def _sweep(directory: Path) -> None:
    """Remove the temporary files of a writer that was killed mid-write (called holding the directory's lock)."""
    for stale in directory.rglob(".*.partial"):
        stale.unlink(missing_ok=True)


def sweep_if_idle(directory: Path) -> None:
    """:func:`locked`'s sweep for a reader: a stage found finished is returned without the lock, so the temporary
    files of a writer killed after its last document (its digest's, say) would stay. Swept only when no writer holds
    the lock (one that does may be writing them); nothing else is touched."""
    directory = Path(directory)
    if not (directory / ".lock").exists() or not any(directory.rglob(".*.partial")):
        return
    try:
        handle = open(directory / ".lock", "a")
    except OSError:
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held by a writer
            return
        _sweep(directory)


def _remove_if_unused(made: list[Path]) -> None:
    """After a failure, remove the directories :func:`locked` created if nothing but its lock file is in them: a
    refused or failed first stage leaves no empty run directory behind (one holding any result is kept)."""
    for directory in made:
        try:
            if {p.name for p in directory.iterdir()} <= {".lock"}:
                (directory / ".lock").unlink(missing_ok=True)
                directory.rmdir()
        except OSError:
            return


# the keys every run's fingerprint records (celtk.run.session.Session.fingerprint); the others are recorded only
# under a setting other than the default (a racing screen's mode and tie-break, the ablation kind, its positions)
FINGERPRINT_FIELDS = ("model", "weight_hash", "dtype", "task", "seed", "fewshot", "chat", "chat_date", "discovery",
                      "shots", "prompt_hash", "share_prefix_exact", "screen")


def check_fingerprint(path: Path, fingerprint: dict[str, object], source: str | None = None) -> None:
    """Write ``fingerprint`` the first time; afterwards refuse any difference from the stored one
    (:func:`compare_fingerprint`)."""
    path = Path(path)
    if not path.exists():
        write_json(path, fingerprint)
        return
    compare_fingerprint(path, read_json(path), fingerprint, source)


def compare_fingerprint(path: Path, stored: JsonValue, fingerprint: dict[str, object],
                        source: str | None = None) -> None:
    """Refuse any difference between ``stored`` (the JSON value read from ``path``) and ``fingerprint``, naming the
    keys (and ``source``, the document whose settings gave ``fingerprint``, when it is not the caller's), and a
    stored fingerprint that lacks one of :data:`FINGERPRINT_FIELDS` that ``fingerprint`` has, naming it."""
    path = Path(path)
    if not isinstance(stored, dict):
        raise RunStoreError(f"{path} is not a fingerprint (a JSON object); delete the run directory and start again.")
    now = json.loads(json.dumps(fingerprint))
    missing = [key for key in FINGERPRINT_FIELDS if key in now and key not in stored]
    if missing:
        raise RunStoreError(f"{path} lacks {', '.join(missing)}, which celtk records in every run's fingerprint: it "
                            "was written by another celtk version, or edited, so this run's settings cannot be "
                            "compared. Rerun the stage into a new run directory with this celtk version.")
    if stored != now:
        keys = sorted(k for k in set(stored) | set(now) if stored.get(k) != now.get(k))
        detail = "; ".join(f"{k}: stored {stored.get(k)!r}, now {now.get(k)!r}" for k in keys[:4])
        origin = f" (settings of {source} vs {path.name})" if source else ""
        fresh = f"{path.parent}-{keys[0]}-{now.get(keys[0])}".replace(" ", "")
        raise RunStoreError(f"{path.parent} holds results of a different configuration{origin} ({detail}). "
                            f"Results are never mixed, and nothing was changed: start a new run directory for these "
                            f"settings (the same command with --out {fresh}), or rerun with the stored settings.")


def fingerprint_key(fingerprint: object) -> str:
    """A short stable hash of a fingerprint (or any JSON value): names results that depend on it."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:16]


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (``""`` when it does not exist; bounded, as :func:`read_bounded`)."""
    path = Path(path)
    return bytes_digest(read_bounded(path)) if path.exists() else ""


def bytes_digest(data: bytes) -> str:
    """SHA-256 of ``data``: :func:`file_digest` of the file that holds them."""
    return hashlib.sha256(data).hexdigest()
