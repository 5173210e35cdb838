"""``digests.json``: the SHA-256 of every document celtk wrote in a run directory, and the check that a document read
back is the one celtk wrote."""

from __future__ import annotations

from pathlib import Path

from celtk.errors import RunStoreError
from celtk.store.files import (
    MAX_FILE_BYTES,
    atomic_write_bytes,
    bytes_digest,
    file_digest,
    parse_json,
    read_bounded,
    write_json,
)

DIGESTS = "digests.json"
_DIGESTS_ADVICE = ("it records the SHA-256 of every document celtk wrote in {} and cannot be rebuilt: restore it, or "
                   "start a new run directory.")


# digests.json's key for a document being written: its name after this prefix (no document's name has a colon)
WRITING = "writing:"


def write_recorded(path: Path, data: bytes, table: dict[str, str] | None) -> dict[str, str]:
    """Write a document's bytes to ``path`` and record their SHA-256 in ``digests.json`` (``table``: what it holds
    now) so that a kill at any moment leaves a directory celtk reads: the digest is announced first (under
    ``writing:NAME``), then the file is replaced, then the digest is recorded and the announcement dropped. Until
    the file is replaced the old one keeps its recorded digest; after, a read accepts the new bytes by the announced
    digest (:func:`check_recorded`), and the next write of the document completes the record. Returns the table
    written last."""
    path = Path(path)
    book = path.parent / DIGESTS
    digest = bytes_digest(data)
    table = _settled(path.parent, dict(table or {}))
    write_json(book, {**table, WRITING + path.name: digest})
    atomic_write_bytes(path, data)
    table.pop(WRITING + path.name, None)
    table[path.name] = digest
    write_json(book, table)
    return table


def _settled(directory: Path, table: dict[str, str]) -> dict[str, str]:
    """``table`` with the announcements of writes that were stopped resolved: recorded where the file holds the
    announced bytes (stopped after replacing it), dropped where it does not (stopped before)."""
    for key in [k for k in table if k.startswith(WRITING)]:
        name, digest = key.removeprefix(WRITING), table.pop(key)
        if (directory / name).is_file() and file_digest(directory / name) == digest:
            table[name] = digest
    return table


def read_digests(book: Path) -> dict[str, str]:
    """``digests.json``: document name → SHA-256; anything else is refused (it cannot be rebuilt, only restored)."""
    return parse_digests(book, read_bounded(book, MAX_FILE_BYTES))


def parse_digests(book: Path, data: bytes) -> dict[str, str]:
    """:func:`read_digests` of ``data``, the bytes read from ``book``."""
    advice = _DIGESTS_ADVICE.format(book.parent)
    digests = parse_json(book, data, advice=advice)
    if not isinstance(digests, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in digests.items()):
        raise RunStoreError(f"{book} is not a table of document digests (a JSON object of file name → SHA-256); "
                            f"{advice}")
    return digests


def book_digests(directory: Path) -> dict[str, str] | None:
    """``directory``'s ``digests.json`` (:func:`read_digests`), ``None`` when it has none."""
    book = Path(directory) / DIGESTS
    return read_digests(book) if book.exists() else None


def check_digest(path: Path, *, required: bool = True) -> None:
    """Refuse a document whose bytes differ from the digest celtk recorded when it wrote it, and (``required``: a
    run's own documents, which :meth:`Document.save` writes) one with no digest: a result edited, copied in or left
    without its record is not read as celtk's. A document written beside no run (``required`` false: ``eval.json``,
    the analyses, the theory) is checked against a digest where one was recorded."""
    path = Path(path)
    check_recorded(path, file_digest(path) if path.exists() else None, book_digests(path.parent), required=required)


def check_recorded(path: Path, digest: str | None, table: dict[str, str] | None, *, required: bool = True) -> None:
    """:func:`check_digest` of a file whose bytes, read once, have SHA-256 ``digest`` (``None``: the file does not
    exist); ``table`` is the directory's ``digests.json`` (``None``: there is none)."""
    book = Path(path).parent / DIGESTS
    if not required and (table is None or path.name not in table):
        return
    if table is None:
        raise RunStoreError(f"{path} has no digest: {book} is missing, and celtk records the SHA-256 of every document "
                            "it writes there. Without it an edited or copied document cannot be told from celtk's, so "
                            "nothing in the directory is read: restore digests.json, or start a new run directory.")
    recorded = table.get(path.name)
    if digest is not None and digest == table.get(WRITING + path.name):
        return  # celtk replaced the file and was stopped before it recorded the digest it had announced
    if recorded is None:
        raise RunStoreError(f"{path} has no digest in {book}: celtk did not write it in this directory (copied in "
                            "from another run, or written by hand). Rerun the stage that writes it, in a new run "
                            "directory if the held-out set was looked at.")
    if digest is None:
        raise RunStoreError(f"{path} was deleted after celtk wrote it ({DIGESTS} records it); "
                            "rerun the stage that writes it.")
    if digest != recorded:
        raise RunStoreError(f"{path} was changed after celtk wrote it (its SHA-256 differs from the one in {DIGESTS}); "
                            "a result edited by hand is not read. Restore the file, or rerun the stage that writes it "
                            "in a new run directory.")
