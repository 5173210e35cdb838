"""How a document's fields are written: per-example correctness bits, the codecs of parsed values (heads, head
sets, model and task facts, split manifests) and the field markers (:func:`coded`, :func:`rows`, :func:`optional`).
One unit per field name in every file: ``gain`` is a fraction of the examples (accuracy points / 100), ``gain_count``
a number of examples; ``fixes`` and ``damage`` are numbers of examples."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np
from jaxtyping import Bool

from celtk.errors import HeadError, RunStoreError
from celtk.heads import Head, HeadSet
from celtk.tasks import SplitManifest

T = TypeVar("T")

SCHEMA_VERSION = 1
UNSCORED = "-"  # in a racing screen's correctness bits: an example the head was not scored on
DISCOVERY_GAIN_NOTE = ("selection-biased: the best of the searched candidates, measured on the examples that chose it; "
                       "the held-out gain (test.json) is the honest estimate")




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
    def of(cls, outcomes: Iterable[object], scored: Iterable[object] | None = None) -> Correctness:
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
    # untyped: each codec parses to its own kind (a Codec is not generic over it)
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


def _head_names(value: object) -> HeadSet:
    if not isinstance(value, list):
        raise HeadError(f"expected a list of head names, got {type(value).__name__}")
    return HeadSet.of(value)


def _text(parse: Callable[[str], T]) -> Callable[[object], T]:
    def decode(value: object) -> T:
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
    facts: dict[str, Any]  # untyped values: the accessors below convert the ones they name

    def __post_init__(self) -> None:
        if not isinstance(self.facts, dict):
            raise TypeError(f"{type(self).__name__} holds a JSON object, got {type(self.facts).__name__}")
        missing = [k for k in self.REQUIRED if k not in self.facts]
        if missing:
            raise ValueError(f"{type(self).__name__} needs the keys {', '.join(self.REQUIRED)}; "
                             f"{', '.join(missing)} missing")

    def get(self, key: str, default: object = None) -> object:
        """A fact this record's accessors do not name (``None`` when absent)."""
        return self.facts.get(key, default)

    def to_json(self) -> dict[str, object]:
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

    @property
    def ref(self) -> ModelName:
        """The model by name, as the documents that do not carry this record write it."""
        return ModelName(self.name)


@dataclass(frozen=True)
class TaskRecord(_Facts):
    """The task a run used, as ``Task.config()`` recorded it (its full name under ``task``, its kind, its data path and
    the settings of its family)."""

    REQUIRED: ClassVar[tuple[str, ...]] = ("task",)

    @property
    def name(self) -> str:
        """The task's full name (``arithmetic:2da``, ``jsonl:PATH``)."""
        return str(self.facts["task"])

    @property
    def ref(self) -> TaskName:
        """The task by full name, as the documents that do not carry this record write it."""
        return TaskName(self.name)


@dataclass(frozen=True)
class _Name:
    """A name a document writes as a non-empty string; ``WHAT`` says what it names, for errors. Two kinds of name
    never compare equal (a dataclass compares its own class only)."""

    WHAT: ClassVar[str] = "a name"
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"{self.WHAT} is a non-empty string, got {short(self.name)}")

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ModelName(_Name):
    """A model as a document that does not carry its whole :class:`ModelRecord` names it: the record's ``name``
    (``test.json``, ``ablation-kinds.json``, ``transfer.json``, ``eval.json``, ``head_attributes.json``), or the
    alias, hub id or path a replication was given (``replicate.json``). Written as that string."""

    WHAT: ClassVar[str] = "a model's name"


@dataclass(frozen=True)
class TaskName(_Name):
    """A task as a document that does not carry its whole :class:`TaskRecord` names it: its full name
    (``arithmetic:2da``, ``boolq``, ``jsonl:PATH``). Written as that string."""

    WHAT: ClassVar[str] = "a task's full name"

    @property
    def family(self) -> str:
        """The part before the first ``:`` (``arithmetic`` for ``arithmetic:2da``); the whole name without one."""
        return self.name.partition(":")[0]


HEAD = Codec(Head, "a head name such as 'L1H2'", str, _text(Head.parse))
HEADS = Codec(HeadSet, "a list of head names such as ['L1H2', 'L14H8']", HeadSet.names, _head_names)
SET_NAME = Codec(HeadSet, "a head set written as one string such as 'L1H2,L14H8'", str, _text(HeadSet.parse))
CORRECTNESS = Codec(Correctness, "per-example bits such as '0110-'", str, _text(Correctness))
MODEL = Codec(ModelRecord, "an object of model facts (Model.describe())", ModelRecord.to_json, ModelRecord)
TASK = Codec(TaskRecord, "an object of task settings (Task.config())", TaskRecord.to_json, TaskRecord)
MODEL_NAME = Codec(ModelName, "a model's name such as 'SmolLM2-135M-Instruct'", str, _text(ModelName))
TASK_NAME = Codec(TaskName, "a task's full name such as 'arithmetic:2da'", str, _text(TaskName))
SPLITS = Codec(SplitManifest, "a split manifest (Splits.manifest())", SplitManifest.to_json, SplitManifest.from_json)


KEYS = -1  # a coded field's depth for an object whose keys are the coded values (e.g. a frequency per head)


# The field markers (coded, rows, optional) give a dataclasses Field where a field's value belongs, as
# dataclasses.field does; untyped where no argument names the value's type, or where it is a list (the tests'
# run-time type check would refuse a Field returned as a list).
def coded(codec: Codec, *, depth: int = 0, omit_none: bool = False, default_factory: Any = MISSING) -> Any:
    """A field holding parsed values (:class:`Head`, :class:`HeadSet`, :class:`Correctness`): one, lists
    nested ``depth`` deep, or (``depth=KEYS``) the keys of an object whose values are kept as they are.
    :meth:`Record.from_json` decodes it, :meth:`Record.to_json` encodes it, and a record built with the
    on-disk form instead (a string for a head) is refused."""
    metadata = {"codec": codec, "depth": depth, "omit_none": omit_none}
    if omit_none:
        return field(default=None, metadata=metadata)
    return field(metadata=metadata, default_factory=default_factory)


def _map(function: Callable[[object], object], value: object, depth: int) -> object:
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


def _check(value: object, codec: Codec, depth: int) -> bool:
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


def record(kind: type[T]) -> T:
    """A field holding one ``kind`` record (decoded by ``from_json``)."""
    marker: T = field(metadata={"record": kind})  # a Field, typed as the record it stands for (field() is untyped)
    return marker


def optional_record(kind: type[T]) -> T | None:
    """A field holding one ``kind`` record, left out of the file when it is ``None``."""
    return field(default=None, metadata={"omit_none": True, "record": kind})  # a Field, typed as its default


def short(value: object) -> str:
    """``repr(value)`` cut to 60 characters, for error messages that quote a stored value."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"
