"""Write a benchmark's figures into a docs page between its two marker comments, leaving the rest of the page as
it is (the scripts that keep a page's numbers: `null_levels.py`, `planted_heads.py`)."""

from __future__ import annotations

from pathlib import Path


def write_between(page: Path, start: str, end: str, body: str, what: str) -> None:
    """Replace what lies between ``start`` and ``end`` in ``page`` with ``body`` (markers kept, each on its own
    line); refuse a page without the markers, naming ``what`` belongs there."""
    text = page.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{page} has no {what} markers ({start!r} ... {end!r}); add them where the {what} go.")
    before, rest = text.split(start, 1)
    _, after = rest.split(end, 1)
    page.write_text(f"{before}{start}\n{body}\n{end}{after}")
