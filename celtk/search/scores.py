"""One scored intervention and the paper's ranking key (:func:`head_order`, the one spelling): pure numpy, no
torch, so the search logic (:mod:`celtk.search.selection`, :mod:`celtk.search.strategies`,
:mod:`celtk.search.stability`) imports without it."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from jaxtyping import Bool

from celtk.errors import ArgumentError, ConfigError
from celtk.heads import HeadSet
from celtk.search.registry import TIE_BREAKS

HeadIds = tuple[tuple[int, int], ...] | tuple[str, ...]
"""A set's head ids as the ranking key compares them: ``(layer, head)`` pairs (``numeric``) or strings (``paper``)."""
RankKey = tuple[int, int, int | float, int, HeadIds]
""":func:`head_order`'s key: −gain, damage, −accuracy (or −gain), size, head ids (ascending = better)."""


@dataclass(frozen=True)
class HeadScore:
    """One intervention scored on the discovery set (counts are numbers of examples)."""

    heads: HeadSet
    n_correct: int
    gain: int  # n_correct - intact n_correct
    damage: int  # intact right -> ablated wrong
    fixes: int  # intact wrong -> ablated right
    correct: np.ndarray  # bool per example

    def __post_init__(self) -> None:  # built once per scored set: one cheap check, the rest is typed by mypy
        if not isinstance(self.correct, np.ndarray):
            raise ArgumentError(f"HeadScore: correct must be np.ndarray, got {reprlib.repr(self.correct)} "
                                f"({type(self.correct).__name__}).")

    @property
    def accuracy(self) -> float:
        return self.n_correct / len(self.correct)

    @classmethod
    def compare(cls, heads: HeadSet, correct: Bool[np.ndarray, " _example"], intact: Bool[np.ndarray, " _example"]
                ) -> HeadScore:
        """Score ``correct`` against the intact model's ``intact`` on the same examples (unequal lengths are this
        method's own ConfigError, so the shared length is not checked by jaxtyping)."""
        if correct.shape != intact.shape:
            raise ConfigError(f"Correctness vectors differ in length: {correct.shape} vs intact {intact.shape}; "
                              "score a head set on the same examples as the intact model.")
        return cls(heads, int(correct.sum()), int(correct.sum()) - int(intact.sum()),
                   int((intact & ~correct).sum()), int((~intact & correct).sum()), correct)


def check_tie_break(tie_break: str) -> str:
    """``tie_break`` when it is one of :data:`celtk.search.registry.TIE_BREAKS`; else a :class:`ConfigError` that
    names the choices."""
    if tie_break not in TIE_BREAKS:
        raise ConfigError(f"Unknown tie-break {tie_break!r}; use 'numeric' (head ids by (layer, head) numbers, L2H0 "
                          "before L10H0; the default) or 'paper' (head ids as strings in lexicographic order, L10H0 "
                          "before L2H0, as the paper writes).")
    return tie_break


def head_ids(heads: HeadSet, tie_break: str = "numeric") -> HeadIds:
    """The last part of the ranking key: the set's head ids, compared position by position. ``numeric``: the heads
    in set order as ``(layer, head)`` pairs (:meth:`celtk.heads.HeadSet.sort_key`); ``paper``: the ids as strings,
    sorted as strings (``("L10H0", "L2H0")``). Sets compared here always have as many heads (fewer heads is an
    earlier part of the key)."""
    if tie_break == "numeric":
        return heads.sort_key()
    check_tie_break(tie_break)
    return tuple(sorted(str(h) for h in heads))


def head_order(heads: HeadSet, gain: int, damage: int, n_correct: int | float | None = None,
               tie_break: str = "numeric") -> RankKey:
    """The paper's ranking key, spelled once (ascending = better): higher gain, lower damage, higher accuracy,
    fewer heads, then the head ids in lexicographic order (:func:`head_ids`): by default each id compared as its
    (layer, head) numbers (:meth:`celtk.heads.HeadSet.sort_key`: ``L2H0`` before ``L10H0``); with
    ``tie_break="paper"`` as strings (``L10H0`` before ``L2H0``), the paper's own order
    (:data:`celtk.search.registry.TIE_BREAKS`).

    Everything that orders heads calls this: :func:`ranking_key` on a :class:`HeadScore`, the racing screen on
    partial counts, the screen document's rows and the circuit comparisons. ``n_correct`` (or the accuracy: only
    its order matters) may be left out where every row is scored on the same examples, since there it moves
    with ``gain``. Called with every measure negated it orders worst first, ties still by ascending head ids."""
    return (-gain, damage, -(gain if n_correct is None else n_correct), len(heads), head_ids(heads, tie_break))


def ranking_key(score: HeadScore, tie_break: str = "numeric") -> RankKey:
    """:func:`head_order` of one scored intervention (ascending = better): higher gain, lower damage, higher
    accuracy, fewer heads, then head ids compared as (layer, head) numbers (``L2H0`` before ``L10H0``), or as
    strings with ``tie_break="paper"``."""
    return head_order(score.heads, score.gain, score.damage, score.n_correct, tie_break)


def rank(scores: Iterable[HeadScore], tie_break: str = "numeric") -> list[HeadScore]:
    """``scores`` sorted best first by :func:`ranking_key` (ties in every measure by ``tie_break``)."""
    check_tie_break(tie_break)
    return sorted(scores, key=lambda score: ranking_key(score, tie_break))
