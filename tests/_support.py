"""Helpers the tests share (imported as ``from _support import ...``; tests/ is on pytest's path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from celtk.run.documents import DIGESTS
from celtk.runstore import file_digest


def edit_document(directory: Path, name: str, change: Any) -> dict:
    """Rewrite ``directory/name`` with ``change(document dict) -> dict`` and record its new digest, as if
    celtk had written it: how a test reaches the checks that stand behind the digest check."""
    path = Path(directory) / name
    data = change(json.loads(path.read_text()))
    path.write_text(json.dumps(data))
    book = Path(directory) / DIGESTS
    digests = json.loads(book.read_text()) if book.exists() else {}
    digests[name] = file_digest(path)
    book.write_text(json.dumps(digests))
    return data


def copy_document(source: Path, target: Path, name: str) -> None:
    """Copy ``source/name`` over ``target/name`` and record its digest there, as if celtk had written it in
    ``target``: a document of another run that only the same-run checks (not the digest) can tell apart."""
    edit_document(target, name, lambda _: json.loads((Path(source) / name).read_text()))
