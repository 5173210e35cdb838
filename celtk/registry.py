"""The name registry every wing builds its own from: names → lazily imported objects.

Each entry points at ``module:attribute`` and is imported on first use, so the CLI builds its choices from the
names without importing numpy or torch, and ``celtk --help`` stays instant. Registries point down: a wing's
registry names modules of that wing or below (:data:`celtk.search.registry.STRATEGIES`,
:data:`celtk.screening.registry.SCREENERS` and :data:`~celtk.screening.registry.RANKERS`,
:data:`celtk.run.registry.SCREENS`); the CLI and the stages look names up in them, never the reverse.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar, cast

from celtk.errors import ConfigError, suggest

T = TypeVar("T")


class Registry(Generic[T]):
    """Names → lazily imported objects of one type ``T`` (``Registry[Strategy]``), with "did you mean" on a wrong
    name. ``T`` is what the entries are declared to be: an entry is imported on first use, and :meth:`get` returns
    it as a ``T`` without checking it at run time (a registered object is whatever its module defines)."""

    def __init__(self, kind: str, entries: dict[str, str]) -> None:
        self.kind, self._entries = kind, dict(entries)
        self._objects: dict[str, T] = {}

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def register(self, name: str, target: str | T) -> None:
        """Add ``name``: a ``"module:attribute"`` string (imported on first use) or the object itself. A name
        already registered is refused (:class:`ConfigError`), so a plug-in cannot silently replace a built-in."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"A {self.kind} name must be a non-empty string, got {name!r}.")
        if name in self._entries:
            raise ConfigError(f"A {self.kind} named {name!r} is already registered ({self._entries[name]}); "
                              f"choose another name than {', '.join(self._entries)}.")
        if isinstance(target, str):  # a T is never a str in celtk's registries (strategies, screeners, functions)
            if ":" not in target:
                raise ConfigError(f"Register a {self.kind} as 'module:attribute' or as the object itself, got "
                                  f"{target!r}.")
            self._entries[name] = target
        else:
            self._entries[name] = f"{getattr(target, '__module__', '?')}:{getattr(target, '__qualname__', '?')}"
            self._objects[name] = target

    def unregister(self, name: str) -> None:
        """Remove ``name`` (an unknown name raises :class:`ConfigError`, as :meth:`get` does)."""
        if name not in self._entries:
            raise ConfigError(f"Unknown {self.kind} {name!r}.{suggest(name, self._entries)}")
        del self._entries[name]
        self._objects.pop(name, None)

    def get(self, name: str) -> T:
        """The registered object; an unknown name raises :class:`ConfigError` with close matches."""
        if name not in self._entries:
            raise ConfigError(f"Unknown {self.kind} {name!r}.{suggest(name, self._entries)}")
        if name in self._objects:
            return self._objects[name]
        module, _, attribute = self._entries[name].partition(":")
        return cast(T, getattr(importlib.import_module(module), attribute))


def annotation_names(homes: Mapping[str, str]) -> Callable[[str], object]:
    """A module's ``__getattr__`` for the names its annotations use but it imports only for type
    checking (to keep torch, or an import circle, out of its import): beartype reads such a name
    from the module when it first checks a value against it, and this imports it then, from
    ``homes[name]`` (a module path)."""

    def __getattr__(name: str) -> object:
        if name in homes:
            return getattr(importlib.import_module(homes[name]), name)
        raise AttributeError(name)

    return __getattr__
