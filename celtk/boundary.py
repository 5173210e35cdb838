"""The checks at the public boundary: types by beartype, ranges by argument name.

A public function is decorated where it is defined with :func:`public`: its arguments are bound
to its signature (a misspelt keyword is an :class:`celtk.errors.ArgumentError` that shows the
signature), checked against :data:`BOUNDS` by name (``seed`` is non-negative wherever it appears),
then checked against their annotations by beartype, configured by :data:`CONF` to raise
:class:`~celtk.errors.ArgumentError` too:

    >>> from celtk.stats import mcnemar_exact
    >>> mcnemar_exact(-1, 3)
    Traceback (most recent call last):
    celtk.errors.ArgumentError: mcnemar_exact: b must be non-negative, got -1.

A public dataclass checks its own fields in ``__post_init__`` (:func:`check_fields`, types by
beartype's :func:`~beartype.door.is_bearable`); value types built in the hot loops (a head's
score, one example's result) check nothing here. Wherever a path is annotated a ``str`` or any
``os.PathLike`` is accepted; an ``int`` is a ``float`` (beartype's numeric tower), and a ``bool`` is
not a number (refused where a range applies).
"""

from __future__ import annotations

import collections.abc as abc
import functools
import inspect
import math
import numbers
import os
import pathlib
import re
import reprlib
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any, ParamSpec, TypeVar

from beartype import BeartypeConf, FrozenDict, beartype
from beartype.door import is_bearable

from celtk.errors import ArgumentError

P = ParamSpec("P")
R = TypeVar("R")

CONF = BeartypeConf(violation_param_type=ArgumentError, violation_door_type=ArgumentError, is_pep484_tower=True,
                    hint_overrides=FrozenDict({pathlib.Path: str | os.PathLike}))
"""beartype's settings for every public function: a violation is an :class:`ArgumentError`, an
``int`` passes for a ``float``, and a path may be a ``str`` or any ``os.PathLike``."""


@dataclass(frozen=True)
class Bound:
    """A numeric range; ``each``: the bound applies to every element of a sequence argument."""

    low: int | float | None = None
    high: int | float | None = None
    low_open: bool = False
    high_open: bool = False
    each: bool = False

    def holds(self, value: int | float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def describe(self) -> str:
        def show(x: int | float) -> str:
            return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"

        if self.low == 0 and not self.low_open and self.high is None:
            return "non-negative"
        if self.high is None:
            return f"{'greater than' if self.low_open else 'at least'} {show(self.low or 0)}"
        if self.low is None:
            return f"{'less than' if self.high_open else 'at most'} {show(self.high)}"
        return f"in {'(' if self.low_open else '['}{show(self.low)}, {show(self.high)}{')' if self.high_open else ']'}"


AT_LEAST_0, AT_LEAST_1 = Bound(0), Bound(1)
FRACTION = Bound(0, 1, low_open=True, high_open=True)

BOUNDS: dict[str, Bound] = {
    # counts and sizes
    "b": AT_LEAST_0, "c": AT_LEAST_0, "seed": AT_LEAST_0, "fewshot": AT_LEAST_0,
    "n_boot": Bound(1, 1_000_000), "repeats": Bound(1, 100_000), "n_candidates": Bound(1, 100_000),
    "resamples": Bound(1, 10_000),  # the CLI's own bounds (--n-boot, --repeats, --candidates, --resamples)
    "width": AT_LEAST_1, "batch_size": AT_LEAST_1, "rows_per_pass": AT_LEAST_1, "max_new_tokens": AT_LEAST_1,
    "p": AT_LEAST_1, "k": AT_LEAST_1, "heldout": AT_LEAST_1,
    "layers": Bound(0, each=True), "shard": Bound(0, each=True),
    # fractions
    "level": FRACTION, "fraction": FRACTION,
}
"""Ranges by argument name, shared by every public function (and dataclass field) that has the name.
Names checked by the function itself with a message of their own (``limit``, ``masks``, ``rate``,
split sizes) are not repeated here."""


def _is_bool(value: object) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"


def check_range(where: str, name: str, value: object) -> None:
    """Refuse ``value`` of ``name`` outside its :data:`BOUNDS` range (a bool, NaN or infinity
    included); a name without a bound, ``None`` and a value of another type pass (types are beartype's)."""
    bound = BOUNDS.get(name)
    if bound is None or value is None:
        return
    if _is_bool(value):
        raise ArgumentError(f"{where}: {name} must be {'a list of ' if bound.each else ''}int, got {value!r} "
                            "(a bool is not a number here).")
    values = value if bound.each and isinstance(value, (list, tuple)) else [value] if not bound.each else []
    for v in values:
        if isinstance(v, numbers.Real) and not _is_bool(v) and (
                isinstance(v, float) and not math.isfinite(v) or not bound.holds(float(v))):
            raise ArgumentError(f"{where}: {name} must be {bound.describe()}{' each' if bound.each else ''}, "
                                f"got {reprlib.repr(value)}.")


def _where(func: Callable[..., object]) -> str:
    return func.__qualname__.removesuffix(".__init__")


def public(func: Callable[P, R]) -> Callable[P, R]:
    """Decorate a public function or method where it is defined: its arguments bound to its
    signature, checked against :data:`BOUNDS`, then typed by beartype (:data:`CONF`), every element of a
    container argument included (:func:`check_type`)."""
    signature = inspect.signature(func)
    annotations = {k: v for k, v in func.__annotations__.items() if isinstance(v, str)}  # before beartype resolves
    containers = {k: v for k, v in annotations.items() if any(word in v for word in _COLLECTION_WORDS)}
    paths = {k for k, v in annotations.items() if _names_a_path(v)}
    typed = beartype(conf=CONF)(func)
    where = _where(func)
    hints: dict[str, object] = {}

    @functools.wraps(func)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            shown = signature.replace(return_annotation=inspect.Signature.empty, parameters=[
                p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()
                if p.name != "self"])
            raise ArgumentError(f"{where}: {error}; the signature is {where}{shown}.") from None
        for name, value in bound.arguments.items():
            if name in BOUNDS:
                check_range(where, name, value)
            if name in paths:
                check_path(f"{where}: {name}", value)
            if name in containers and isinstance(value, (str, list, tuple, set, frozenset, dict)):
                if name not in hints:  # resolved on first need: only a container annotation, so no torch here
                    hints[name] = eval(containers[name], func.__globals__, _ModuleNames(func.__module__))  # noqa: S307
                check_type(f"{where}: {name}", value, hints[name], containers[name])
        return typed(*args, **kwargs)

    checked.__celtk_annotations__ = annotations  # type: ignore[attr-defined]  # as written (beartype resolves them)
    return checked


_COLLECTION_WORDS = ("list", "tuple", "dict", "set", "Sequence", "Iterable", "Collection", "Mapping")
_COLLECTIONS = (list, set, frozenset, abc.Sequence, abc.MutableSequence, abc.Collection, abc.Iterable, abc.Set)


# hint left untyped: beartype's is_bearable takes a type form, which mypy cannot spell (object does not pass)
def _holds(value: object, hint: Any) -> bool:
    """Whether ``value`` is of type ``hint`` element by element (beartype itself checks one element of a container,
    drawn at random), and a string is not taken for a collection of strings (``Sequence[str]``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_holds(value, arg) for arg in args)
    if hint in (Any, object):
        return True
    if not is_bearable(value, hint, conf=CONF):
        return False
    if isinstance(value, str):
        return origin not in _COLLECTIONS
    if origin is tuple and args and isinstance(value, tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_holds(v, args[0]) for v in value)
        return len(args) == len(value) and all(_holds(v, a) for v, a in zip(value, args, strict=True))
    if origin in _COLLECTIONS and args and isinstance(value, (list, tuple, set, frozenset)):
        return all(_holds(v, args[0]) for v in value)
    if origin in (dict, abc.Mapping) and len(args) == 2 and isinstance(value, dict):
        return all(_holds(k, args[0]) and _holds(v, args[1]) for k, v in value.items())
    return True


class _ModuleNames(Mapping[str, object]):
    """A module's names as a mapping, its ``__getattr__`` included (:func:`annotation_names`)."""

    def __init__(self, module: str) -> None:
        self.module = sys.modules[module]

    def __getitem__(self, name: str) -> object:
        try:
            return getattr(self.module, name)
        except AttributeError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(vars(self.module))

    def __len__(self) -> int:
        return len(vars(self.module))


@functools.cache
def field_hints(cls: type) -> dict[str, object]:
    """The resolved annotations of a dataclass's fields (cached)."""
    return typing.get_type_hints(cls, localns=_ModuleNames(cls.__module__))


def expected(annotation: str) -> str:
    """An annotation in words: ``"int | None"`` → ``int or None``; a path → ``a path (str or os.PathLike)``."""
    words = ["a path (str or os.PathLike)" if part.strip() in ("Path", "pathlib.Path") else part.strip()
             for part in annotation.strip("'\"").split(" | ")]
    return " or ".join(dict.fromkeys(words))


def _admits_bool(hint: object) -> bool:
    """Whether ``hint`` names ``bool`` itself (or anything), rather than a number a bool would pass for."""
    if hint in (bool, Any, object):
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return any(isinstance(arg, bool) for arg in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        return any(_admits_bool(arg) for arg in typing.get_args(hint))
    return False


def check_type(opening: str, value: object, hint: object, annotation: str) -> None:
    """Refuse ``value`` unless beartype finds it of type ``hint`` (written ``annotation``), every element of a
    container included: a bool is not an ``int`` here (``discovery = true`` is a mistake, not 1), a string is never
    a bool, and a string is not a collection of strings.
    ``opening`` names the value (``"RunConfig: seed"``, ``"chat in run.toml"``)."""
    if not _holds(value, hint) or (_is_bool(value) and not _admits_bool(hint)):
        raise ArgumentError(f"{opening} must be {expected(annotation)}, got {reprlib.repr(value)} "
                            f"({type(value).__name__}).")


_PATH_WORDS = ("Path", "pathlib.Path", "PathLike", "os.PathLike")


def _names_a_path(annotation: str) -> bool:
    """Whether an annotation, as written, admits a path (``str | Path``, ``list[Path]``, ``os.PathLike[str]``)."""
    return any(word in _PATH_WORDS for word in re.findall(r"[\w.]+", annotation))


def check_path(opening: str, value: object) -> None:
    """Refuse a path (a ``str``, ``bytes`` or ``os.PathLike``; each of a list's or tuple's) holding a NUL byte, which
    no operating system takes in a file name (the call that opened it would raise ``ValueError``). Other values are
    left to the type check. ``opening`` names the value."""
    for item in value if isinstance(value, (list, tuple)) else (value,):
        if isinstance(item, (str, bytes, os.PathLike)):
            text = os.fspath(item)
            if (b"\x00" in text) if isinstance(text, bytes) else ("\x00" in text):
                raise ArgumentError(f"{opening} cannot hold a NUL byte (\\x00): it is read as a path, and no file "
                                    f"name holds one; got {reprlib.repr(item)}.")


def check_fields(instance: object, ranges: bool = True) -> None:
    """Every field of a dataclass instance against its annotation (beartype) and, with ``ranges``,
    :data:`BOUNDS` (call from ``__post_init__``)."""
    cls: type = type(instance)
    hints = field_hints(cls)
    for spec in fields(cls):
        value = getattr(instance, spec.name)
        check_type(f"{cls.__name__}: {spec.name}", value, hints[spec.name], str(spec.type))
        if _names_a_path(str(spec.type)):
            check_path(f"{cls.__name__}: {spec.name}", value)
        if ranges:
            check_range(cls.__name__, spec.name, value)
