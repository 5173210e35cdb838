"""Stage 2's search strategies by name (:class:`celtk.search.strategies.Strategy`). A new strategy is one module
in :mod:`celtk.search` plus one line here."""

from __future__ import annotations

from celtk.registry import Registry

STRATEGIES = Registry("search strategy", {
    "algorithm1": "celtk.search.strategies:ALGORITHM1",
    "greedy": "celtk.search.strategies:GREEDY",
    "beam": "celtk.search.strategies:BEAM",
})
