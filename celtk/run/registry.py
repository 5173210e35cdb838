"""Stage 1 proper by name: a function ``(session, directory, heads, progress) -> celtk.run.screen.ScreenOutcome``.
A new screen is one stage module in :mod:`celtk.run` plus one line here."""

from __future__ import annotations

from celtk.registry import Registry

SCREENS = Registry("screen", {
    "exhaustive": "celtk.run.screen:exhaustive_screen",
    "racing": "celtk.run.racescreen:racing_screen",
})
