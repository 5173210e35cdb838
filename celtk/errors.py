"""The one error family of celtk.

Every error a user can cause is a :class:`CeltkError`; the CLI shows its message
without a traceback. Messages name what was wrong and what would be right.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class CeltkError(Exception):
    """Base class of every error celtk raises on purpose."""


class HeadError(CeltkError, ValueError):
    """A head or head set is malformed or outside a model's shape."""


class ModelSourceError(CeltkError):
    """A model source cannot be resolved or loaded."""


class HubUnreachableError(ModelSourceError):
    """A hub id was given but the hub cannot be reached and no local copy exists."""


class ArchitectureError(ModelSourceError):
    """A model's architecture is one celtk cannot screen, or behaves unlike one it can."""


class KVCacheIgnoredError(ArchitectureError):
    """A decoder layer ran without consulting the KV cache celtk passed it (a renamed cache keyword)."""


class TaskError(CeltkError, ValueError):
    """A task name, task option or task data is wrong."""


class DataFormatError(TaskError):
    """A data file has a malformed line; the message names the file and line."""


class SplitError(CeltkError, ValueError):
    """Discovery / held-out sets are too large or overlap."""


class RunStoreError(CeltkError):
    """A run directory is unreadable, locked, or belongs to another configuration."""


class NothingToFreezeError(CeltkError):
    """The search found no head set that gains on the discovery set, so no selection was frozen (and the
    held-out set was not spent on one); the message says why and what to try."""


class ConfigError(CeltkError, ValueError):
    """A configuration value is invalid (k > p, unknown key, bad dtype or device...)."""


class ArgumentError(ConfigError, TypeError):
    """A public function was called with an argument of the wrong type or outside its range
    (:mod:`celtk.boundary`); the message names the function, the argument, the value and what is expected."""


class SandboxRefusedError(CeltkError):
    """Model-written code would have to run but the user has not opted in."""


def suggest(name: str, valid: Iterable[str]) -> str:
    """Return a ``Did you mean ...?`` clause plus the list of valid names."""
    valid = sorted(valid)
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
    hint = f" Did you mean: {', '.join(repr(c) for c in close)}?" if close else ""
    return f"{hint} Valid names: {', '.join(valid)}."
