"""One scored intervention and its place in the paper's ranking key (:func:`celtk.heads.head_order`, the one
spelling, re-exported here): pure numpy, no torch, so the search logic (:mod:`celtk.search.selection`,
:mod:`celtk.search.strategies`, :mod:`celtk.search.stability`) imports without it."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from jaxtyping import Bool

from celtk.errors import ArgumentError, ConfigError
from celtk.heads import HeadIds as HeadIds
from celtk.heads import HeadSet
from celtk.heads import RankKey as RankKey
from celtk.heads import check_tie_break as check_tie_break
from celtk.heads import head_ids as head_ids
from celtk.heads import head_order as head_order


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


def ranking_key(score: HeadScore, tie_break: str = "numeric") -> RankKey:
    """:func:`head_order` of one scored intervention (ascending = better): higher gain, lower damage, higher
    accuracy, fewer heads, then head ids compared as (layer, head) numbers (``L2H0`` before ``L10H0``), or as
    strings with ``tie_break="paper"``."""
    return head_order(score.heads, score.gain, score.damage, score.n_correct, tie_break)


def rank(scores: Iterable[HeadScore], tie_break: str = "numeric") -> list[HeadScore]:
    """``scores`` sorted best first by :func:`ranking_key` (ties in every measure by ``tie_break``)."""
    check_tie_break(tie_break)
    return sorted(scores, key=lambda score: ranking_key(score, tie_break))
