"""Stage 1 proper by name: a function ``(session, directory, heads, progress) -> celtk.run.screen.ScreenOutcome``.
A new screen is one stage module in :mod:`celtk.run` plus one line here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celtk.registry import Registry

# Any: a screen returns celtk.run.screen.ScreenOutcome, whose module imports this registry (naming the type here
# would tie the two in an import circle); run_screen, the one caller, reads the outcome's fields by name
SCREENS: Registry[Callable[..., Any]] = Registry("screen", {
    "exhaustive": "celtk.run.screen:exhaustive_screen",
    "racing": "celtk.run.racescreen:racing_screen",
})
