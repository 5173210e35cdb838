"""Stage 2's search strategies by name (:class:`celtk.search.strategies.Strategy`), and the ranking key's tie-breaks
(:data:`TIE_BREAKS`). A new strategy is one module in :mod:`celtk.search` plus one line here. Imports nothing heavy,
so the settings and the CLI read these names before numpy loads."""

from __future__ import annotations

from celtk.registry import Registry

STRATEGIES = Registry("search strategy", {
    "algorithm1": "celtk.search.strategies:ALGORITHM1",
    "greedy": "celtk.search.strategies:GREEDY",
    "beam": "celtk.search.strategies:BEAM",
})

TIE_BREAKS = ("numeric", "paper")
"""How the ranking key's last part orders head ids that tie on everything else
(:func:`celtk.search.scores.head_ids`): ``numeric`` (celtk's default) compares each id as its (layer, head) numbers,
``L2H0`` before ``L10H0``; ``paper`` compares the ids as the strings the paper writes (``L{layer}H{head}``) in
lexicographic order, ``L10H0`` before ``L2H0``, as its Algorithm 1 says."""
