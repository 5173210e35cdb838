"""The prefix tree of head sets (celtk.screening.prefix_tree), without a model: which sets share which node,
where each node branches and until when it is needed, and the layer counts it saves."""

from itertools import combinations

from celtk.heads import Head, HeadSet
from celtk.screening.prefix_tree import flat_layer_evaluations, layer_evaluations, prefix_tree


def _sets(*texts: str) -> list[HeadSet]:
    return [HeadSet.parse(t) for t in texts]


def test_sets_sharing_lower_heads_share_nodes_and_heads_of_one_layer_form_one_group():
    sets = _sets("L1H2,L4H0", "L1H2,L4H1", "L1H2,L1H3", "L1H2,L1H3,L5H0", "L1H2", "L3H0", "")
    root = prefix_tree(sets, n_layers=6)
    assert list(root.children) == [0, 1, 3] and root.end == 3  # the intact state branches at 0 (null), 1 and 3
    null, = root.children[0]
    assert null.set == HeadSet() and null.heads == HeadSet() and (null.layer, null.end) == (0, 6)
    l1h2, l1h2_l1h3 = root.children[1]  # one layer's heads are one group: {L1H2,L1H3} is not below {L1H2}
    assert (l1h2.heads, l1h2_l1h3.heads) == (HeadSet.parse("L1H2"), HeadSet.parse("L1H2,L1H3"))
    assert l1h2.set == HeadSet.parse("L1H2") and l1h2.end == 6  # a requested set runs through the last layer
    assert [n.set for n in l1h2.children[4]] == _sets("L1H2,L4H0", "L1H2,L4H1")  # both extend L1H2's state
    assert l1h2_l1h3.set is not None and list(l1h2_l1h3.children) == [5]
    only_a_prefix = prefix_tree(_sets("L1H2,L4H0", "L1H2,L2H1,L5H0"), 6).children[1][0]
    assert only_a_prefix.set is None and only_a_prefix.end == 4  # needed until its last child branches
    assert sorted(root.sets(), key=HeadSet.sort_key) == sorted(sets, key=HeadSet.sort_key)
    assert [n.index for n in root.nodes()] == list(range(len(list(root.nodes()))))


def test_duplicates_are_one_node():
    root = prefix_tree(_sets("L2H0,L0H1", "L0H1,L2H0"), 3)
    assert list(root.sets()) == _sets("L0H1,L2H0") and len(list(root.nodes())) == 3


def test_the_demo_pools_count_halves_the_layers():
    # the demo's pool: heads in layers 1, 2, 11, 13, 14, 15, 17, 19, 20, 27 of 30, every subset of 2 or 3
    pool = [Head(layer, 0) for layer in (1, 2, 11, 13, 14, 15, 17, 19, 20, 27)]
    sets = [HeadSet(c) for size in (2, 3) for c in combinations(pool, size)]
    assert flat_layer_evaluations(sets, 30) == 3713
    assert layer_evaluations(sets, 30) == 1779


def test_single_heads_share_nothing_but_the_intact_state():
    sets = [HeadSet((Head(layer, head),)) for layer in range(4) for head in range(2)]
    assert layer_evaluations(sets, 4) == flat_layer_evaluations(sets, 4) == 2 * (4 + 3 + 2 + 1)
