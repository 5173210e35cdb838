"""Stage 2's search strategies by name (:class:`celtk.search.strategies.Strategy`), and the ranking key's tie-breaks
(:data:`TIE_BREAKS`). A new strategy is one module in :mod:`celtk.search` plus one line here. Imports nothing heavy,
so the settings and the CLI read these names before numpy loads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from celtk.heads import TIE_BREAKS as _TIE_BREAKS
from celtk.registry import Registry, annotation_names

if TYPE_CHECKING:  # the type only: a strategy's module loads on first use
    from celtk.search.strategies import Strategy

__getattr__ = annotation_names({"Strategy": "celtk.search.strategies"})  # what a runtime type check resolves

STRATEGIES: Registry[Strategy] = Registry("search strategy", {
    "algorithm1": "celtk.search.strategies:ALGORITHM1",
    "greedy": "celtk.search.strategies:GREEDY",
    "beam": "celtk.search.strategies:BEAM",
})


def get_strategy(name: str) -> Strategy:
    """The registered strategy ``name``; "did you mean" on a typo."""
    return STRATEGIES.get(name)


TIE_BREAKS = _TIE_BREAKS  # the ranking key's tie-breaks (:data:`celtk.heads.TIE_BREAKS`), chosen by name here
