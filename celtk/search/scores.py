"""One scored intervention and the paper's ranking key (:func:`head_order`, the one spelling): pure numpy, no
torch, so the search logic (:mod:`celtk.search.selection`, :mod:`celtk.search.strategies`,
:mod:`celtk.search.stability`) imports without it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from jaxtyping import Bool

from celtk.errors import ConfigError
from celtk.heads import HeadSet
from celtk.validation import check_fields


@dataclass(frozen=True)
class HeadScore:
    """One intervention scored on the discovery set (counts are numbers of examples)."""

    heads: HeadSet
    n_correct: int
    gain: int  # n_correct - intact n_correct
    damage: int  # intact right -> ablated wrong
    fixes: int  # intact wrong -> ablated right
    correct: np.ndarray  # bool per example

    def __post_init__(self) -> None:
        check_fields(self)

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


def head_order(heads: HeadSet, gain: int, damage: int, n_correct: int | float | None = None) -> tuple:
    """The paper's ranking key, spelled once (ascending = better): higher gain, lower damage, higher accuracy,
    fewer heads, then the head ids in lexicographic order, each id compared as its (layer, head) numbers
    (:meth:`celtk.heads.HeadSet.sort_key`: ``L2H0`` before ``L10H0``).

    Everything that orders heads calls this: :func:`ranking_key` on a :class:`HeadScore`, the racing screen on
    partial counts, the screen document's rows and the circuit comparisons. ``n_correct`` (or the accuracy: only
    its order matters) may be left out where every row is scored on the same examples, since there it moves
    with ``gain``. Called with every measure negated it orders worst first, ties still by ascending head ids."""
    return (-gain, damage, -(gain if n_correct is None else n_correct), len(heads), heads.sort_key())


def ranking_key(score: HeadScore) -> tuple:
    """:func:`head_order` of one scored intervention (ascending = better): higher gain, lower damage, higher
    accuracy, fewer heads, then head ids compared as (layer, head) numbers (``L2H0`` before ``L10H0``)."""
    return head_order(score.heads, score.gain, score.damage, score.n_correct)


def rank(scores: Iterable[HeadScore]) -> list[HeadScore]:
    """``scores`` sorted best first by :func:`ranking_key`."""
    return sorted(scores, key=ranking_key)
