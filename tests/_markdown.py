"""Reading the README and the docs/ pages as the tests of their commands and references need them
(imported as ``from _markdown import ...``; tests/ is on pytest's path)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)


def pages() -> list[Path]:
    """The README and every docs/ page."""
    return [README, *sorted(DOCS.glob("*.md"))]


def fenced_blocks(path: Path) -> list[tuple[str, str, int]]:
    """``(language, code, line)`` of every fenced block of a page, ``line`` the fence's 1-based line."""
    text = path.read_text(encoding="utf-8")
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in _FENCE.finditer(text)]


def celtk_command_lines(path: Path) -> list[tuple[list[str], int]]:
    """Every ``celtk …`` command of a page's bash blocks, as argument lists after ``celtk``, with its line.

    Continuation lines (a trailing backslash) are joined, comments dropped, and ``[...]`` groups (optional
    arguments the prose spells out) read as their contents."""
    found = []
    for language, code, line in fenced_blocks(path):
        if language not in ("bash", "sh", "shell", ""):
            continue
        for offset, command in _logical_lines(code):
            command = command.replace("[", " ").replace("]", " ")
            try:
                words = shlex.split(command, comments=True)
            except ValueError:
                continue
            if words and Path(words[0]).name == "celtk":
                found.append((words[1:], line + 1 + offset))
    return found


def _logical_lines(code: str) -> list[tuple[int, str]]:
    lines, start, buffer = [], 0, ""
    for number, raw in enumerate(code.splitlines()):
        if not buffer:
            start = number
        if raw.rstrip().endswith("\\"):
            buffer += raw.rstrip()[:-1] + " "
            continue
        lines.append((start, buffer + raw))
        buffer = ""
    return lines
