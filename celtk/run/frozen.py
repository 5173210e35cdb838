"""Keeping the held-out set frozen: an append-only log of every held-out evaluation in a run
directory (``heldout_log.jsonl``), and the rule that selection may not follow the test unforced."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from celtk.errors import RunStoreError

LOG = "heldout_log.jsonl"


def log_heldout(out: Path, what: str, heads: list[list[str]], heldout_hash: str, **extra: Any) -> None:
    """Append one line (``what``, UTC ``when``, the head sets scored, ``heldout_hash``) and fsync it;
    earlier lines are never rewritten."""
    entry = {"what": what, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "heads": heads,
             "heldout_hash": heldout_hash, **extra}
    with open(Path(out) / LOG, "a") as file:
        file.write(json.dumps(entry) + "\n")
        file.flush()
        os.fsync(file.fileno())


def read_log(out: Path) -> list[dict[str, Any]]:
    """Every logged held-out evaluation, oldest first (``[]`` when none)."""
    path = Path(out) / LOG
    if not path.exists():
        return []
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except ValueError as error:
        raise RunStoreError(f"{path} is damaged ({error}); it is append-only, so restore it rather than edit it.") from None


CONFIRMATORY = ("test", "transfer")  # held-out uses that score the frozen selection itself


def tested(out: Path) -> bool:
    """Whether the frozen selection of ``out`` has met the held-out set (``test.json``, or a logged
    test or transfer: either shows the selection's held-out results)."""
    return (Path(out) / "test.json").exists() or any(e["what"] in CONFIRMATORY for e in read_log(out))


def refuse_select_after_test(out: Path, force: bool) -> bool:
    """Raise unless ``out`` is untested or ``force``; returns whether this select is forced after a test."""
    if not tested(out):
        return False
    if not force:
        raise RunStoreError(f"{out} has already been tested on its held-out set (celtk test or transfer); selecting again would choose with "
                            "knowledge of held-out results. Use a new run directory, or pass force=True (`--force`), "
                            "which is recorded in selection.json and the report.")
    return True
