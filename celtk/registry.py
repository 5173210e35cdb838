"""Name registries for search strategies, stage-1 screens and alternative screeners.

Each entry points at ``module:attribute`` and is imported on first use, so the CLI builds its
choices from the names without importing numpy or torch, and ``celtk --help`` stays instant.
A new strategy or screener is one module plus one line here.
"""

from __future__ import annotations

import importlib
from typing import Any

from celtk.errors import ConfigError, suggest


class Registry:
    """Names → lazily imported objects, with "did you mean" on a wrong name."""

    def __init__(self, kind: str, entries: dict[str, str]) -> None:
        self.kind, self._entries = kind, dict(entries)

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def get(self, name: str) -> Any:
        """The registered object; an unknown name raises :class:`ConfigError` with close matches."""
        if name not in self._entries:
            raise ConfigError(f"Unknown {self.kind} {name!r}.{suggest(name, self._entries)}")
        module, _, attribute = self._entries[name].partition(":")
        return getattr(importlib.import_module(module), attribute)


STRATEGIES = Registry("search strategy", {
    "algorithm1": "celtk.strategies:ALGORITHM1",
    "greedy": "celtk.strategies:GREEDY",
    "beam": "celtk.strategies:BEAM",
})

SCREENERS = Registry("screener", {
    "gradient": "celtk.run.altscreen:gradient_screener",
    "lasso": "celtk.run.altscreen:lasso_screener",
})

# stage 1 proper: a function (session, directory, heads, progress) -> celtk.run.screen.ScreenOutcome
SCREENS = Registry("screen", {
    "exhaustive": "celtk.run.screen:exhaustive_screen",
    "racing": "celtk.run.racescreen:racing_screen",
})
