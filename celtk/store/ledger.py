"""celtk's ledger: every frozen held-out set and every line of every run's held-out log, outside the runs.

A run's held-out log is hash-chained inside its directory, so deleting, downgrading or copying the
directory's files could undo it. The ledger anchors it elsewhere: one append-only, hash-chained,
locked JSON-lines file in celtk's cache (``$CELTK_LEDGER`` names another path) that records

* ``frozen``: a selection frozen with its held-out set: the run, the weights' hash, the task, the
  held-out set's hash and its examples' content hashes, and the heads;
* ``line``: each line a run appends to its held-out log: the run, the line's ``seq`` and SHA-256,
  and what it was (a look and its held-out hash, a result, a note).

What it lets celtk refuse: a run whose log lacks a line the ledger recorded, or holds another text
there (a truncated, emptied, re-chained or downgraded log, a deleted ``test.json`` with its log); a
first ``test`` of a held-out set that another directory already tested under the same weights and
task (a copy); an ``eval`` outside any run that would score a frozen held-out set's examples. What
it cannot: a ledger deleted or rewritten together with the runs, or runs made on another machine (a
ledger mirrored elsewhere, e.g. committed beside the results, makes that visible too).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, cast

from celtk.errors import RunStoreError
from celtk.models import cache_root
from celtk.store.files import JsonObject, append_line, read_bounded

LEDGER_ENV = "CELTK_LEDGER"
START = "0" * 64


def ledger_path() -> Path:
    """``$CELTK_LEDGER``, else ``ledger.jsonl`` in celtk's cache (:func:`celtk.models.cache_root`)."""
    return Path(os.environ[LEDGER_ENV]) if os.environ.get(LEDGER_ENV) else cache_root() / "ledger.jsonl"


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_key(run: str | Path) -> str:
    """How the ledger names a run directory: its absolute path."""
    return str(Path(run).resolve())


class Ledger:
    """The ledger at ``path`` (default :func:`ledger_path`); read and appended under its own lock."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else ledger_path()

    # -- reading ---------------------------------------------------------------------------
    def entries(self) -> list[JsonObject]:
        """Every entry, oldest first, after checking the chain (none while there is no ledger: nothing was frozen)."""
        if not self.path.exists():
            return []
        try:
            lock = self._lock(fcntl.LOCK_SH)
        except PermissionError:  # a ledger one may read but not lock (a read-only cache): its lines are appended whole
            return [entry for _, entry in self._lines()]
        with lock:
            return [entry for _, entry in self._lines()]

    def _lines(self) -> list[tuple[str, JsonObject]]:
        if not self.path.exists():
            return []
        try:
            texts = read_bounded(self.path).decode("utf-8").splitlines()
        except UnicodeDecodeError:
            raise self._broken("is not UTF-8 text") from None
        lines: list[tuple[str, JsonObject]] = []
        for number, text in enumerate(texts):
            try:
                entry = json.loads(text)
            except ValueError:
                raise self._broken(f"line {number + 1} is not JSON") from None
            expected = _hash(lines[-1][0]) if lines else START
            if not isinstance(entry, dict) or entry.get("seq") != number or entry.get("prev") != expected:
                raise self._broken(f"line {number + 1} does not follow the line before it (edited, removed or "
                                   "inserted)")
            lines.append((text, entry))
        return lines

    def _broken(self, what: str) -> RunStoreError:
        return RunStoreError(f"celtk's ledger {self.path} {what}. It records every frozen held-out set and every "
                             "look outside the run directories, append-only; restore it from a copy (or point "
                             f"${LEDGER_ENV} at the original).")

    # -- appending -------------------------------------------------------------------------
    def append(self, entry: dict[str, object]) -> None:
        """Append ``entry`` as the next chained line (fsynced), under the ledger's lock."""
        try:
            lock = self._lock(fcntl.LOCK_EX)
        except PermissionError as error:
            raise RunStoreError(f"Cannot use celtk's ledger {self.path}: {error.strerror}. Set ${LEDGER_ENV} to a "
                                "writable file.") from None
        with lock:
            lines = self._lines()
            text = json.dumps({"seq": len(lines), "prev": _hash(lines[-1][0]) if lines else START,
                               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **entry},
                              ensure_ascii=False)
            append_line(self.path, text, f"Nothing was scored; free space, or set ${LEDGER_ENV} to a writable file "
                                         "(celtk's ledger).")

    def _lock(self, mode: int) -> IO[str]:
        """The ledger's lock file, open and locked in ``mode`` (closing it unlocks); a PermissionError propagates."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path.with_name(self.path.name + ".lock"), "a+")
        except PermissionError:
            raise
        except OSError as error:
            raise RunStoreError(f"Cannot use celtk's ledger {self.path}: {error.strerror}. Set ${LEDGER_ENV} to a "
                                "writable file.") from None
        fcntl.flock(handle, mode)
        return handle

    # -- what the run store records ------------------------------------------------------------
    def record_line(self, run: Path, seq: int, text: str, entry: dict[str, object]) -> None:
        """A line ``run``'s held-out log just appended (its text and parsed ``entry``)."""
        self.append({"event": "line", "run": run_key(run), "line_seq": seq, "sha256": _hash(text),
                     "kind": entry.get("event"), "what": entry.get("what"), "heldout_hash": entry.get("heldout_hash")})

    def record_frozen(self, run: Path, *, weights: str, task: str, heldout_hash: str, examples: Iterable[str],
                      heads: str) -> None:
        """A selection frozen in ``run`` with its held-out set (``examples``: their content hashes)."""
        self.append({"event": "frozen", "run": run_key(run), "weights": weights, "task": task,
                     "heldout_hash": heldout_hash, "examples": sorted(set(examples)), "heads": heads})

    # -- what it refuses ---------------------------------------------------------------------
    def check_log(self, run: Path, texts: list[str]) -> None:
        """Refuse ``run``'s held-out log (its lines' texts) unless it holds every line the ledger recorded for it,
        each with the recorded text."""
        key = run_key(run)
        for entry in self.entries():
            if entry.get("event") != "line" or entry.get("run") != key:
                continue
            seq = entry.get("line_seq")
            if not isinstance(seq, int) or seq >= len(texts) or _hash(texts[seq]) != entry.get("sha256"):
                what = f"a {entry.get('what') or entry.get('kind')} line" if entry.get("kind") else "a line"
                raise RunStoreError(
                    f"{Path(run) / 'heldout_log.jsonl'} does not hold the line {seq} that celtk's ledger "
                    f"({self.path}) recorded for this run ({what}, written {entry.get('when')}): the log was "
                    "truncated, emptied, rewritten or deleted. Every use of the held-out set stays on record; restore "
                    "the run's files, or start a new run directory.")

    def tested_elsewhere(self, run: Path, *, weights: str, task: str, heldout_hash: str) -> list[JsonObject]:
        """The ``test`` looks at this held-out set (same weights, task and held-out hash) that other run
        directories made: each entry with its run and the look's ``line_seq``."""
        key, entries = run_key(run), self.entries()
        runs = {e["run"] for e in entries if e.get("event") == "frozen" and e.get("run") != key
                and (e.get("weights"), e.get("task"), e.get("heldout_hash")) == (weights, task, heldout_hash)}
        return [e for e in entries if e.get("event") == "line" and e.get("run") in runs and e.get("what") == "test"
                and e.get("kind") == "look" and e.get("heldout_hash") == heldout_hash]

    def frozen_among(self, *, weights: str, task: str, examples: Iterable[str]) -> list[tuple[str, int]]:
        """The runs whose frozen held-out set (same weights and task) shares examples (content hashes) with
        ``examples``, each with how many it shares."""
        wanted, found = set(examples), {}
        for e in self.entries():
            if e.get("event") == "frozen" and (e.get("weights"), e.get("task")) == (weights, task):
                # a frozen entry's run and examples as record_frozen writes them
                shared = len(wanted & set(cast("list[str]", e.get("examples", []))))
                if shared:
                    found[cast(str, e["run"])] = shared
        return sorted(found.items())
