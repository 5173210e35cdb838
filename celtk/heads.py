"""Typed attention-head identifiers: :class:`Head` and :class:`HeadSet`.

Heads are parsed once at the boundary (``"L12H3,L20H1"`` or ``"12.3"``) and travel
inside the library as frozen objects, never as strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from celtk.errors import ConfigError, HeadError

_HEAD_RE = re.compile(r"^\s*(?:L(\d+)H(\d+)|(\d+)\.(\d+))\s*$", re.IGNORECASE)


@dataclass(frozen=True, order=True)
class Head:
    """One query head: ``layer`` and ``head`` are 0-based. Orders by (layer, head)."""

    layer: int
    head: int

    def __post_init__(self) -> None:
        if not isinstance(self.layer, int) or not isinstance(self.head, int):
            raise HeadError(f"Head layer and head must be integers, got {self.layer!r}, {self.head!r}.")
        if self.layer < 0 or self.head < 0:
            raise HeadError(f"Head indices are 0-based and non-negative, got layer={self.layer}, head={self.head}.")

    @classmethod
    def parse(cls, text: object) -> Head:
        """Parse ``"L12H3"`` (or ``"12.3"``) into ``Head(12, 3)``."""
        if not isinstance(text, str):
            raise HeadError(f"Head.parse takes a head name such as 'L12H3', got {type(text).__name__} {text!r}; "
                            "build a head from numbers with Head(layer, head).")
        match = _HEAD_RE.match(text)
        if match is None:
            raise HeadError(f"Malformed head {text!r}: write a head as 'L{{layer}}H{{head}}' (e.g. 'L12H3') or "
                            "'layer.head' (e.g. '12.3').")
        groups = [g for g in match.groups() if g is not None]
        return cls(int(groups[0]), int(groups[1]))

    def __str__(self) -> str:
        return f"L{self.layer}H{self.head}"

    def __format__(self, spec: str) -> str:
        """As its name: ``f"{head:>7}"`` pads ``L1H2``."""
        return format(str(self), spec)

    def validate(self, n_layers: int, n_heads: int) -> Head:
        """Raise :class:`HeadError` unless this head exists in an ``n_layers × n_heads`` model."""
        if self.layer >= n_layers or self.head >= n_heads:
            raise HeadError(
                f"Head {self} is out of range for a model with {n_layers} layers × {n_heads} heads: "
                f"layers are 0..{n_layers - 1}, heads are 0..{n_heads - 1}."
            )
        return self


@dataclass(frozen=True)
class HeadSet:
    """An unordered set of heads, stored sorted so equal sets compare and print equally."""

    heads: tuple[Head, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.heads, tuple) or not all(isinstance(h, Head) for h in self.heads):
            raise HeadError(f"HeadSet: heads must be a tuple of Head, got {self.heads!r}; parse text with "
                            "HeadSet.parse('L1H2,L14H8').")
        ordered = tuple(sorted(set(self.heads)))
        if len(ordered) != len(self.heads):
            dup = sorted({str(h) for h in self.heads if self.heads.count(h) > 1})
            raise HeadError(f"Head set names {', '.join(dup)} more than once; list each head once.")
        object.__setattr__(self, "heads", ordered)

    @classmethod
    def of(cls, heads: Iterable[Head | str]) -> HeadSet:
        """Build from heads or head strings."""
        return cls(tuple(h if isinstance(h, Head) else Head.parse(h) for h in heads))

    @classmethod
    def parse(cls, text: object) -> HeadSet:
        """Parse ``"L12H3,L20H1"``; the empty string is the empty set."""
        if not isinstance(text, str):
            raise HeadError(f"HeadSet.parse takes a string such as 'L12H3,L20H1', got {type(text).__name__} "
                            f"{text!r}; build a set from a list of heads or names with HeadSet.of([...]).")
        parts = [p for p in re.split(r"[,\s]+", text.strip()) if p]
        return cls.of(parts)

    def __iter__(self) -> Iterator[Head]:
        return iter(self.heads)

    def __len__(self) -> int:
        return len(self.heads)

    def __getitem__(self, index: int) -> Head:
        """The ``index``-th head in set order (by layer, then head)."""
        return self.heads[index]

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __contains__(self, head: object) -> bool:
        """``Head(1, 2) in heads``; a head name (``"L1H2" in heads``) is parsed first."""
        return (Head.parse(head) if isinstance(head, str) else head) in self.heads

    def __str__(self) -> str:
        return ",".join(str(h) for h in self.heads)

    def __lt__(self, other: HeadSet) -> bool:
        return self.sort_key() < other.sort_key()

    def sort_key(self) -> tuple[tuple[int, int], ...]:
        """The heads as ``(layer, head)`` pairs in set order: sets compare lexicographically over their heads,
        each head by layer, then head index (``L2H0`` before ``L10H0``: numbers, not strings). The last
        tie-break of the ranking key (:func:`celtk.search.scores.ranking_key`)."""
        return tuple((h.layer, h.head) for h in self.heads)

    def names(self) -> list[str]:
        return [str(h) for h in self.heads]

    def union(self, other: HeadSet) -> HeadSet:
        return HeadSet(tuple(set(self.heads) | set(other.heads)))

    def validate(self, n_layers: int, n_heads: int) -> HeadSet:
        for h in self.heads:
            h.validate(n_layers, n_heads)
        return self

    def by_layer(self) -> dict[int, list[int]]:
        """Map layer -> sorted list of head indices in that layer."""
        out: dict[int, list[int]] = {}
        for h in self.heads:
            out.setdefault(h.layer, []).append(h.head)
        return out


def as_head_set(heads: HeadSet | str) -> HeadSet:
    """``heads`` as a :class:`HeadSet`, parsed once where a public function receives it: a set is kept, a string
    is parsed (``"L1H2,L14H8"``; ``""`` is the empty set).

        >>> as_head_set("L14H8, L1H2") == as_head_set(HeadSet.of(["L1H2", "L14H8"]))
        True
    """
    if isinstance(heads, HeadSet):
        return heads
    if isinstance(heads, str):
        return HeadSet.parse(heads)
    raise HeadError(f"Heads must be a HeadSet or a string such as 'L1H2,L14H8', got {heads!r} "
                    f"({type(heads).__name__}).")


def all_heads(n_layers: int, n_heads: int) -> list[Head]:
    """Every head of an ``n_layers × n_heads`` model in (layer, head) order."""
    return [Head(layer, head) for layer in range(n_layers) for head in range(n_heads)]


# -- the paper's ranking key, spelled once: everything that orders heads calls head_order ----------------------
TIE_BREAKS = ("numeric", "paper")
"""How the ranking key's last part orders head ids that tie on everything else (:func:`head_ids`): ``numeric``
(celtk's default) compares each id as its (layer, head) numbers, ``L2H0`` before ``L10H0``; ``paper`` compares the ids
as the strings the paper writes (``L{layer}H{head}``) in lexicographic order, ``L10H0`` before ``L2H0``, as its
Algorithm 1 says."""

HeadIds = tuple[tuple[int, int], ...] | tuple[str, ...]
"""A set's head ids as the ranking key compares them: ``(layer, head)`` pairs (``numeric``) or strings (``paper``)."""
RankKey = tuple[int, int, int | float, int, HeadIds]
""":func:`head_order`'s key: −gain, damage, −accuracy (or −gain), size, head ids (ascending = better)."""


def check_tie_break(tie_break: str) -> str:
    """``tie_break`` when it is one of :data:`TIE_BREAKS`; else a :class:`ConfigError` that
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
    (:data:`TIE_BREAKS`).

    Everything that orders heads calls this: :func:`celtk.search.scores.ranking_key` on a scored set, the racing
    screen on partial counts, the screen document's rows and the circuit comparisons. ``n_correct`` (or the
    accuracy: only its order matters) may be left out where every row is scored on the same examples, since there it
    moves with ``gain``. Called with every measure negated it orders worst first, ties still by ascending head ids."""
    return (-gain, damage, -(gain if n_correct is None else n_correct), len(heads), head_ids(heads, tie_break))
