"""One validator for the arguments of every public function and the fields of public dataclasses.

Types come from the signature itself (the annotation strings, resolved in the function's module);
ranges come from one table, :data:`BOUNDS`, keyed by argument name (``seed`` is non-negative
wherever it appears). A wrong argument raises :class:`celtk.errors.ArgumentError`, naming the
function, the argument, the value and what was expected, before any work:

    >>> from celtk.stats import mcnemar_exact
    >>> mcnemar_exact(-1, 3)
    Traceback (most recent call last):
    celtk.errors.ArgumentError: mcnemar_exact: b must be at least 0, got -1.

A bool is not a number here and a string is never a bool; wherever a path is expected a
``str`` or any ``os.PathLike`` (``pathlib.Path``) is accepted; a ``list`` argument takes a tuple as well. A name
the validator cannot resolve is left unchecked (a test checks that every public annotation resolves).
"""

from __future__ import annotations

import ast
import builtins
import collections.abc as abc
import functools
import importlib
import inspect
import math
import numbers
import os
import pathlib
import reprlib
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, ParamSpec, TypeVar

from celtk.errors import ArgumentError

P = ParamSpec("P")
R = TypeVar("R")


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

_BUILTIN_NAMES = {"int", "float", "str", "bool", "bytes", "list", "tuple", "dict", "set", "frozenset", "object", "type"}
_ABC = {"Sequence": abc.Sequence, "MutableSequence": abc.MutableSequence, "Iterable": abc.Iterable,
        "Iterator": abc.Iterator, "Mapping": abc.Mapping, "Callable": abc.Callable, "Collection": abc.Collection}


@dataclass(frozen=True)
class _Alt:
    """One alternative of an annotation: a name and its bracketed arguments."""

    head: str
    args: tuple[tuple[_Alt, ...], ...] = ()


def _split(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


@functools.cache
def parse_annotation(text: str) -> tuple[_Alt, ...]:
    """``"list[str] | None"`` → alternatives ``list`` (of ``str``) and ``None``."""
    text = text.strip()
    if text.startswith(("'", '"')):
        text = text[1:-1]
    alts = []
    for part in _split(text, "|"):
        if part.startswith("Optional[") and part.endswith("]"):
            alts += [*parse_annotation(part[9:-1]), _Alt("None")]
        elif part.startswith("Union[") and part.endswith("]"):
            alts += [a for sub in _split(part[6:-1], ",") for a in parse_annotation(sub)]
        elif "[" in part and part.endswith("]"):
            head, inner = part[:part.index("[")], part[part.index("[") + 1:-1]
            alts.append(_Alt(head.strip(), tuple(parse_annotation(a) for a in _split(inner, ","))))
        else:
            alts.append(_Alt(part))
    return tuple(alts)


_ANY = object()  # a name the validator accepts anything for

# celtk's own types, for annotations whose module imports them only for type checking
_KNOWN = {"Model": "celtk.models", "Task": "celtk.tasks", "Example": "celtk.tasks", "Splits": "celtk.tasks",
          "HeadSet": "celtk.heads", "Head": "celtk.heads", "HeadScore": "celtk.search.scores",
          "RunConfig": "celtk.run.config", "EvalConfig": "celtk.evaluation.results",
          "Prepared": "celtk.evaluation.prompts", "CachedScreener": "celtk.screening.cached"}


def _resolve(head: str, namespace: Mapping[str, Any]) -> Any:
    """The runtime object an annotation name stands for, or ``_ANY`` when it cannot be resolved."""
    name = head.removeprefix("typing.").removeprefix("collections.abc.")
    if name in ("None", "NoneType"):
        return type(None)
    if name in ("Any", "...", "object"):
        return _ANY
    if name in _BUILTIN_NAMES:
        return getattr(builtins, name)
    if name in _ABC:
        return _ABC[name]
    if name in ("Path", "PurePath") or head in ("pathlib.Path", "os.PathLike"):
        return pathlib.PurePath
    first, *rest = head.split(".")
    obj = namespace.get(first, _ANY)
    if obj is _ANY and not rest and first in _KNOWN:
        obj = getattr(importlib.import_module(_KNOWN[first]), first)
    for attr in rest:
        obj = getattr(obj, attr, _ANY)
    return obj


def _unresolved(alts: tuple[_Alt, ...], namespace: Mapping[str, Any]) -> list[str]:
    out = []
    for alt in alts:
        if alt.head not in ("Any", "...", "object") and _resolve(alt.head, namespace) is _ANY:
            out.append(alt.head)
        for arg in alt.args:
            if not (alt.head in ("Callable", "Literal") or alt.head.endswith(("Float", "Int", "Bool", "Float64"))):
                out += _unresolved(arg, namespace)
    return out


Check = Callable[[Any], bool]


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"


def _compile_alt(alt: _Alt, namespace: Mapping[str, Any]) -> Check:
    """A predicate for one alternative of an annotation."""
    target = _resolve(alt.head, namespace)
    if target is _ANY:
        return lambda v: True
    origin = typing.get_origin(target)
    if origin is not None:  # an alias such as Progress = Callable[[str, int, int], None]
        target = origin
    if alt.head == "Literal":
        allowed = [ast.literal_eval(a[0].head) for a in alt.args]
        return lambda v: v in allowed
    if getattr(target, "__module__", "").startswith("jaxtyping") and alt.args:  # Float[Tensor, "batch pos"]
        return _compile(alt.args[0], namespace)
    simple: dict[Any, Check] = {
        bool: _is_bool,
        int: lambda v: isinstance(v, numbers.Integral) and not _is_bool(v),
        float: lambda v: isinstance(v, numbers.Real) and not _is_bool(v),
        str: lambda v: isinstance(v, str),
        pathlib.PurePath: lambda v: isinstance(v, (str, os.PathLike)),
        abc.Callable: callable,
    }
    if target in simple:
        return simple[target]
    if not isinstance(target, type):
        return lambda v: True  # a TypeVar, a Literal alias or another construct: not checked here
    if target in (list, tuple, abc.Sequence, abc.MutableSequence, abc.Collection):  # a list or a tuple either way
        kinds = (list, tuple) if target in (list, tuple) else target
        items = _compile_items(alt, namespace)
        return lambda v: isinstance(v, kinds) and not isinstance(v, (str, bytes)) and items(v)
    if target in (dict, abc.Mapping):
        return lambda v: isinstance(v, abc.Mapping)
    if target in (abc.Iterable, abc.Iterator):  # elements checked only where reading them consumes nothing
        items = _compile_items(alt, namespace)
        return lambda v: (isinstance(v, target) and not isinstance(v, (str, bytes))
                          and (not isinstance(v, abc.Collection) or items(v)))
    return lambda v: isinstance(v, target)


def _compile_items(alt: _Alt, namespace: Mapping[str, Any]) -> Check:
    """Elements of a list/tuple/Sequence argument against the bracketed element type(s)."""
    if not alt.args:
        return lambda v: True
    if alt.head == "tuple" and not (len(alt.args) == 2 and alt.args[1][0].head == "..."):
        each = [_compile(a, namespace) for a in alt.args]
        return lambda v: len(v) == len(each) and all(c(x) for c, x in zip(each, v, strict=True))
    one = _compile(alt.args[0], namespace)
    return lambda v: all(one(x) for x in v)


def _compile(alts: tuple[_Alt, ...], namespace: Mapping[str, Any]) -> Check:
    checks = [_compile_alt(a, namespace) for a in alts]
    return checks[0] if len(checks) == 1 else lambda v: any(c(v) for c in checks)


@functools.cache
def compiled(annotation: str, module: str) -> Check:
    """The predicate of ``annotation`` as written in ``module`` (cached)."""
    return _compile(parse_annotation(annotation), vars(sys.modules[module]) if module in sys.modules else {})


def expected(annotation: str) -> str:
    """An annotation in words: ``"int | None"`` → ``int or None``; a path → ``a path (str or os.PathLike)``."""
    words = []
    for part in _split(annotation.strip("'\""), "|"):
        words.append("a path (str or os.PathLike)" if part in ("Path", "pathlib.Path") else part)
    return " or ".join(dict.fromkeys(words))


def _show(value: Any) -> str:
    return f"{reprlib.repr(value)} ({type(value).__name__})"


def check_value(where: str, name: str, value: Any, annotation: str | None, module: str = "builtins",
                message: str | None = None, ranges: bool = True) -> None:
    """Refuse ``value`` of argument ``name`` of ``where`` unless it has the type ``annotation`` names (as
    written in ``module``) and, with ``ranges``, lies in :data:`BOUNDS`; ``message`` replaces the
    opening of the type message (e.g. ``"chat in run.toml"``)."""
    if annotation is not None and not compiled(annotation, module)(value):
        opening = message or f"{where}: {name}"
        raise ArgumentError(f"{opening} must be {expected(annotation)}, got {_show(value)}.")
    bound = BOUNDS.get(name) if ranges else None
    if bound is None or value is None or _is_bool(value):
        return
    values = value if bound.each and isinstance(value, (list, tuple)) else [value] if not bound.each else []
    for v in values:
        if isinstance(v, numbers.Real) and not _is_bool(v):
            if isinstance(v, float) and not math.isfinite(v) or not bound.holds(float(v)):
                raise ArgumentError(f"{where}: {name} must be {bound.describe()}{' each' if bound.each else ''}, "
                                    f"got {reprlib.repr(value)}.")


def _where(func: Callable[..., Any]) -> str:
    name = func.__qualname__
    return name.removesuffix(".__init__")


def check_arguments(func: Callable[..., Any], bound: inspect.BoundArguments) -> None:
    """Every bound argument of ``func`` against its annotation and :data:`BOUNDS`."""
    module = getattr(func, "__module__", "builtins")
    for name, value in bound.arguments.items():
        parameter = bound.signature.parameters[name]
        if name in ("self", "cls") or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        annotation = parameter.annotation if isinstance(parameter.annotation, str) else None
        check_value(_where(func), name, value, annotation, module)


def validated(func: Callable[P, R], types: bool = True) -> Callable[P, R]:
    """Decorate a public function (or ``__init__``): check its arguments before it runs (with
    ``types=False`` only that they fit the signature, for a constructor that checks its own fields)."""
    if getattr(func, "__celtk_validated__", False):
        return func
    signature = inspect.signature(func)

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:
            shown = signature.replace(return_annotation=inspect.Signature.empty, parameters=[
                p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()
                if p.name != "self"])
            raise ArgumentError(f"{_where(func)}: {error}; the signature is {_where(func)}{shown}.") from None
        if types:
            check_arguments(func, bound)
        return func(*args, **kwargs)

    wrapper.__celtk_validated__ = True  # type: ignore[attr-defined]
    return wrapper


def public(obj: Any) -> Any:
    """What a package exports under a public name: a function validated (:func:`validated`); a class
    whose constructor refuses arguments its signature does not take with an :class:`ArgumentError`
    (the types of its fields are its own ``__post_init__``'s to check, :func:`check_fields`)."""
    if inspect.isfunction(obj):
        return validated(obj)
    if inspect.isclass(obj) and not issubclass(obj, BaseException) and "__init__" in vars(obj):
        setattr(obj, "__init__", validated(obj.__init__, types=False))  # noqa: B010 - mypy: no method assignment
    return obj


def check_fields(instance: Any, ranges: bool = True) -> None:
    """Every field of a dataclass instance against its annotation and, with ``ranges``, :data:`BOUNDS`
    (call from ``__post_init__``)."""
    cls = type(instance)
    for name, annotation in _field_annotations(cls):
        check_value(cls.__name__, name, getattr(instance, name), annotation, cls.__module__, ranges=ranges)


_FIELDS: dict[type, tuple[tuple[str, str | None], ...]] = {}


def _field_annotations(cls: type) -> tuple[tuple[str, str | None], ...]:
    if cls not in _FIELDS:
        _FIELDS[cls] = tuple((f.name, f.type if isinstance(f.type, str) else None) for f in fields(cls))
    return _FIELDS[cls]


def unresolved_names(obj: Any) -> list[str]:
    """Annotation names of a public function or dataclass that the validator cannot resolve (for a test)."""
    if inspect.isclass(obj) and is_dataclass(obj):
        namespace = vars(sys.modules[obj.__module__])
        return [n for f in fields(obj) if isinstance(f.type, str)
                for n in _unresolved(parse_annotation(f.type), namespace)]
    target = inspect.unwrap(obj.__init__ if inspect.isclass(obj) else obj)
    namespace = getattr(target, "__globals__", {})
    return [n for p in inspect.signature(target).parameters.values() if isinstance(p.annotation, str)
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            for n in _unresolved(parse_annotation(p.annotation), namespace)]
