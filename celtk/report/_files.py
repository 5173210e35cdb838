"""Writing the report's files: each figure is rendered in memory and renamed into place whole, so a full
disk or a read-only directory ends in one :class:`celtk.errors.RunStoreError`, never half a PNG."""

from __future__ import annotations

import errno
import io
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from celtk.errors import RunStoreError

if TYPE_CHECKING:  # annotations only: matplotlib loads when a figure is drawn
    from matplotlib.figure import Figure

Table = Callable[[Sequence[str], Sequence[Sequence[object]]], str]
"""The report's ``table(header, rows)`` helper: an HTML table, each cell shown as its ``str``."""
FigureHtml = Callable[[Path, str], str]
"""The report's ``figure(path, caption)`` helper: a PNG embedded in HTML with its caption."""


def check_writable(target: Path) -> None:
    """Create ``target`` and prove a file can be made in it, before any figure is drawn."""
    try:
        target.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".celtk-report.", suffix=".partial", dir=target)
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise RunStoreError(f"Cannot write the report in {target}: {error.strerror}. Give --to a writable "
                            "directory (the default is OUT/report).") from None


def save_png(fig: Figure, path: Path) -> None:
    """``fig`` as a PNG at ``path``, written through a temporary file and a rename."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(buffer.getvalue())
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as error:
        Path(tmp).unlink(missing_ok=True)
        raise report_write_error(path, error) from None


def report_write_error(path: Path, error: OSError) -> RunStoreError:
    """The one-line error for a report file that could not be written."""
    what = "the disk is full" if error.errno in (errno.ENOSPC, errno.EDQUOT) else error.strerror
    return RunStoreError(f"Could not write the report file {path}: {what}. Nothing was half-written; free space or "
                         "give --to another directory, then rerun celtk report.")
