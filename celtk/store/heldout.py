"""The held-out log: every use of a run's held-out examples, append-only and hash-chained.

``heldout_log.jsonl`` holds one JSON object a line. A *look* line is appended (and fsynced)
before any held-out example is scored; once the look's result document is written, a
*result* line names the file and its SHA-256. A look with no result line is *incomplete*:
the run was stopped, or its result could not be written — never a result without a log line.
Other events (a select forced after a look) are lines of their own.

A look made before the run's test whose head sets include the selection that test scored, on the same held-out set
(a ``stability`` look, ``eval --run --ablate``, a random-heads null set), already showed the test's comparison: the
log's view marks it *seen before test* (``Look.seen_before_test``, the test's ``seq``) and the test lists it
(``Look.seen_by``). The marking is worked out from the lines whenever the log is read; no line is ever rewritten.

Each line carries ``seq`` (0, 1, …) and ``prev``, the SHA-256 of the previous line's text, so
an edited line breaks the next line's ``prev``; ``heldout_log.head`` records how many lines the
log had and the hash of the last one, so a truncated log (or an edited last line) is detected
too. Every line is also recorded in celtk's ledger outside the directory (:mod:`celtk.store.ledger`), so a
log that lacks or changed a recorded line is refused however consistently the directory was rewritten.
Tamper-evident, not tamper-proof: deleting the ledger and the run together is not caught. A line without
the chain, or without a field celtk writes in every line of its kind, is refused.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from celtk.errors import HeadError, RunStoreError
from celtk.heads import HeadSet
from celtk.store.files import append_line, file_digest, read_bounded, read_json, write_json
from celtk.store.ledger import Ledger

LOG = "heldout_log.jsonl"
HEAD = "heldout_log.head"
RETURNED = "(returned, not written)"  # the result of a look whose caller kept it in memory (celtk.run.run_eval)
START = "0" * 64  # ``prev`` of the log's first line


def line_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Look:
    """One use of held-out examples, as the log records it.

    ``frozen``: the frozen selection's held-out outcomes were among those scored (a test, or any
    other look that scored that head set; a look made before the selection was frozen counts once the
    selection it scored is tested: ``seen_before_test``). ``exploratory``: not the run's test (other
    selections, variants, random sets, repeats). ``result``/``digest``: the document the look wrote and
    its SHA-256, once written (``None``: incomplete). ``seen_before_test``: the ``seq`` of the run's test
    (not a repeat) whose comparison this earlier look already scored; ``seen_by``, on that test: those
    looks' ``seq``. A document records a look as :class:`celtk.store.documents.LookRecord`
    (:func:`celtk.store.directory.record`), without its time."""

    seq: int
    what: str
    when: str
    heads: list[HeadSet]
    heldout_hash: str
    n: int | None
    frozen: bool
    exploratory: bool
    forced: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    result: str | None = None
    digest: str | None = None
    seen_before_test: int | None = None
    seen_by: list[int] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.result is not None

    def role(self, result: int | None) -> str:
        """What this look is, in words, for a run whose result is the test look ``result`` (``test.json``'s
        ``look``): the views (``celtk test``, ``celtk looks``, the report) show it."""
        text = "the result" if self.seq == result else "exploratory" if self.exploratory else "look"
        text += (" (forced)" if self.forced else "") + ("" if self.complete else " (incomplete)")
        if self.seen_by:
            text += f"; not a first look: {_looks(self.seen_by)} already scored this comparison"
        if self.extra.get("seen_before"):
            text += f"; seen before in another run directory ({', '.join(map(str, self.extra['seen_before']))})"
        if self.seen_before_test is not None:
            text += f"; seen before test (look {self.seen_before_test})"
        return text


# what every line of each kind holds (HeldoutLog.begin, complete, note): a line that lacks one was not written by celtk
_LINE_KEYS = {"seq", "prev", "event"}
_LOOK_KEYS = _LINE_KEYS | {"what", "when", "heads", "heldout_hash", "n", "frozen", "exploratory", "forced"}
_RESULT_KEYS = _LINE_KEYS | {"look", "file", "sha256"}


class HeldoutLog:
    """The held-out log of one run directory (read and appended under the directory's lock)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path, self.head_path = self.directory / LOG, self.directory / HEAD
        self._holding = False  # inside held()
        self._kept: list[tuple[str, dict[str, Any]]] | None = None  # the lines read and appended inside held()

    @contextmanager
    def held(self) -> Iterator[None]:
        """Keep the lines once read (and those appended) for the block: the directory's lock is held through it
        (:meth:`celtk.store.directory.RunDirectory.lock`), so no other process appends, and the log is read and
        checked once."""
        self._holding, self._kept = True, None
        try:
            yield
        finally:
            self._holding, self._kept = False, None

    # -- reading ---------------------------------------------------------------------------
    def lines(self) -> list[tuple[str, dict[str, Any]]]:
        """Every line (text, parsed), after checking the chain and the head; raises
        :class:`RunStoreError` naming the first line that does not hold. Under :meth:`held`, read once."""
        if self._kept is not None:
            return list(self._kept)
        parsed = self._lines()
        if self._holding:
            self._kept = list(parsed)
        return parsed

    def _lines(self) -> list[tuple[str, dict[str, Any]]]:
        if not self.path.exists():
            head = read_json(self.head_path) if self.head_path.exists() else {}
            if not isinstance(head, dict):
                raise self._broken("is missing, and heldout_log.head is not the object celtk writes (a line count "
                                   f"and a hash), but {type(head).__name__}")
            if head.get("lines", 0) != 0:
                raise self._broken(f"is missing, but heldout_log.head says it had {head.get('lines')!r} line(s)")
            Ledger().check_log(self.directory, [])
            return []
        try:
            texts = read_bounded(self.path).decode("utf-8").splitlines()
        except UnicodeDecodeError as error:
            raise self._broken(f"cannot be read ({error})") from None
        parsed: list[tuple[str, dict[str, Any]]] = []
        for number, text in enumerate(texts, 1):
            if not text.strip():
                raise self._broken(f"has an empty line {number}")
            try:
                entry = json.loads(text)
            except ValueError:
                raise self._broken(f"line {number} is not JSON") from None
            if not isinstance(entry, dict):
                raise self._broken(f"line {number} is not a JSON object")
            if "seq" not in entry or "prev" not in entry:
                raise self._broken(f"line {number} has no hash chain (seq, prev); celtk writes every line chained")
            required = {"look": _LOOK_KEYS, "result": _RESULT_KEYS}.get(str(entry.get("event")), _LINE_KEYS)
            if missing := sorted(required - set(entry)):
                raise self._broken(f"line {number} lacks {', '.join(missing)}, which celtk writes in every "
                                   f"{entry.get('event', 'log')} line")
            expected = line_hash(parsed[-1][0]) if parsed else START
            if entry.get("seq") != number - 1 or entry.get("prev") != expected:
                raise self._broken(f"line {number} does not follow line {number - 1} (its seq or the hash of the "
                                   "line before it differs: a line was edited, removed or inserted)")
            parsed.append((text, entry))
        self._check_head(parsed)
        Ledger().check_log(self.directory, [text for text, _ in parsed])
        return parsed

    def _check_head(self, parsed: Sequence[tuple[str, object]]) -> None:
        if not self.head_path.exists():
            if parsed:
                raise self._broken("has lines but heldout_log.head is missing")
            return
        head = read_json(self.head_path)
        head = head if isinstance(head, dict) else {}
        count, digest = head.get("lines"), head.get("sha256")
        if not isinstance(count, int) or isinstance(count, bool):
            raise self._broken(f"has {len(parsed)} line(s), and heldout_log.head holds no line count ({count!r} where "
                               "a whole number belongs)")
        if count > len(parsed):
            raise self._broken(f"has {len(parsed)} line(s) but heldout_log.head says {count}: it was truncated")
        if count < len(parsed) - 1:  # the head is written just after each line: at most the newest may be unrecorded
            raise self._broken(f"has {len(parsed)} line(s) but heldout_log.head says {count}: the head was rewound")
        if count and line_hash(parsed[count - 1][0]) != digest:
            raise self._broken(f"line {count} differs from the one heldout_log.head recorded")

    def _broken(self, what: str) -> RunStoreError:
        return RunStoreError(f"{self.path} {what}. The held-out log is append-only and hash-chained so that every use "
                             "of the held-out set stays on record; restore the original file (and heldout_log.head). "
                             "A run whose log cannot be trusted cannot be tested or reported again: start a new run "
                             "directory.")

    def looks(self) -> list[Look]:
        """Every look, oldest first, with its result when one was written."""
        looks: dict[int, Look] = {}
        order: list[int] = []
        for index, (_, entry) in enumerate(self.lines()):
            if entry["event"] == "look":
                seq = entry["seq"]
                looks[seq] = Look(seq=seq, what=str(entry["what"]), when=str(entry["when"]),
                                  heads=self._heads(index, entry["heads"]), heldout_hash=str(entry["heldout_hash"]),
                                  n=entry["n"], frozen=bool(entry["frozen"]), exploratory=bool(entry["exploratory"]),
                                  forced=bool(entry["forced"]),
                                  extra={k: v for k, v in entry.items() if k not in _LOOK_KEYS})
                order.append(seq)
            elif entry["event"] == "result":
                seq = entry["look"]
                if seq not in looks:
                    raise self._broken(f"line {index + 1} names a result of look {seq}, which is not in the log")
                old = looks[seq]
                if old.result is None:  # the first file a look wrote is its result
                    looks[seq] = replace(old, result=entry["file"], digest=entry["sha256"])
        return _mark_seen_before_test([looks[s] for s in order])

    def _heads(self, index: int, value: Any) -> list[HeadSet]:
        try:
            return [HeadSet.of(names) for names in value]
        except (HeadError, TypeError) as error:
            raise self._broken(f"line {index + 1}'s heads are not lists of head names ({error})") from None

    def events(self, event: str) -> list[dict[str, Any]]:
        return [entry for _, entry in self.lines() if entry.get("event") == event]

    # -- appending -------------------------------------------------------------------------
    def append(self, entry: dict[str, object]) -> dict[str, Any]:
        """Append ``entry`` as the next chained line (fsynced), then record the new head."""
        lines = self.lines()
        chained = {"seq": len(lines), "prev": line_hash(lines[-1][0]) if lines else START, **entry}
        text = json.dumps(chained, ensure_ascii=False)
        append_line(self.path, text, "Nothing was scored on the held-out set; free space or fix the directory and "
                                     "rerun.")
        if self._kept is not None:  # the line is on disk: the log's next line, whatever follows
            self._kept.append((text, chained))
        write_json(self.head_path, {"lines": len(lines) + 1, "sha256": line_hash(text)})
        Ledger().record_line(self.directory, len(lines), text, chained)
        return chained

    def begin(self, what: str, heads: list[HeadSet], heldout_hash: str, n: int | None, *, frozen: bool | None,
              exploratory: bool, forced: bool = False, **extra: object) -> int:
        """Log a look before its held-out examples are scored; returns its ``seq``. ``frozen``: whether the frozen
        selection is among ``heads`` (``None``: no selection was frozen yet, so the line cannot say)."""
        entry = self.append({"event": "look", "what": what, "when": _now(), "heads": [h.names() for h in heads],
                             "heldout_hash": heldout_hash, "n": n, "frozen": frozen, "exploratory": exploratory,
                             "forced": forced, **extra})
        return int(entry["seq"])

    def complete(self, seq: int, *files: Path, digests: Sequence[str] | None = None) -> None:
        """Record that look ``seq`` wrote each of ``files`` (with its SHA-256: ``digests``, one a file, when the
        writer knows them, else read from the file): by name inside the run directory, by path elsewhere
        (``celtk eval``'s ``eval.json``)."""
        for index, file in enumerate(map(Path, files)):
            name = file.name if file.parent.resolve() == self.directory.resolve() else str(file.resolve())
            digest = file_digest(file) if digests is None else digests[index]
            self.append({"event": "result", "look": seq, "file": name, "sha256": digest})
        if not files:  # returned to the caller, not written: complete all the same
            self.append({"event": "result", "look": seq, "file": RETURNED, "sha256": ""})

    def note(self, event: str, **fields: object) -> None:
        """Record an event that is not a look (e.g. a select forced after looks)."""
        self.append({"event": event, "when": _now(), **fields})


def _mark_seen_before_test(looks: list[Look]) -> list[Look]:
    """``looks`` with each look made before the run's test that scored the tested selection on the test's held-out
    set marked ``seen_before_test`` (and ``frozen``: it scored what was then, or later, frozen), and the test with
    those looks in ``seen_by``. The run's test is a test look with no complete test before it (later ones are forced
    repeats, which the views already label); a look is marked for the latest such test after it."""
    tests, complete = [], False
    for look in looks:
        if look.what == "test" and look.heads and not complete:
            tests.append(look)
        complete = complete or (look.what == "test" and look.complete)
    seen: dict[int, int] = {}
    for look in looks:
        if look.what == "test":
            continue
        later = [t for t in tests
                 if t.seq > look.seq and t.heldout_hash == look.heldout_hash and t.heads[0] in look.heads]
        if later:
            seen[look.seq] = later[-1].seq
    by: dict[int, list[int]] = {}
    for seq, test in seen.items():
        by.setdefault(test, []).append(seq)
    return [replace(look, seen_before_test=seen[look.seq], frozen=True) if look.seq in seen
            else replace(look, seen_by=by[look.seq]) if look.seq in by else look for look in looks]


def _looks(seqs: list[int]) -> str:
    return ("look " if len(seqs) == 1 else "looks ") + ", ".join(map(str, seqs))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
