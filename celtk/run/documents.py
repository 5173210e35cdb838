"""Typed result documents: what each stage writes to a run directory, as frozen dataclasses.

Each document round-trips through JSON (``to_json`` / ``from_json``) and carries
``schema_version``. One unit per field name in every file: ``gain`` is a fraction of the
examples (accuracy points / 100), ``gain_count`` a number of examples; ``fixes`` and
``damage`` are numbers of examples.

A new document is one dataclass here: fields in the order they appear in the file, nested
rows marked with :func:`rows`, fields written only when set marked with :func:`optional`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
from jaxtyping import Bool, Float

from celtk.errors import ArgumentError, ConfigError, HeadError, RunStoreError
from celtk.heads import Head, HeadSet
from celtk.runstore import (
    MAX_FILE_BYTES,
    atomic_write_bytes,
    bytes_digest,
    dumps,
    file_digest,
    parse_json,
    read_bounded,
    read_json,
    write_json,
)
from celtk.search.scores import head_order
from celtk.tasks import SplitManifest

SCHEMA_VERSION = 1
UNSCORED = "-"  # in a racing screen's correctness bits: an example the head was not scored on
DISCOVERY_GAIN_NOTE = ("selection-biased: the best of the searched candidates, measured on the examples that chose it; "
                       "the held-out gain (test.json) is the honest estimate")
R = TypeVar("R", bound="Record")
D = TypeVar("D", bound="Document")


@dataclass(frozen=True)
class Correctness:
    """Per-example outcomes of one model (or one ablation) on a run's examples, in example order: what a
    document stores as ``"0101…"`` (``1`` correct, ``0`` wrong, ``-`` not scored: a racing screen's head
    dropped early). Only :meth:`of` writes the bits and only :meth:`outcomes` / :meth:`scored` read them.

        >>> c = Correctness.of([True, False, True], scored=[True, True, False])
        >>> c.bits, c.n_scored, c.outcomes().tolist(), c.scored().tolist()
        ('10-', 2, [True, False, False], [True, True, False])
    """

    bits: str

    def __post_init__(self) -> None:
        if not isinstance(self.bits, str) or set(self.bits) - {"0", "1", UNSCORED}:
            raise RunStoreError(f"malformed correctness {str(self.bits)[:20]!r}: expected one character per "
                                f"example, '1' (correct), '0' (wrong) or '{UNSCORED}' (not scored).")

    @classmethod
    def of(cls, outcomes: Iterable[Any], scored: Iterable[Any] | None = None) -> Correctness:
        """From per-example outcomes (truthy: correct) and, for a racing screen's dropped head, which
        examples were scored (``None``: every one)."""
        values = list(outcomes)
        mask = [True] * len(values) if scored is None else [bool(s) for s in scored]
        if len(mask) != len(values):
            raise ValueError(f"Correctness.of: {len(values)} outcomes but {len(mask)} scored flags.")
        return cls("".join(("1" if v else "0") if s else UNSCORED for v, s in zip(values, mask, strict=True)))

    def outcomes(self) -> Bool[np.ndarray, " example"]:
        """Correct (bool ``[n]``); an example not scored counts as not correct (see :meth:`scored`)."""
        return np.array([c == "1" for c in self.bits], dtype=bool)

    def scored(self) -> Bool[np.ndarray, " example"]:
        """Which examples were scored (bool ``[n]``): all of them, except on a racing screen's dropped head."""
        return np.array([c != UNSCORED for c in self.bits], dtype=bool)

    @property
    def n_scored(self) -> int:
        return len(self.bits) - self.bits.count(UNSCORED)

    @property
    def n_unscored(self) -> int:
        return self.bits.count(UNSCORED)

    def __len__(self) -> int:
        return len(self.bits)

    def __str__(self) -> str:
        return self.bits


@dataclass(frozen=True)
class Codec:
    """How a parsed field value is written to a file and read back: ``encode`` gives the JSON value,
    ``decode`` parses it (raising on a malformed one), ``kind`` is the parsed type and ``shape`` what the
    file holds (for errors)."""

    kind: type
    shape: str
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


def _head_names(value: Any) -> HeadSet:
    if not isinstance(value, list):
        raise HeadError(f"expected a list of head names, got {type(value).__name__}")
    return HeadSet.of(value)


def _text(parse: Callable[[str], Any]) -> Callable[[Any], Any]:
    def decode(value: Any) -> Any:
        if not isinstance(value, str):
            raise HeadError(f"expected a string, got {type(value).__name__}")
        return parse(value)
    return decode


@dataclass(frozen=True)
class _Facts:
    """A JSON object another part of celtk writes (``Model.describe()``, ``Task.config()``), whose keys vary with the
    model's source or the task's kind: held whole, so it is written back key for key, and read through typed
    accessors. ``REQUIRED`` are the keys every one has."""

    REQUIRED: ClassVar[tuple[str, ...]] = ()
    facts: dict[str, Any]

    def __post_init__(self) -> None:
        if not isinstance(self.facts, dict):
            raise TypeError(f"{type(self).__name__} holds a JSON object, got {type(self.facts).__name__}")
        missing = [k for k in self.REQUIRED if k not in self.facts]
        if missing:
            raise ValueError(f"{type(self).__name__} needs the keys {', '.join(self.REQUIRED)}; "
                             f"{', '.join(missing)} missing")

    def get(self, key: str, default: Any = None) -> Any:
        """A fact this record's accessors do not name (``None`` when absent)."""
        return self.facts.get(key, default)

    def to_json(self) -> dict[str, Any]:
        return dict(self.facts)


@dataclass(frozen=True)
class ModelRecord(_Facts):
    """The model a run used, as ``Model.describe()`` recorded it (name, source, architecture, shape, dtype, weight hash,
    and what its loader adds)."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("name", "n_layers", "n_heads", "weight_hash")

    @property
    def name(self) -> str:
        return str(self.facts["name"])

    @property
    def n_layers(self) -> int:
        return int(self.facts["n_layers"])

    @property
    def n_heads(self) -> int:
        return int(self.facts["n_heads"])

    @property
    def weight_hash(self) -> str:
        return str(self.facts["weight_hash"])


@dataclass(frozen=True)
class TaskRecord(_Facts):
    """The task a run used, as ``Task.config()`` recorded it (its full name under ``task``, its kind, its data path and
    the settings of its family)."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("task",)

    @property
    def name(self) -> str:
        """The task's full name (``arithmetic:2da``, ``jsonl:PATH``)."""
        return str(self.facts["task"])


HEAD = Codec(Head, "a head name such as 'L1H2'", str, _text(Head.parse))
HEADS = Codec(HeadSet, "a list of head names such as ['L1H2', 'L14H8']", HeadSet.names, _head_names)
SET_NAME = Codec(HeadSet, "a head set written as one string such as 'L1H2,L14H8'", str, _text(HeadSet.parse))
CORRECTNESS = Codec(Correctness, "per-example bits such as '0110-'", str, _text(Correctness))
MODEL = Codec(ModelRecord, "an object of model facts (Model.describe())", ModelRecord.to_json, ModelRecord)
TASK = Codec(TaskRecord, "an object of task settings (Task.config())", TaskRecord.to_json, TaskRecord)
SPLITS = Codec(SplitManifest, "a split manifest (Splits.manifest())", SplitManifest.to_json, SplitManifest.from_json)


KEYS = -1  # a coded field's depth for an object whose keys are the coded values (e.g. a frequency per head)


def coded(codec: Codec, *, depth: int = 0, omit_none: bool = False, default_factory: Any = MISSING) -> Any:
    """A field holding parsed values (:class:`Head`, :class:`HeadSet`, :class:`Correctness`): one, lists
    nested ``depth`` deep, or (``depth=KEYS``) the keys of an object whose values are kept as they are.
    :meth:`Record.from_json` decodes it, :meth:`Record.to_json` encodes it, and a record built with the
    on-disk form instead (a string for a head) is refused."""
    metadata = {"codec": codec, "depth": depth, "omit_none": omit_none}
    if omit_none:
        return field(default=None, metadata=metadata)
    return field(metadata=metadata, default_factory=default_factory)


def _map(function: Callable[[Any], Any], value: Any, depth: int) -> Any:
    if value is None:
        return None
    if depth == KEYS:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {type(value).__name__}")
        return {function(k): v for k, v in value.items()}
    if depth == 0:
        return function(value)
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return [_map(function, v, depth - 1) for v in value]


def _check(value: Any, codec: Codec, depth: int) -> bool:
    if value is None:
        return True
    if depth == KEYS:
        return isinstance(value, dict) and all(isinstance(k, codec.kind) for k in value)
    if depth == 0:
        return isinstance(value, codec.kind)
    return isinstance(value, (list, tuple)) and all(_check(v, codec, depth - 1) for v in value)


def _where(depth: int, before: str = "", after: str = "") -> str:
    """Where a coded field's values sit, for messages: nothing for one value."""
    return "" if depth == 0 else f"{before}{'as object keys' if depth == KEYS else 'in lists'}{after}"


def rows(kind: type, *, default: Any = MISSING) -> Any:
    """A field holding a list of ``kind`` records."""
    return field(metadata={"rows": kind}) if default is MISSING else field(default=default, metadata={"rows": kind})


def optional() -> Any:
    """A field left out of the file when it is ``None`` (e.g. Algorithm 1's pool for greedy)."""
    return field(default=None, metadata={"omit_none": True})


def optional_record(kind: type) -> Any:
    """A field holding one ``kind`` record, left out of the file when it is ``None``."""
    return field(default=None, metadata={"omit_none": True, "record": kind})


def _short(value: Any) -> str:
    """``repr(value)`` cut to 60 characters, for error messages that quote a stored value."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def _dump(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return value


@dataclass(frozen=True)
class Record:
    """A JSON object with a fixed set of keys, written in field order."""

    def __post_init__(self) -> None:
        for f in fields(self):
            codec = f.metadata.get("codec")
            if codec is not None and not _check(getattr(self, f.name), codec, f.metadata["depth"]):
                raise ArgumentError(f"{type(self).__name__}.{f.name} holds parsed values ({codec.kind.__name__}"
                                f"{_where(f.metadata['depth'], ', ')}), got {_short(getattr(self, f.name))}; "
                                f"the file's form ({codec.shape}) is read by {type(self).__name__}.from_json.")

    def to_json(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if (f.metadata.get("omit_none") and value is None) or not f.metadata.get("stored", True):
                continue
            codec = f.metadata.get("codec")
            out[f.name] = _map(codec.encode, value, f.metadata["depth"]) if codec else _dump(value)
        return out

    @classmethod
    def from_json(cls: type[R], data: dict[str, Any], where: str = "") -> R:
        known = {f.name: f for f in fields(cls) if f.metadata.get("stored", True)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise RunStoreError(f"{where or cls.__name__}: unknown field(s) {', '.join(unknown)}; it was written by a "
                                f"different celtk version. Rerun the stage that writes it.")
        values = {}
        for name, value in data.items():
            kind, single = known[name].metadata.get("rows"), known[name].metadata.get("record")
            codec = known[name].metadata.get("codec")
            if codec is not None:
                try:
                    values[name] = _map(codec.decode, value, known[name].metadata["depth"])
                except (HeadError, RunStoreError, TypeError, ValueError) as error:
                    raise RunStoreError(f"{where or cls.__name__}: field {name!r} should hold {codec.shape}"
                                        f"{_where(known[name].metadata['depth'], ' (', ')')}, got "
                                        f"{_short(value)} ({error}); it was not written by celtk. "
                                        "Rerun the stage that writes it.") from None
                continue
            values[name] = ([kind.from_json(v, where) for v in value] if kind and value is not None
                            else single.from_json(value, where) if single and value is not None else value)
        # every field but those left out when None (optional) is in every file celtk writes
        missing = [name for name, f in known.items() if name not in data and not f.metadata.get("omit_none")]
        if missing:
            raise RunStoreError(f"{where or cls.__name__} lacks {', '.join(missing)}, which celtk writes in every "
                                f"{cls.__name__}: it was written by another celtk version, or edited. Rerun the stage "
                                f"that writes it into a new run directory with this celtk version.")
        try:
            return cls(**values)
        except TypeError as error:
            raise RunStoreError(f"{where or cls.__name__} is incomplete ({error}); "
                                "rerun the stage that writes it.") from None


@dataclass(frozen=True, kw_only=True)
class Document(Record):
    """A whole result file: a record with a schema version, saved as ``FILE`` in a run directory."""

    FILE: ClassVar[str] = ""
    # written with its digest (save): read only with it. False: a document celtk writes beside no run's digests
    DIGESTED: ClassVar[bool] = True
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def from_json(cls: type[D], data: dict[str, Any], where: str = "") -> D:
        stored = next(f for f in fields(cls) if f.name == "schema_version").metadata.get("stored", True)
        if stored and "schema_version" not in data:
            raise RunStoreError(f"{where or cls.FILE} has no schema_version, which celtk writes in every run document: "
                                "it was written by another celtk version, or edited. Rerun the stage that writes it "
                                "into a new run directory with this celtk version.")
        version = data.get("schema_version", SCHEMA_VERSION)  # a document that writes no version has layout 1
        if version != SCHEMA_VERSION:
            raise RunStoreError(f"{where or cls.FILE} has schema version {version}; this celtk reads version "
                                f"{SCHEMA_VERSION}. Rerun the stage with this version.")
        return super().from_json(data, where)

    def file_name(self) -> str:
        """The file this document is saved as by default (``FILE``; per null or method for some)."""
        return self.FILE

    def save(self, directory: Path, name: str | None = None) -> None:
        """Write the file atomically, then record its SHA-256 in ``digests.json`` (see :func:`check_digest`), then
        what it keeps beside (:meth:`save_beside`). In a run directory a stage writes through
        :meth:`celtk.run.directory.RunDirectory.save` instead, which keeps what it has read up to date."""
        path = Path(directory) / (name or self.file_name())
        atomic_write_bytes(path, self.encode())
        record_digest(path)
        for beside, value in self.beside().items():
            write_json(Path(directory) / beside, value)

    def encode(self) -> bytes:
        """The bytes :meth:`save` writes (strict JSON, UTF-8)."""
        return dumps(self.to_json()).encode("utf-8")

    def beside(self) -> dict[str, Any]:
        """What this document keeps beside its file, undigested: file name → JSON value (none; an altscreen's
        timing)."""
        return {}

    @classmethod
    def load(cls: type[D], directory: Path, name: str | None = None) -> D:
        """Read the file, refusing one changed since celtk wrote it (:func:`check_digest`)."""
        path = Path(directory) / (name or cls.FILE)
        data = read_bounded(path)
        value = parse_json(path, data)  # a damaged file is named as such first
        return cls.verified(path, value, bytes_digest(data), book_digests(path.parent))

    @classmethod
    def verified(cls: type[D], path: Path, value: Any, digest: str, digests: dict[str, str] | None) -> D:
        """The document whose JSON ``value`` was read from ``path`` as bytes of SHA-256 ``digest``, refused unless
        ``digests`` (the directory's ``digests.json``; ``None``: it has none) records that digest for it
        (:func:`check_recorded`)."""
        check_recorded(path, digest, digests, required=cls.DIGESTED)
        return cls.from_json(value, str(path))


DIGESTS = "digests.json"
_DIGESTS_ADVICE = ("it records the SHA-256 of every document celtk wrote in {} and cannot be rebuilt: restore it, or "
                   "start a new run directory.")


def record_digest(path: Path) -> None:
    """Record ``path``'s SHA-256 in ``digests.json`` beside it (written by the stage that wrote the file)."""
    book = Path(path).parent / DIGESTS
    digests = read_digests(book) if book.exists() else {}
    digests[Path(path).name] = file_digest(path)
    write_json(book, digests)


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


# ---------------------------------------------------------------------------------------------
# screen.json


@dataclass(frozen=True, kw_only=True)
class ScreenRow(Record):
    head: Head = coded(HEAD)
    accuracy: float
    gain: float
    gain_count: int
    damage: int
    fixes: int
    correct: Correctness = coded(CORRECTNESS)  # per example ('-': not scored, racing screens only)
    # racing screens: a head dropped early was scored on n_scored examples, and its accuracy, gain,
    # damage and fixes are on those examples only (gain as a fraction of them); None = every example
    n_scored: int | None = optional()

    @property
    def complete(self) -> bool:
        """Scored on every discovery example: every head, except those a racing screen dropped early."""
        return self.n_scored is None


@dataclass(frozen=True, kw_only=True)
class RacingRecord(Record):
    """How a racing screen (:mod:`celtk.run.racescreen`) went: heads were scored chunk by chunk and
    dropped once they could not enter the top-p pool; ``pool`` heads were scored on every example."""

    mode: str  # "exact" (the exhaustive pool by construction) or "confidence" (with probability ≥ 1 − delta)
    p: int
    delta: float | None  # confidence mode's failure probability
    schedule: list[int]  # chunk sizes, in examples
    racing_after: list[int]  # heads still racing after each chunk
    order: list[int] | None  # the order examples were revealed in; None = discovery order
    pool: list[Head] = coded(HEAD, depth=1)  # the top p, best first
    uncertified: list[Head] = coded(HEAD, depth=1)  # dropped by the confidence bound alone (always empty in exact mode)
    evaluations: int  # (head, example) evaluations made
    exhaustive_evaluations: int  # heads × examples
    saved_fraction: float


@dataclass(frozen=True, kw_only=True)
class ScreenDocument(Document):
    """Stage 1: every single head ablated on the discovery set (or one shard's slice), or raced
    (``racing``): then only the heads scored on every example (``n_scored`` unset) are complete."""

    FILE: ClassVar[str] = "screen.json"
    model: ModelRecord = coded(MODEL)
    task: TaskRecord = coded(TASK)
    n: int
    intact_accuracy: float
    intact_correct: Correctness = coded(CORRECTNESS)
    discovery_ids: list[str]
    discovery_hashes: list[str]
    splits: SplitManifest = coded(SPLITS)
    shard: list[int] | None
    config: dict[str, Any]  # RunConfig fields and celtk_version
    heads: list[ScreenRow] = rows(ScreenRow)
    null_ablation: dict[str, Any] | None = optional()  # fixes, damage, max_abs_logprob_diff (0, 0, ~0 expected)
    layers: list[int] | None = optional()  # a quick look screened only these layers (run_screen(layers=...))
    racing: RacingRecord | None = optional_record(RacingRecord)  # a racing screen (config screen = "racing")

    def complete_rows(self) -> list[ScreenRow]:
        """The heads scored on every discovery example: all of them, except those a racing screen dropped."""
        return [r for r in self.heads if r.complete]

    def dropped_rows(self) -> list[ScreenRow]:
        """The heads a racing screen dropped early (scored on ``n_scored`` examples only); empty otherwise."""
        return [r for r in self.heads if not r.complete]

    def ranked_rows(self, tie_break: str | None = None) -> list[ScreenRow]:
        """The complete rows, best first, by the one ranking key (:func:`celtk.search.scores.head_order`), ties in
        every measure ordered by ``tie_break`` (default: the run's, ``numeric`` unless it recorded another)."""
        tie_break = self.config.get("tie_break", "numeric") if tie_break is None else tie_break
        return sorted(self.complete_rows(),
                      key=lambda r: head_order(HeadSet((r.head,)), r.gain_count, r.damage, r.accuracy, tie_break))

    def pool(self, p: int, tie_break: str | None = None) -> list[Head]:
        """The top ``p`` heads among those scored on every example, best first: what Algorithm 1 searches (and,
        on a racing screen, what it raced for); ties by ``tie_break`` as in :meth:`ranked_rows`."""
        return [r.head for r in self.ranked_rows(tie_break)[:p]]

    GRID_METRICS: ClassVar[tuple[str, ...]] = ("accuracy", "gain", "gain_count", "damage", "fixes")

    def grid(self, metric: str = "gain") -> Float[np.ndarray, "layer head"]:
        """``metric`` of each head alone (one of :attr:`GRID_METRICS`; ``gain`` as a fraction) as a
        ``[n_layers, n_heads]`` array; NaN where a head was not scored on every example (not screened here, or
        dropped early by a racing screen)."""
        if metric not in self.GRID_METRICS:
            raise ConfigError(f"Unknown screen metric {metric!r}; choose one of {', '.join(self.GRID_METRICS)}.")
        grid = np.full((self.n_layers, self.n_heads), np.nan)
        for row in self.complete_rows():
            grid[row.head.layer, row.head.head] = float(getattr(row, metric))
        return grid

    def to_pandas(self) -> Any:
        """One row per head (``head``, ``layer``, ``head_index``, ``accuracy``, ``gain``, ``gain_count``, ``damage``,
        ``fixes``, ``n_scored``), in head order: a ``pandas.DataFrame`` for a notebook."""
        import pandas as pd

        return pd.DataFrame([{"head": str(r.head), "layer": r.head.layer, "head_index": r.head.head,
                              "accuracy": r.accuracy, "gain": r.gain, "gain_count": r.gain_count, "damage": r.damage,
                              "fixes": r.fixes, "n_scored": len(r.correct) if r.complete else r.n_scored}
                             for r in self.heads])

    @property
    def n_layers(self) -> int:
        return self.model.n_layers

    @property
    def n_heads(self) -> int:
        return self.model.n_heads

    @property
    def model_name(self) -> str:
        return self.model.name

    @property
    def weight_hash(self) -> str:
        return self.model.weight_hash

    @property
    def task_name(self) -> str:
        return self.task.name

    def results_digest(self) -> str:
        """SHA-256 of what the screen found, what a selection records it was searched on: the model, task, splits
        and every outcome. Not ``config`` (batch size or device may differ between two calls that screen the same
        run) nor ``null_ablation`` (a float diagnostic of the two paths' agreement, not a result a search reads)."""

        results = {k: v for k, v in self.to_json().items() if k not in ("config", "null_ablation")}
        return hashlib.sha256(json.dumps(results, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# selection.json and diagnostics.json


@dataclass(frozen=True, kw_only=True)
class RankedSet(Record):
    heads: HeadSet = coded(HEADS)
    accuracy: float
    gain: float
    gain_count: int
    damage: int
    fixes: int


@dataclass(frozen=True, kw_only=True)
class Interaction(Record):
    """A subset's gain against the sum of its heads' gains, in examples."""

    heads: HeadSet = coded(HEADS)
    gain_count: int
    additive_gain_count: int
    gap: int  # gain_count − additive_gain_count
    noise: float  # 1.96 · sqrt(fixes + damage)
    kind: str | None = optional()  # "super-additive" / "sub-additive", on flagged subsets only


@dataclass(frozen=True, kw_only=True)
class HeldoutContract(Record):
    """The held-out set every test of a selection scores, fixed when the selection is frozen."""

    n: int
    seed: int
    hash: str  # celtk.tasks.Splits.manifest()'s heldout_hash: the examples' ids and contents, in order
    source: str  # where the examples came from (generator, a data path, the hub)


@dataclass(frozen=True, kw_only=True)
class LookRecord(Record):
    """One use of the held-out set, as ``heldout_log.jsonl`` records it (:class:`celtk.run.heldout.Look`;
    its time stays in the log, so two identical runs write identical documents)."""

    seq: int
    what: str
    heads: list[HeadSet] = coded(HEADS, depth=1)
    n: int | None
    heldout_hash: str
    frozen: bool  # the frozen selection's held-out outcomes were among those scored
    exploratory: bool  # not the run's test
    forced: bool
    complete: bool  # its result was written
    result: str | None  # the file it wrote
    chained: bool = True  # every line of the log is hash-chained: a log holding a line without the chain is refused
    seen_before_test: int | None = optional()  # made before the run's test (this seq), it scored the tested selection
    # the same held-out set (weights, task) tested before in other run directories, as the ledger says ("RUN#seq")
    seen_elsewhere: list[str] | None = optional()


@dataclass(frozen=True, kw_only=True)
class SelectionDocument(Document):
    """Stage 2: the frozen head set and every set the search scored."""

    FILE: ClassVar[str] = "selection.json"
    heads: HeadSet = coded(HEADS)
    discovery_accuracy: float
    discovery_gain: float  # selection-biased: the best of n_evaluations candidates on the examples that chose it
    intact_discovery_accuracy: float
    model: ModelRecord = coded(MODEL)
    task: TaskRecord = coded(TASK)
    config: dict[str, Any]
    discovery_ids: list[str]
    discovery_hashes: list[str]
    discovery_hash: str
    shots: list[str]
    strategy: str
    strategy_options: dict[str, Any]
    k: int
    n_evaluations: int
    rounds: list[list[HeadSet]] = coded(SET_NAME, depth=2)  # per round, the sets kept (greedy, beam)
    ranking: list[RankedSet] = rows(RankedSet)
    p: int | None = optional()  # Algorithm 1 only, from here on
    n_evaluated_subsets: int | None = optional()
    pool: list[Head] | None = coded(HEAD, depth=1, omit_none=True)
    flagged_interactions: list[Interaction] | None = field(default=None,
                                                           metadata={"omit_none": True, "rows": Interaction})
    forced_after_test: bool | None = optional()  # reselected with force=True after a look at the held-out set
    forced_no_gain: bool | None = optional()  # frozen with force=True although its discovery gain is ≤ 0
    discovery_gain_note: str = DISCOVERY_GAIN_NOTE
    heldout: HeldoutContract = field(metadata={"record": HeldoutContract})  # what every test of it scores
    screen_digest: str  # ScreenDocument.results_digest() of the screen it was searched on
    prior_looks: list[LookRecord] | None = field(default=None, metadata={"omit_none": True, "rows": LookRecord})

    def to_pandas(self) -> Any:
        """Every head set the search scored (``heads``, ``size``, ``accuracy``, ``gain``, ``gain_count``, ``damage``,
        ``fixes``), best first: a ``pandas.DataFrame``."""
        import pandas as pd

        return pd.DataFrame([{"heads": str(r.heads), "size": len(r.heads), "accuracy": r.accuracy, "gain": r.gain,
                              "gain_count": r.gain_count, "damage": r.damage, "fixes": r.fixes} for r in self.ranking])


@dataclass(frozen=True, kw_only=True)
class DiagnosticsDocument(Document):
    """How the search went: the rounds (greedy, beam) or Algorithm 1's interaction diagnostics."""

    FILE: ClassVar[str] = "diagnostics.json"
    strategy: str
    rounds: list[list[HeadSet]] = coded(SET_NAME, depth=2)
    pool: list[Head] | None = coded(HEAD, depth=1, omit_none=True)
    subsets: list[Interaction] | None = field(default=None, metadata={"omit_none": True, "rows": Interaction})
    pairwise_interaction: list[list[int | None]] | None = optional()  # gain_count(pair) − gain_count(a) − gain_count(b)
    overlap: dict[str, list[list[int]]] | None = optional()  # shared fixes / damage between pool heads, in examples
    flagged: list[Interaction] | None = field(default=None, metadata={"omit_none": True, "rows": Interaction})
    noise_rule: str | None = optional()


# ---------------------------------------------------------------------------------------------
# test.json


@dataclass(frozen=True, kw_only=True)
class TestExample(Record):
    __test__ = False  # not a pytest class
    id: str
    intact_correct: bool
    ablated_correct: bool
    intact_logprob: float | list[float] | None  # per choice on a multiple-choice task; None: graded by generation
    ablated_logprob: float | list[float] | None
    intact_generation: str | None = optional()  # generation-graded tasks: what each model wrote
    ablated_generation: str | None = optional()


@dataclass(frozen=True, kw_only=True)
class TestDocument(Document):
    """The held-out comparison of the frozen selection with the intact model."""

    __test__ = False  # not a pytest class
    FILE: ClassVar[str] = "test.json"
    heads: HeadSet = coded(HEADS)
    strategy: str
    model: str
    task: str
    n: int
    intact_accuracy: float
    ablated_accuracy: float
    gain: float
    relative_error_reduction: float | None  # None: the intact model is already perfect
    fixes: int
    damage: int
    mcnemar_p: float
    gain_ci: list[float]
    ci_level: float
    n_boot: int
    heldout_hash: str
    examples: list[TestExample] = rows(TestExample)
    discovery_gain: float | None = optional()  # selection-biased, copied from selection.json
    shrinkage: float | None = optional()  # discovery_gain − gain: how much of the searched gain did not hold
    look: int | None = optional()  # the held-out log's seq of the look that gave this result
    # every look at the held-out set up to the last write of this file (the first test stays the result)
    looks: list[LookRecord] | None = field(default=None, metadata={"omit_none": True, "rows": LookRecord})
    # earlier looks (seq) that already scored this selection on this held-out set: the test is not a first look
    seen_before_test: list[int] | None = optional()

    def to_pandas(self) -> Any:
        """One row per held-out example (``id``, ``intact_correct``, ``ablated_correct``, ``outcome``: ``fix``,
        ``damage`` or ``same``, and the log-probabilities): a ``pandas.DataFrame``."""
        import pandas as pd

        def outcome(e: TestExample) -> str:
            return "fix" if e.ablated_correct and not e.intact_correct else (
                "damage" if e.intact_correct and not e.ablated_correct else "same")

        return pd.DataFrame([{"id": e.id, "intact_correct": e.intact_correct, "ablated_correct": e.ablated_correct,
                              "outcome": outcome(e), "intact_logprob": e.intact_logprob,
                              "ablated_logprob": e.ablated_logprob} for e in self.examples])


# ---------------------------------------------------------------------------------------------
# ablation-kinds.json


@dataclass(frozen=True, kw_only=True)
class KindRow(Record):
    """The frozen selection under one ablation kind against the intact model, on the held-out examples.
    Statistics left undefined (n = 0) are ``None``, with the reason in ``undefined``."""

    kind: str  # zero, mean, resample, scale:α
    alpha: float | None  # scale:α's α (the dose-response axis); None for zero, mean, resample
    positions: str = "all"  # where z was replaced: all, prefix (the shared few-shot prefix), example (its own)
    draws: int = 1  # resample: reference draws per example, averaged per example before the statistics
    ablated_accuracy: float | None
    gain: float | None
    gain_ci: list[float] | None
    fixes: int | float  # a count; over several draws the per-example mean verdicts summed (intact wrong)
    damage: int | float  # likewise, 1 − the mean verdict summed over the examples the intact model gets right
    mcnemar_p: float | None  # one draw: exact McNemar; several: None, see paired_p
    # mean (ablated − intact) target log-probability (the correct choice's); None: generation
    mean_delta_logprob: float | None
    ablated_correct: Correctness = coded(CORRECTNESS)  # several draws: the first (the run's seed)
    undefined: dict[str, str] = field(default_factory=dict)
    # several draws: an exact paired sign-flip test on the per-example mean verdicts (McNemar's with one draw),
    # each draw's outcomes and each draw's gain (their spread is the resampling noise)
    paired_p: float | None = optional()
    draw_correct: list[Correctness] | None = coded(CORRECTNESS, depth=1, omit_none=True)
    draw_gains: list[float] | None = optional()

    @property
    def label(self) -> str:
        """The kind, with where it replaced z unless everywhere (``zero``, ``zero @ example``)."""
        return self.kind if self.positions == "all" else f"{self.kind} @ {self.positions}"


@dataclass(frozen=True, kw_only=True)
class AblationKindsDocument(Document):
    """Does the selection's enhancement survive other ablation kinds? Held-out looks of the frozen selection
    under zero, mean and resample ablation and along a scale sweep (``ablation-kinds.json``); they reselect nothing."""

    FILE: ClassVar[str] = "ablation-kinds.json"
    heads: HeadSet = coded(HEADS)
    model: str
    task: str
    run_ablation: str  # the kind the run was screened, selected and tested under
    test_gain: float  # test.json's held-out gain: the confirmatory result these rows sit beside
    n: int
    intact_accuracy: float
    intact_correct: Correctness = coded(CORRECTNESS)
    heldout_hash: str
    reference: dict[str, Any]  # what mean and resample were measured on (the discovery set), and how
    n_boot: int
    ci_level: float
    kinds: list[KindRow] = rows(KindRow)
    omitted: dict[str, str] = field(default_factory=dict)  # kind -> why it was not scored


# ---------------------------------------------------------------------------------------------
# stability.json and altscreen-METHOD.json


@dataclass(frozen=True, kw_only=True)
class StableSelection(Record):
    heads: HeadSet = coded(HEADS)
    frequency: float
    is_reference: bool
    discovery_gain: float
    heldout_gain: float
    heldout_gain_ci: list[float]
    heldout_mcnemar_p: float
    exploratory: bool = True  # every row but the tested frozen selection (whose figure repeats the test): not a test


@dataclass(frozen=True, kw_only=True)
class StabilityDocument(Document):
    """Selections on resamples of the discovery set, each distinct one scored on the held-out set."""

    FILE: ClassVar[str] = "stability.json"
    strategy: str
    p: int
    k: int
    resampling: str
    n_resamples: int
    fraction: float | None
    seed: int
    reference_selection: HeadSet = coded(HEADS)
    reference_frequency: float
    head_frequency: dict[Head, float] = coded(HEAD, depth=KEYS)  # most often chosen first
    mean_pairwise_jaccard: float
    n_distinct_selections: int
    heldout_gain_over_resamples: dict[str, float]  # mean, min, q05, median, q95, max
    heldout_intact_accuracy: float
    n_heldout: int
    selections: list[StableSelection] = rows(StableSelection)
    per_resample: list[HeadSet] = coded(HEADS, depth=1, default_factory=list)
    n_discovery_evaluations: int = 0


@dataclass(frozen=True, kw_only=True)
class AltscreenDocument(Document):
    """An alternative screener's ranking beside the exhaustive screen's (``altscreen-METHOD.json``);
    ``seconds`` lives in ``altscreen-METHOD-timing.json`` so the document stays deterministic."""

    method: str
    comparison: dict[str, Any]  # overlap, chance_overlap, jaccard, spearman, pools, n_evaluations
    details: dict[str, Any]
    scores: dict[str, float]
    exhaustive_evaluations: int
    seconds: float = field(default=0.0, metadata={"stored": False})

    @staticmethod
    def file(method: str) -> str:
        return f"altscreen-{method}.json"

    def file_name(self) -> str:
        return self.file(self.method)

    def beside(self) -> dict[str, Any]:
        return {f"altscreen-{self.method}-timing.json": {"seconds": round(self.seconds, 1)}}

    @classmethod
    def load_method(cls, directory: Path, method: str) -> AltscreenDocument:
        document = cls.load(directory, cls.file(method))
        timing = Path(directory) / f"altscreen-{method}-timing.json"
        return replace(document, seconds=read_json(timing)["seconds"]) if timing.exists() else document


# ---------------------------------------------------------------------------------------------
# eval.json


@dataclass(frozen=True, kw_only=True)
class EvalExample(Record):
    """One example's verdict: ``logprob`` is the target's summed log-probability (per choice on a multiple-choice
    task; ``None`` when graded by generation), ``extra`` what the grader kept (the generation, the program's
    verdict)."""

    id: str
    correct: bool
    logprob: float | list[float] | None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class HeldBack(Record):
    """A row of the task that no split holds, and why (the few-shot reserve, a repeat of another row's content)."""

    id: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class EvalDocument(Document):
    """``celtk eval``: the model on a split of a task with ``heads`` ablated (``eval.json``). ``config`` records the
    settings, the model's description, the task's config and the split manifest; with a run (``config["run"]``) it
    was a logged look at that run's held-out set (``config["look"]``), and ``config["exploratory"]`` marks a
    held-out pool scored outside any run."""

    DIGESTED: ClassVar[bool] = False  # eval.json may sit beside no run
    FILE: ClassVar[str] = "eval.json"
    model: str
    task: str
    heads: HeadSet = coded(HEADS)
    n: int
    accuracy: float
    # the standard error of the accuracy, as lm-eval's acc_stderr: sqrt(acc (1 - acc) / (n - 1)); None for n < 2
    accuracy_stderr: float | None = optional()
    examples: list[EvalExample] = rows(EvalExample)
    config: dict[str, Any]
    held_back: list[HeldBack] = rows(HeldBack)  # rows no split holds, each with its reason (the CLI prints the count)

    def correct(self) -> Bool[np.ndarray, " example"]:
        """Per example, whether it was right (bool ``[n]``)."""
        return np.array([e.correct for e in self.examples], dtype=bool)


# ---------------------------------------------------------------------------------------------
# transfer.json and calibration-NULL.json


@dataclass(frozen=True, kw_only=True)
class TransferRow(Record):
    """The frozen selection against the intact model under one variant, on held-out examples.
    Fields the statistics leave undefined (n = 0) are ``None``, with the reason in ``undefined``."""

    variant: str
    kind: str  # original / shots / zero-shot / subtask / task / chat / model
    task: str
    model: str
    fewshot: int
    shot_seed: int
    chat: bool
    n: int
    intact_accuracy: float | None
    ablated_accuracy: float | None
    gain: float | None
    gain_ci: list[float] | None
    fixes: int
    damage: int
    mcnemar_p: float | None
    holm_p: float | None  # Holm-adjusted across the distinct rows of the grid
    heldout_hash: str
    data: str | None = None  # where the examples came from: the data path, or generator / hub / file
    from_test: bool = False  # the original row: the test's comparison, read from test.json (not a second look)
    intact_correct: Correctness = coded(CORRECTNESS)
    ablated_correct: Correctness = coded(CORRECTNESS)
    undefined: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class DroppedVariant(Record):
    """A variant of the grid not scored: it would repeat ``same_as``'s comparison, or cannot apply."""

    variant: str
    same_as: str | None
    reason: str


@dataclass(frozen=True, kw_only=True)
class LanguageModelLoss(Record):
    """Mean next-token negative log-likelihood (nats) on plain text, intact against ablated;
    ``delta_ci`` resamples the text's windows (pairs) with replacement."""

    source: str
    n_windows: int
    n_tokens: int
    intact_nll: float
    ablated_nll: float
    delta: float  # ablated − intact: positive means the ablation costs language modelling
    delta_ci: list[float]
    ci_level: float


@dataclass(frozen=True, kw_only=True)
class TransferDocument(Document):
    """Does the selection hold? Intact against ablated under a grid of variants (``transfer.json``)."""

    FILE: ClassVar[str] = "transfer.json"
    heads: HeadSet = coded(HEADS)
    model: str
    task: str
    discovery_gain: float  # selection-biased (see SelectionDocument)
    n_boot: int
    ci_level: float
    variants: list[TransferRow] = rows(TransferRow)
    dropped: list[DroppedVariant] = field(default_factory=list, metadata={"rows": DroppedVariant})
    lm_loss: LanguageModelLoss | None = optional()

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "") -> TransferDocument:
        data = dict(data)
        if data.get("lm_loss") is not None:
            data["lm_loss"] = LanguageModelLoss.from_json(data["lm_loss"], where)
        return super().from_json(data, where)


@dataclass(frozen=True, kw_only=True)
class CalibrationDocument(Document):
    """The best discovery gain a search finds under a null of no effect, and its held-out
    counterpart, over ``repeats`` draws (``calibration-NULL.json``); gains are fractions."""

    null: str  # random-heads / permutation
    repeats: int
    seed: int
    n_candidates: int  # candidate sets the best is taken over, per repeat
    set_size: int
    null_discovery_gains: list[float]  # per repeat: the best candidate's discovery gain
    null_heldout_gains: list[float]  # per repeat: that candidate's held-out gain
    observed_discovery_gain: float
    observed_heldout_gain: float | None  # from test.json, where it exists
    p_value: float | None  # (1 + #{null best >= observed}) / (1 + repeats); None: not the same statistic (p_value_note)
    validity: str
    p_value_note: str | None = optional()  # why there is no p-value
    null_sets: list[HeadSet] | None = coded(HEADS, depth=1, omit_none=True)  # random-heads: each repeat's best set

    @staticmethod
    def file(null: str) -> str:
        return f"calibration-{null}.json"

    def file_name(self) -> str:
        return self.file(self.null)
