"""How the cached screener walks its prefix tree (:mod:`celtk.screening.prefix_tree`) over the layers: the nodes
that branch at a layer run together as one :class:`Group`, copies of a batch in one pass (row ``b·g + j`` of a pass
over a batch of ``batch`` examples is example ``b`` under node ``j``: einops ``(batch g)``), each copy with its own
heads ablated; after each layer the children that branch there split off with their parents' rows, depth first, so
one group per depth is held (:func:`walk`). Which rows share a forward changes; the arithmetic of a row does not."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from einops import repeat
from jaxtyping import Bool, Float
from torch import Tensor

from celtk.ablation_kinds import RowSpec
from celtk.heads import HeadSet
from celtk.models import Model
from celtk.screening.prefix_tree import Node

# how a group of tree nodes turns its boolean masks (and its size) into what the screener's layer takes
Specs = Callable[[dict[int, Bool[Tensor, "rows_g head_index"]], int],
                 dict[int, "Bool[Tensor, 'rows_g head_index'] | RowSpec"]]


@dataclass
class Group:
    """Tree nodes replayed together: row ``b·g + j`` of a pass is example ``b`` under ``nodes[j]``."""

    nodes: list[Node]
    key: tuple[int, ...]  # the nodes' preorder indices: names the group in the prefix's keys/values
    # row_masks of the nodes' heads, as the screener's ablation kind says
    masks: dict[int, Bool[Tensor, "rows_g head_index"] | RowSpec]
    rows: int
    specs: Specs  # how a group's boolean masks become what _layer takes (for its batch and width)


def row_masks(model: Model, sets: Sequence[HeadSet], rows: int) -> dict[int, Bool[Tensor, "rows_g head_index"]]:
    """Per layer, a ``[(batch g), head_index]`` mask with ``batch = rows``: row b·g + j ablates ``sets[j]``."""
    per_set: dict[int, Tensor] = {}
    for j, heads in enumerate(sets):
        for head in heads:
            per_set.setdefault(head.layer, torch.zeros(len(sets), model.n_heads, dtype=torch.bool))[j, head.head] = True
    return {layer: repeat(mask, "g head_index -> (batch g) head_index", batch=rows) for layer, mask in per_set.items()}


def group_of(model: Model, nodes: list[Node], rows: int, specs: Specs) -> Group:
    """``nodes`` as one group of ``rows`` examples each, their heads' masks made by ``specs``."""
    masks = specs(row_masks(model, [n.heads for n in nodes], rows), len(nodes))
    return Group(nodes, tuple(n.index for n in nodes), masks, rows, specs)


def walk(model: Model, group: Group, hidden: Float[Tensor, "rows_g pos d_model"], layer: int, per: int,
         step: Callable[[Group, Float[Tensor, "rows_g pos d_model"], int], Float[Tensor, "rows_g pos d_model"]],
         finish: Callable[[Group, Float[Tensor, "rows_g pos d_model"]], None]) -> None:
    """Run ``group`` (tree nodes whose states, ``(rows g)`` rows, are at the input of ``layer``, the
    layer each branches at) through the layers each needs, and its subtrees depth first.

    After each layer ``l`` the children that branch at ``l + 1`` split off, ``per`` to a group,
    with their parents' rows; a node no longer needed leaves the group, or hands its rows to
    one of its children (so a chain of single children does not deepen the recursion). Held at
    once: one group per depth. ``step(group, hidden, l)`` runs layer ``l``; ``finish`` scores a
    group after the last layer, where only requested sets remain."""
    n_layers = model.n_layers
    while True:
        hidden = step(group, hidden, layer)
        layer += 1
        if layer == n_layers:
            finish(group, hidden)
            return
        kids = [(j, kid) for j, node in enumerate(group.nodes) for kid in node.children.get(layer, ())]
        stay: list[tuple[int, Node]] = []
        for j, node in enumerate(group.nodes):
            if node.end > layer:
                stay.append((j, node))
            else:
                heir = next((kid for kid in kids if kid[0] == j), None)
                if heir is not None:  # its last use: a child takes its rows
                    kids.remove(heir)
                    stay.append(heir)
        for start in range(0, len(kids), per):
            chunk = kids[start:start + per]
            walk(model, group_of(model, [kid for _, kid in chunk], group.rows, group.specs),
                 rows_of(hidden, group, [j for j, _ in chunk]), layer, per, step, finish)
        if not stay:
            return
        if [node for _, node in stay] != group.nodes:
            hidden = rows_of(hidden, group, [j for j, _ in stay])
            group = group_of(model, [node for _, node in stay], group.rows, group.specs)


def rows_of(hidden: Float[Tensor, "rows_g pos d_model"], group: Group, members: list[int]
            ) -> Float[Tensor, "rows_m pos d_model"]:
    """The rows of ``group``'s members ``members``, in ``(batch g)`` layout."""
    per_node = torch.unflatten(hidden, 0, (group.rows, len(group.nodes)))
    return per_node[:, members].reshape(group.rows * len(members), *hidden.shape[1:])
