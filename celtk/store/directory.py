"""A run directory and the held-out contract it keeps.

:class:`RunDirectory` owns a run's file names, its lock, its documents (each read back only if
its bytes are the ones celtk wrote: ``digests.json``) and its held-out log
(:mod:`celtk.store.heldout`). The contract:

* The held-out set (size, seed, hash of its examples) is fixed when the selection is frozen and
  recorded in ``selection.json`` (``heldout``); every test of that selection scores exactly it.
* Every use of held-out examples (``test``, ``stability``, ``transfer``, ``calibrate --null
  random-heads``, ``eval`` on a run, ``ablations``) is a *look*, logged before anything is scored.
* The first ``test`` is the result. A second test is refused unless forced; a forced one keeps the
  first result in ``test.json`` and adds itself to its ``looks`` (its own figures go to
  ``test-repeat-SEQ.json``).
* ``select`` after any look is refused unless forced (``forced_after_test`` and ``prior_looks`` in
  ``selection.json``): a selection must not be chosen knowing held-out outcomes.
* Looks other than the test are allowed and labelled exploratory; a log that was edited or
  truncated is refused by ``select``, ``test`` and ``report`` (and every look).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from celtk.errors import ConfigError, RunStoreError, SplitError, suggest
from celtk.heads import HeadSet
from celtk.store.documents import (
    DIGESTS,
    Correctness,
    Document,
    HeldoutContract,
    LookRecord,
    ScreenDocument,
    SelectionDocument,
    TaskRecord,
    TestDocument,
    parse_digests,
    write_recorded,
)
from celtk.store.files import (
    JsonValue,
    bytes_digest,
    compare_fingerprint,
    locked,
    parse_json,
    read_bounded,
    write_json,
)
from celtk.store.heldout import HeldoutLog, Look
from celtk.store.integrity import (
    check_raced_tie_break,
    check_racing_use,
    check_screen_complete,
    check_screen_fingerprint,
    check_selection_matches_screen,
    check_test_matches_selection,
    require_fingerprint,
)
from celtk.store.memo import SetScreener
from celtk.store.rules import MODEL_CHECKS, RULES, STAGES, Admission, ModelChecks, Need, Stage, StageRule
from celtk.tasks import Example, SplitManifest, shared_examples

if TYPE_CHECKING:  # a run directory is read without torch (the report); these name types only
    from celtk.models import Model
    from celtk.tasks import Splits, Task


@runtime_checkable  # the jaxtyping import hook beartypes every function here, stubs included
class _ModelNamed(Protocol):
    @property
    def model(self) -> str: ...  # the model as the run's settings name it (an alias, a hub id or a path)


@runtime_checkable
class DrawnSession(Protocol):
    """What :meth:`RunDirectory.admit` reads of a stage's session (:class:`celtk.run.session.Session`, which the
    store does not import: the stages sit above it)."""

    @property
    def config(self) -> _ModelNamed: ...
    @property
    def model(self) -> Model: ...
    @property
    def task(self) -> Task: ...
    @property
    def splits(self) -> Splits: ...
    def fingerprint(self) -> dict[str, object]: ...
    def screener(self, which: str) -> SetScreener: ...

D = TypeVar("D", bound=Document)

__all__ = ["MODEL_CHECKS", "STAGES", "Admission", "ModelChecks", "RunDirectory", "Stage", "check_no_overlap",
           "check_tested_heldout", "record"]


@dataclass
class _Held:
    """What one stage call read from, or wrote to, its run directory while holding the lock (:meth:`RunDirectory.lock`):
    each file's bytes and their SHA-256, each document parsed and verified, and ``digests.json``."""

    data: dict[str, bytes] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)
    documents: dict[str, Document] = field(default_factory=dict)
    digests: dict[str, str] | None = None
    digests_read: bool = False


class RunDirectory:
    """One run's directory: its documents, its lock and its held-out log.

    A stage opens one ``RunDirectory``, takes its lock and passes it to everything that reads the run. While the lock
    is held, each file is read and hashed once, each document parsed and its digest verified once, and
    ``digests.json`` and the held-out log read once: what was read is kept for the rest of the block, and what the
    stage writes through the directory (:meth:`save`, :meth:`finish_look`, the log's lines) replaces it. That is
    sound only under the lock: every writer of a run directory takes it first (a second is refused,
    :func:`celtk.store.files.locked`), so no other process can write a file while it is held, and what was read
    stays what is on disk. When the block ends the kept reads are dropped; outside a lock (a report, ``celtk looks``,
    a rerun's ``stored_selection``) every call reads the files again.

    Example:
        >>> rd = RunDirectory("runs/demo")  # doctest: +SKIP
        >>> [look.what for look in rd.looks()]  # doctest: +SKIP
        ['test']
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._held: _Held | None = None  # inside lock()

    @cached_property
    def log(self) -> HeldoutLog:
        """The directory's held-out log (:mod:`celtk.store.heldout`)."""
        return HeldoutLog(self.path)

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    @contextmanager
    def lock(self) -> Iterator[RunDirectory]:
        """Hold the directory's lock (:func:`celtk.store.files.locked`) for one stage call, keeping what it reads."""
        with locked(self.path), self.log.held():
            self._held = _Held()
            try:
                yield self
            finally:
                self._held = None

    # -- files -----------------------------------------------------------------------------
    def file(self, name: str) -> Path:
        return self.path / name

    def has(self, kind: type[Document], name: str | None = None) -> bool:
        return self.has_file(name or kind.FILE)

    def has_file(self, name: str) -> bool:
        return (self.path / name).exists()

    def _read(self, name: str) -> tuple[bytes, str]:
        """The bytes of the file ``name`` and their SHA-256 (bounded: :func:`celtk.store.files.read_bounded`)."""
        held = self._held
        if held is not None and name in held.data:
            return held.data[name], held.hashes[name]
        data = read_bounded(self.path / name)
        digest = bytes_digest(data)
        if held is not None:
            held.data[name], held.hashes[name] = data, digest
        return data, digest

    def digest(self, name: str) -> str:
        """SHA-256 of the file ``name`` (``""`` when it does not exist: :func:`celtk.store.files.file_digest`)."""
        if self._held is not None and name in self._held.hashes:
            return self._held.hashes[name]
        return self._read(name)[1] if (self.path / name).exists() else ""

    def digests(self) -> dict[str, str] | None:
        """``digests.json`` (:func:`celtk.store.documents.read_digests`; ``None`` when there is none)."""
        held = self._held
        if held is not None and held.digests_read:
            return held.digests
        table = parse_digests(self.path / DIGESTS, self._read(DIGESTS)[0]) if self.has_file(DIGESTS) else None
        if held is not None:
            held.digests, held.digests_read = table, True
        return table

    def load(self, kind: type[D], name: str | None = None) -> D:
        """The ``kind`` document, refused if it was changed after celtk wrote it."""
        name = name or kind.FILE
        held = self._held
        if held is not None and isinstance(kept := held.documents.get(name), kind):
            return kept
        data, digest = self._read(name)
        value = parse_json(self.path / name, data)  # a damaged file is named as such first
        document = kind.verified(self.path / name, value, digest, self.digests())
        if held is not None:
            held.documents[name] = document
        return document

    def load_if(self, kind: type[D], name: str | None = None) -> D | None:
        return self.load(kind, name) if self.has(kind, name) else None

    def save(self, document: Document, name: str | None = None) -> None:
        """Write ``document`` atomically and record its SHA-256 in ``digests.json``
        (:meth:`celtk.store.documents.Document.save`), keeping what was written as read."""
        name = name or document.file_name()
        data = document.encode()
        table = write_recorded(self.path / name, data, self.digests())
        digest = table[name]
        if self._held is not None:
            self._held.data[name], self._held.hashes[name] = data, digest
            self._held.documents.pop(name, None)  # parsed again from these bytes when read: what a reader gets
            self._held.digests, self._held.digests_read = table, True
            self._held.data.pop(DIGESTS, None)  # its bytes as read are not the file now
        for beside, value in document.beside().items():
            write_json(self.path / beside, value)

    def fingerprint(self) -> JsonValue:
        """``fingerprint.json``'s JSON value, refused when the file is missing (:func:`require_fingerprint`)."""
        path = require_fingerprint(self.path)
        value: JsonValue = parse_json(path, self._read(path.name)[0])
        return value

    def screen(self) -> ScreenDocument:
        """The merged screen, refused unless it covers every head once on one discovery set and agrees with
        ``fingerprint.json``."""
        doc = self.load(ScreenDocument)
        if doc.shard:
            raise RunStoreError(f"{self.path}/screen.json is one shard; merge the shards of its parent directory first "
                                "(celtk.run.merge_shards, `celtk merge`).")
        check_screen_complete(self.path, doc)
        check_screen_fingerprint(self.path, doc, self.fingerprint())
        return doc

    # -- the held-out log ------------------------------------------------------------------
    def looks(self) -> list[Look]:
        """Every look at the held-out set, oldest first (verifies the log's chain). A look whose head sets include the
        selection frozen now, on its held-out set, is shown ``frozen`` even when it was made before that selection was
        frozen (its line says ``"frozen": null`` then); once that selection is tested it is also ``seen_before_test``
        (:mod:`celtk.store.heldout`)."""
        looks = self.log.looks()
        selection = self.load_if(SelectionDocument)
        if selection is None:
            return looks
        return [replace(look, frozen=True) if selection.heads in look.heads
                and look.heldout_hash == selection.heldout.hash else look for look in looks]

    def verified_looks(self) -> tuple[list[Look], int | None]:
        """The looks (:meth:`looks`) of a log and ``test.json`` that :meth:`verify` accepts, and the look that is the
        run's result (``test.json``'s ``look``; ``None`` before the test): ``celtk looks``."""
        self.verify()
        return self.looks(), self.load(TestDocument).look if self.has(TestDocument) else None

    def look_records(self) -> list[LookRecord]:
        return [record(look) for look in self.looks()]

    def verify(self) -> None:
        """Refuse a log that was edited or truncated, and a ``test.json`` whose bytes differ from those
        the log recorded last for it (or that the log records no test writing)."""
        test = self.file(TestDocument.FILE)
        last = self._last_digest(TestDocument.FILE)
        digest = self.digest(TestDocument.FILE) if test.exists() else None  # read and hashed once
        if digest is not None and digest != last and self._log_cut_test():
            last = self._last_digest(TestDocument.FILE)
        if digest is not None and last is None:
            raise RunStoreError(f"{test} exists, but the held-out log records no test that wrote it; every test is "
                                "logged before it scores the held-out set. It was copied in or the log was replaced: "
                                "restore the run's files, or start a new run directory.")
        if digest is not None and digest != last:
            raise RunStoreError(f"{test} differs from the test.json the held-out log recorded: it was edited after the "
                                "test. Restore it; "
                                "a run whose test result was changed cannot be tested or reported again.")
        if digest is None and last is not None:
            raise RunStoreError(f"{test} was deleted, but the held-out log records it as written; the first test is "
                                "the run's result and cannot be removed. Restore it, or start a new run directory.")

    def _log_cut_test(self) -> bool:
        """Log the result lines of a test killed after it wrote its files and before it logged them, and say whether
        it did. Only what ``run_test`` wrote for the log's last look qualifies: that look is a test; ``test.json``
        (and a forced repeat's own file), celtk's bytes by ``digests.json``, give it as their look, with its heads and
        held-out hash, which are the frozen selection's; and ``test.json`` lists this log's looks as they stand,
        that one complete. The lines are appended holding the directory's lock (taken here when the caller does not
        hold it; when another process holds it, nothing is done)."""
        looks = self.log.looks()
        if not looks or looks[-1].what != "test":
            return False
        look = looks[-1]
        try:
            test, selection = self.load(TestDocument), self.load(SelectionDocument)
            record = next((r for r in test.looks or [] if r.seq == look.seq and r.complete), None)
            if record is None or record.result is None or not self.has_file(record.result):
                return False
            result = self.load(TestDocument, record.result)  # test.json itself, or the repeat's file
        except RunStoreError:
            return False
        written = [replace(r, complete=True, result=record.result) if r.seq == look.seq else r
                   for r in self.look_records()]
        if (result.look != look.seq or look.heads != [result.heads] or look.heads != [selection.heads]
                or not look.heldout_hash == result.heldout_hash == selection.heldout.hash or test.looks != written):
            return False
        names = list(dict.fromkeys([record.result, TestDocument.FILE]))  # a forced repeat wrote its own file first
        logged = {entry["file"] for _, entry in self.log.lines()
                  if entry["event"] == "result" and entry.get("look") == look.seq}
        missing = [name for name in names if name not in logged]
        if not missing:
            return False
        if self._held is None:
            with ExitStack() as stack:
                try:
                    stack.enter_context(self.lock())
                except RunStoreError:  # another process holds the directory: its own check decides
                    return False
                return self._log_cut_test()
        self.log.complete(look.seq, *(self.path / name for name in missing),
                          digests=[self.digest(name) for name in missing])
        return True

    def _last_digest(self, name: str) -> str | None:
        digest = None
        for _, entry in self.log.lines():
            if entry["event"] == "result" and entry["file"] == name:
                digest = entry["sha256"]
        return digest

    def begin_look(self, what: str, heads: list[HeadSet], heldout_hash: str, n: int | None, *,
                   exploratory: bool, forced: bool = False, **extra: object) -> int:
        """Log a look before anything is scored; ``frozen`` is worked out from ``selection.json`` (``null`` in the
        line while no selection is frozen: a look before ``select`` cannot say, and the views work it out later)."""
        frozen_heads = self.frozen_heads()
        frozen = None if frozen_heads is None else frozen_heads in heads
        return self.log.begin(what, heads, heldout_hash, n, frozen=frozen, exploratory=exploratory, forced=forced,
                              **extra)

    def finish_look(self, seq: int, *documents: tuple[Document, str | None]) -> None:
        """Write the look's results atomically, each ``(document, file name or None)``, then log that
        they were written (with their SHA-256)."""
        self.finish_looks([seq], *documents)

    def finish_looks(self, seqs: list[int], *documents: tuple[Document, str | None]) -> None:
        """:meth:`finish_look` for several looks that wrote the same documents (none: just save them)."""
        names = [name or document.file_name() for document, name in documents]
        for (document, _), name in zip(documents, names, strict=True):
            self.save(document, name)
        for seq in seqs:
            self.log.complete(seq, *(self.path / name for name in names), digests=[self.digest(n) for n in names])

    def frozen_heads(self) -> HeadSet | None:
        selection = self.load_if(SelectionDocument)
        return selection.heads if selection is not None else None

    # -- finished stages, as stored --------------------------------------------------------
    def stored_selection(self, strategy: str, k: int, options: Mapping[str, object], heldout: int | None = None
                         ) -> SelectionDocument | None:
        """The frozen selection when it was searched with ``strategy``, ``k`` and ``options`` (as
        ``strategy_options`` records them), froze ``heldout`` examples (when given), and on this directory's screen
        as it stands; else ``None``."""
        if not self.has(SelectionDocument) or not self.has(ScreenDocument):
            return None
        self.verify()
        selection = self.load(SelectionDocument)
        if (selection.strategy, selection.k, selection.strategy_options) != (strategy, k, options):
            return None
        if heldout is not None and selection.heldout.n != heldout:
            return None
        if selection.screen_digest != self.load(ScreenDocument).results_digest():
            return None
        return selection

    def stored_test(self, heldout: int | None = None) -> TestDocument | None:
        """The run's first test when it tests the frozen selection as it stands (``heldout``, when given, must be
        the frozen size), else ``None``: a selection searched again since needs a forced look."""
        if not self.has(TestDocument):
            return None
        self.verify()
        selection, first = self.load(SelectionDocument), self.load(TestDocument)
        if selection.heads != first.heads or (selection.forced_after_test and self._selected_since(first)):
            return None
        self.heldout_overrides(heldout)  # a held-out size other than the frozen one is refused, as for a new test
        if self.has(ScreenDocument):
            check_selection_matches_screen(self.path, selection, self.load(ScreenDocument))
        return first

    def _selected_since(self, test: TestDocument) -> bool:
        """Whether a forced ``select`` followed ``test`` (the log's ``select-forced`` lines): a selection forced
        after other looks but before the test is what the test tested."""
        forced = [entry["seq"] for entry in self.log.events("select-forced")]
        return test.look is None or any(seq > test.look for seq in forced)

    # -- the rules -------------------------------------------------------------------------
    def refuse_select_after_looks(self, force: bool) -> list[Look]:
        """Raise unless no look was made (or ``force``); returns the looks a forced select follows."""
        looks = self.looks()
        tested = self.has(TestDocument)
        if not looks and not tested:
            return []
        if not force:
            raise RunStoreError(f"{self.path} has already been looked at on its held-out set "
                                f"({_describe(looks) or 'test.json'}); selecting again would choose with knowledge of "
                                "held-out results. Use a new run directory, or pass force=True (`--force`), which is "
                                "recorded in selection.json, the held-out log and the report.")
        return looks

    def tests(self) -> list[Look]:
        """The complete test looks, oldest first (the first is the result)."""
        return [look for look in self.looks() if look.what == "test" and look.complete]

    def refuse_second_test(self, force: bool) -> TestDocument | None:
        """The first test's document when the run was tested (then only with ``force``), else ``None``."""
        if not self.has(TestDocument):
            return None
        first = self.load(TestDocument)
        if not force:
            raise RunStoreError(f"{self.path} was already tested: its first test (n = {first.n}, gain "
                                f"{100 * first.gain:+.2f} pts) is the run's result, and looking again could only pick "
                                "among held-out outcomes. To look again anyway, pass force=True (`--force`): test.json "
                                "keeps the first result and lists every look.")
        return first

    def require_tested(self, what: str) -> TestDocument:
        """The run's test; ``what`` (a verb that reads the frozen selection's held-out outcomes) needs it first."""
        if not self.has(TestDocument):
            raise RunStoreError(f"{what} reads the frozen selection's held-out outcomes, and the run's first look must "
                                f"be its test: run `celtk test {self.path}` (celtk.run.run_test) first.")
        return self.load(TestDocument)

    # -- one call per stage ----------------------------------------------------------------
    @staticmethod
    def rule(stage: str) -> StageRule:
        """``stage``'s row of :data:`celtk.store.rules.RULES`; an unknown stage is refused, naming the stages."""
        if stage not in RULES:
            raise ConfigError(f"Unknown stage {stage!r}; the stages that read a run directory are "
                              f"{', '.join(STAGES)}.{suggest(stage, STAGES)}")
        return RULES[stage]  # narrowed to a Stage by the check above

    def require(self, stage: Stage, *, force: bool = False, whole: str | None = None, p: int | None = None,
                tie_break: str | None = None) -> Admission:
        """Every check of this directory that ``stage`` needs before a model is loaded, in one call: the log and
        ``test.json`` are intact (:meth:`verify`), a racing screen is not put to a use that needs every head on
        every example (``whole``, naming the use) or a pool larger than it raced for (``p``), then the stage's
        needs in order (:data:`celtk.store.rules.RULES`):

        * ``select``: no look yet, unless ``force`` (the looks it follows are returned);
        * ``test``: a frozen selection searched on this directory's screen, and no test yet unless ``force`` (the
          first test is returned);
        * ``transfer``, ``ablations``: a tested selection (for ``ablations`` the test must be of this selection);
        * ``calibrate``: a selection searched on this directory's screen (and its test, where there is one);
        * ``stability``, ``eval``, ``altscreen``, ``attributes``: nothing more;

        and last, a racing screen is searched under the ranking key it raced with (``tie_break``, when given).
        The model-side checks follow once the session is drawn (:meth:`admit`)."""
        rule = self.rule(stage)
        self.verify()
        if whole is not None or p is not None:
            check_racing_use(self.load(ScreenDocument), whole=whole, p=p)
        admitted = Admission()
        for need in rule.needs:
            admitted = self._need(need, rule.verb, admitted, force)
        if tie_break is not None and self.has(ScreenDocument):
            check_raced_tie_break(self.load(ScreenDocument), tie_break)
        return admitted

    def _need(self, need: Need, verb: str, admitted: Admission, force: bool) -> Admission:
        """Check one of a stage's needs (:data:`celtk.store.rules.Need`), with what the earlier ones read."""
        if need == "no-look":
            return replace(admitted, prior_looks=self.refuse_select_after_looks(force))
        if need == "selection":
            return replace(admitted, selection=self.load(SelectionDocument))
        if need == "on-screen" and self.has(ScreenDocument):
            check_selection_matches_screen(self.path, admitted.frozen, self.load(ScreenDocument))
        if need == "untested":
            return replace(admitted, test=self.refuse_second_test(force))
        if need == "tested":
            return replace(admitted, test=self.require_tested(verb))
        if need == "tested-if-any":
            return replace(admitted, test=self.load_if(TestDocument))
        if need == "tests-selection" and admitted.test is not None:
            self._check_tested_selection(verb, admitted.test, admitted.frozen)
        if need == "test-of-selection":
            check_test_matches_selection(self.path, admitted.tested, admitted.frozen)
            check_tested_heldout(self.path, verb, admitted.tested, admitted.frozen)
        return admitted

    def _check_tested_selection(self, what: str, test: TestDocument, selection: SelectionDocument) -> None:
        """``test.json`` (the run's first test, kept through forced repeats) must test the heads ``selection.json``
        holds now, on the held-out set frozen with them: after a forced reselection it tests the old ones, or the
        old held-out set."""
        if test.heads != selection.heads:
            raise RunStoreError(f"{self.path}/test.json tests {test.heads}, but selection.json now holds "
                                f"{selection.heads} (selected again with --force after the test): {what} reads the "
                                "tested selection's held-out outcomes, and the run's result stays its first test. "
                                "Select and test the new heads in a new run directory.")
        check_tested_heldout(self.path, what, test, selection)

    def admit(self, stage: Stage | None, session: DrawnSession, document: ScreenDocument | SelectionDocument) -> None:
        """Every model-side same-run check of ``stage`` (``None``: those every stage makes), once its session is
        drawn on ``document``'s settings (the screen or the selection), in this order:

        * weights: the loaded model's weight hash is the run's;
        * task: the session's task is the document's;
        * settings: ``fingerprint.json`` (written by the screen) equals the session's fingerprint;
        * discovery: the discovery set drawn now is the screen's (its ids) and, for a stage that scores the frozen
          selection, the selection's (its hash and shots);
        * baseline: the intact model scores the discovery set as ``screen.json`` stored (``select`` and
          ``stability``: also through the ablated path, under no ablation), so a run has one baseline;
        * held-out, for every stage that looks: the held-out set drawn is the contract's and shares no example
          with the discovery set, and for ``ablations``, which rescores the test's examples, the one ``test.json``
          scored.
        """
        checks = self.rule(stage).model if stage is not None else ModelChecks()
        config, name = session.config, type(document).FILE
        if session.model.weight_hash != document.model.weight_hash:
            raise RunStoreError(f"Model {config.model!r} now has weight hash {session.model.weight_hash}, but the run "
                                f"used {document.model.weight_hash}. Load the same weights, or start a new run.")
        if TaskRecord(session.task.config()) != document.task:
            raise RunStoreError(f"{name} was made for task {document.task.name!r}, not {session.task.full_name!r}.")
        compare_fingerprint(require_fingerprint(self.path), self.fingerprint(), session.fingerprint(), source=name)
        manifest = session.splits.manifest()
        if isinstance(document, ScreenDocument) and [e.id for e in session.splits.discovery] != document.discovery_ids:
            raise RunStoreError("The discovery set drawn now differs from the one screened; the task data changed.")
        if checks.frozen and isinstance(document, SelectionDocument):
            self._check_frozen(manifest, document)
        if checks.baseline is not None and self.has(ScreenDocument):
            self._check_baseline(session, self.load(ScreenDocument).intact_correct, null=checks.baseline == "null")
        if checks.heldout:
            self.check_heldout(manifest, session.splits.heldout, document)
        if checks.tested and self.has(TestDocument):
            tested = self.load(TestDocument).heldout_hash
            if manifest.heldout_hash != tested:
                raise RunStoreError(f"The held-out set drawn now (hash {manifest.heldout_hash}) is not the one "
                                    f"test.json scored ({tested}); the task data or split settings changed.")

    @staticmethod
    def _check_frozen(manifest: SplitManifest, selection: SelectionDocument) -> None:
        """The discovery set and shots drawn now are those the selection was frozen on."""
        if manifest.discovery_hash != selection.discovery_hash:
            raise RunStoreError(f"The discovery set drawn now (hash {manifest.discovery_hash}) differs from the one "
                                f"selection.json was frozen on ({selection.discovery_hash}); "
                                "the task data or split settings changed.")
        if manifest.shot_ids != selection.shots:
            raise RunStoreError(f"The few-shot examples drawn now ({', '.join(manifest.shot_ids) or 'none'}) differ "
                                f"from those of selection.json ({', '.join(selection.shots) or 'none'}); "
                                "test with the selection's settings.")

    def _check_baseline(self, session: DrawnSession, stored: Correctness, *, null: bool) -> None:
        """Recompute the intact discovery outcomes (``null``: and the empty ablation's, through the ablated path)
        and refuse unless they equal the screen's stored ``intact_correct``: one baseline per run."""
        intact, scored = session.screener("discovery").run([HeadSet()] if null else [])
        results = [("intact model", intact)] + ([("null ablation", scored[HeadSet()])] if null else [])
        for what, result in results:
            now = Correctness.of(result.correct)
            if now != stored:
                differ = int((now.outcomes() != stored.outcomes()).sum())
                raise RunStoreError(f"{self.path}: the {what} now scores {differ} of {len(stored)} discovery examples "
                                    "differently from the intact result stored in screen.json, so the baseline "
                                    "changed (model, data, device or numerics). "
                                    "Rerun the screen in a new run directory on this setup.")

    def check_heldout(self, manifest: SplitManifest, heldout: list[Example],
                      discovery: SelectionDocument | ScreenDocument) -> None:
        """The held-out set a stage drew (its ``Splits.manifest()`` and examples) is the contract's, and shares no
        example with the discovery set of ``discovery`` (the selection, or the screen)."""
        self.check_contract(manifest)
        self.check_disjoint(heldout, discovery)

    @staticmethod
    def check_disjoint(heldout: list[Example], discovery: SelectionDocument | ScreenDocument) -> None:
        """``heldout`` (the contract's set, or a transfer variant's) shares no example with the discovery set of
        ``discovery``."""
        check_no_overlap(discovery.discovery_hashes, discovery.discovery_ids, heldout)

    # -- the held-out contract -------------------------------------------------------------
    def contract(self) -> HeldoutContract | None:
        """The held-out set fixed with ``selection.json`` (``None``: no selection yet)."""
        selection = self.load_if(SelectionDocument)
        return selection.heldout if selection else None

    def heldout_overrides(self, heldout: int | None = None) -> dict[str, int]:
        """Session overrides that draw the contract's held-out set; ``heldout`` must equal its size."""
        contract = self.contract()
        if contract is None:
            return {} if heldout is None else {"heldout": heldout}
        if heldout is not None and heldout != contract.n:
            raise ConfigError(f"The held-out set of {self.path} was fixed when the selection was frozen: {contract.n} "
                              f"examples (seed {contract.seed}, hash {contract.hash}); it cannot be scored with "
                              f"{heldout}. Leave out heldout (--heldout), or select in a new run directory with "
                              f"`celtk select --heldout {heldout}`.")
        return {"heldout": contract.n}

    def check_contract(self, manifest: SplitManifest) -> None:
        """The held-out set drawn now (``Splits.manifest()``) must be the contract's."""
        contract = self.contract()
        if contract is not None and manifest.heldout_hash != contract.hash:
            raise RunStoreError(f"The held-out set drawn now (hash {manifest.heldout_hash}, {manifest.n_heldout} "
                                f"examples) is not the one fixed when the selection was frozen (hash {contract.hash}, "
                                f"{contract.n} examples): the task data or split settings changed. Test on the data "
                                "the run was made on.")


def check_tested_heldout(out: Path, what: str, test: TestDocument, selection: SelectionDocument) -> None:
    """``test.json`` must have scored the held-out set frozen with ``selection.json``: a ``select --force`` with
    another held-out size (or seed) after the test freezes a new set, and ``what`` (the report, transfer,
    calibrate, ablations) would show the old test's figures beside the new contract."""
    contract = selection.heldout
    if test.heldout_hash == contract.hash:
        return
    raise RunStoreError(f"{out}/test.json tested a held-out set of {test.n} examples (hash {test.heldout_hash}), but "
                        f"selection.json was frozen again (select --force after the test) with another held-out set, "
                        f"{contract.n} examples (hash {contract.hash}): {what} would put results on the two sets side "
                        "by side as one run's. The run's result stays its first test, on the old set; select and test "
                        "in a new run directory to use the new held-out set (`celtk looks` lists what this run did).")


def check_no_overlap(discovery_hashes: list[str], discovery_ids: list[str], heldout: list[Example]) -> None:
    """Refuse a held-out set that shares an example (by content) with the discovery set."""
    count, shown = shared_examples(dict(zip(discovery_hashes, discovery_ids, strict=True)), heldout)
    if count:
        raise SplitError(f"The held-out set shares {count} example(s) with the discovery set the selection was made "
                         f"on: {shown}. Held-out examples must take no part in selection.")


def record(look: Look) -> LookRecord:
    return LookRecord(seq=look.seq, what=look.what, heads=look.heads, n=look.n,
                      heldout_hash=look.heldout_hash, frozen=look.frozen, exploratory=look.exploratory,
                      forced=look.forced, complete=look.complete, result=look.result,
                      seen_before_test=look.seen_before_test, seen_elsewhere=look.extra.get("seen_before") or None)


def _describe(looks: list[Look]) -> str:
    shown = [f"{look.what} at {look.when}" + ("" if look.complete else " (incomplete)") for look in looks[:4]]
    more = f" and {len(looks) - 4} more" if len(looks) > 4 else ""
    return ", ".join(shown) + more
