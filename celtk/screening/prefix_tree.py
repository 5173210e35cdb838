"""The prefix tree of head sets that the cached screener walks, so that sets sharing their lower
heads share the layers those heads fix (stage 2's subsets, greedy and beam rounds, LASSO knockouts).

Zeroing a head in layer ``l`` changes the residual stream from layer ``l``'s output on, so the state
at the input of layer ``m`` depends only on a set's heads below ``m``. Group each set's heads by
layer, in layer order: ``{L1H2, L14H8, L14H9}`` is ``(1: H2), (14: H8, H9)``. Every leading run of
those groups is a :class:`Node`; the sets that extend a node share its state. A node *branches* at
the layer of its last group (its parent's state at that layer's input, the group's heads zeroed as
the layer runs) and is needed up to the layer its last child branches at, or through the last layer
when it is itself a requested set. The empty set (the null ablation) is a node branching at layer 0
with nothing zeroed. Scoring from the tree changes which rows share a forward, never the arithmetic
applied to a row.

On the demo's pool (heads in layers 1, 2, 11, 13, 14, 15, 17, 19, 20, 27 of 30; every subset of 2 or
3) the 165 sets replayed each from their lowest layer take 3,713 layer evaluations per example, the
tree 1,779 (:func:`layer_evaluations`, :func:`flat_layer_evaluations`). Pure Python: the planner
counts with it without torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from celtk.heads import Head, HeadSet


@dataclass(eq=False)
class Node:
    """One leading run of layer groups shared by some requested sets.

    Attributes:
        heads: every head of the run (what a row of this node has zeroed so far).
        layer: the layer of its last group, where it branches from its parent (``-1``: the root,
            the intact model).
        children: the nodes that extend it, by the layer they branch at, in layer order; each
            layer's list in head order.
        set: the requested set this run completes, or ``None`` when it only leads to others.
        end: the last layer whose input it is needed at: its state runs layers ``layer .. end-1``.
        index: its place in preorder (a stable name for a group of nodes).
    """

    heads: HeadSet
    layer: int
    children: dict[int, list[Node]] = field(default_factory=dict)
    set: HeadSet | None = None
    end: int = 0
    index: int = 0

    def nodes(self) -> Iterator[Node]:
        """This node and every node below it, in preorder."""
        yield self
        for kids in self.children.values():
            for kid in kids:
                yield from kid.nodes()

    def sets(self) -> Iterator[HeadSet]:
        """The requested sets in this subtree, in preorder."""
        return (node.set for node in self.nodes() if node.set is not None)


def prefix_tree(sets: Iterable[HeadSet], n_layers: int) -> Node:
    """The tree of ``sets`` (duplicates scored once) in a model of ``n_layers`` layers; returns its
    root, whose children are the nodes the intact state branches into, by layer."""
    root = Node(HeadSet(), -1)
    nodes: dict[tuple[tuple[int, tuple[int, ...]], ...], Node] = {(): root}  # (layer, heads) groups -> node
    for heads in dict.fromkeys(sets):
        groups = tuple((layer, tuple(hs)) for layer, hs in heads.by_layer().items()) or ((0, ()),)
        parent = root
        for depth in range(1, len(groups) + 1):
            key = groups[:depth]
            node = nodes.get(key)
            if node is None:
                node = nodes[key] = Node(HeadSet(tuple(Head(l, h) for l, hs in key for h in hs)), key[-1][0])
                parent.children.setdefault(node.layer, []).append(node)
            parent = node
        parent.set = heads
    _finish(root, n_layers)
    for index, node in enumerate(root.nodes()):
        node.index = index
    return root


def _finish(node: Node, n_layers: int) -> None:
    """Order ``node``'s children by layer and heads, and set ``end`` bottom-up."""
    node.children = {layer: sorted(node.children[layer], key=lambda n: n.heads.sort_key())
                     for layer in sorted(node.children)}
    for kids in node.children.values():
        for kid in kids:
            _finish(kid, n_layers)
    node.end = n_layers if node.set is not None else max(node.children, default=0)


def layer_evaluations(sets: Iterable[HeadSet], n_layers: int) -> int:
    """Decoder layers the tree runs per example to score ``sets`` (the intact state's own layers,
    run once for all sets, left out)."""
    root = prefix_tree(sets, n_layers)
    return sum(node.end - node.layer for node in root.nodes() if node is not root)


def flat_layer_evaluations(sets: Iterable[HeadSet], n_layers: int) -> int:
    """The same count when each set replays on its own from its lowest layer (no sharing)."""
    return sum(n_layers - (heads.heads[0].layer if len(heads) else 0) for heads in dict.fromkeys(sets))
