import pytest

from celtk.errors import CeltkError, HeadError
from celtk.heads import Head, HeadSet, all_heads


def test_parse_and_print_roundtrip():
    assert Head.parse("L12H3") == Head(12, 3)
    assert Head.parse("12.3") == Head(12, 3)
    assert Head.parse(" l2h0 ") == Head(2, 0)
    assert str(Head(12, 3)) == "L12H3"


def test_headset_is_sorted_and_order_free():
    a = HeadSet.parse("L20H1,L12H3")
    b = HeadSet.parse("L12H3, 20.1")
    assert a == b
    assert str(a) == "L12H3,L20H1"
    assert HeadSet.parse("") == HeadSet()
    assert len(HeadSet.parse("")) == 0


@pytest.mark.parametrize("text", ["L12", "H3", "L1H", "12-3", "layer12head3", "L-1H2", "1.2.3"])
def test_malformed_head_names_format(text):
    with pytest.raises(HeadError, match="L\\{layer\\}H\\{head\\}"):
        Head.parse(text)


def test_duplicate_head_rejected():
    with pytest.raises(HeadError, match="L1H1 more than once"):
        HeadSet.parse("L1H1,1.1")


def test_validate_names_ranges():
    with pytest.raises(HeadError, match=r"layers are 0\.\.29, heads are 0\.\.8"):
        HeadSet.parse("L30H0").validate(30, 9)
    with pytest.raises(CeltkError, match="L2H9"):
        Head(2, 9).validate(30, 9)
    assert Head(29, 8).validate(30, 9) == Head(29, 8)


def test_ordering_and_all_heads():
    hs = all_heads(2, 3)
    assert hs == sorted(hs)
    assert hs[0] == Head(0, 0) and hs[-1] == Head(1, 2) and len(hs) == 6
    assert HeadSet.parse("L0H1") < HeadSet.parse("L0H2")
    assert HeadSet.parse("L0H1,L5H0") < HeadSet.parse("L0H2")


def test_the_last_tie_break_orders_head_ids_by_their_numbers_as_documented():
    """ranking_key's last key: head ids lexicographically, each by (layer, head) numbers: L2H0 before L10H0
    (as strings "L10H0" < "L2H0"); its docstring and HeadSet.sort_key's say so."""
    import numpy as np

    from celtk.search.scores import HeadScore, rank, ranking_key

    intact = np.array([True, False])
    tied = [HeadScore.compare(HeadSet.parse(h), intact.copy(), intact) for h in ("L10H0", "L2H0", "L2H0,L10H1", "L2H1")]
    assert [str(s.heads) for s in rank(tied)] == ["L2H0", "L2H1", "L10H0", "L2H0,L10H1"]
    assert "L2H0`` before ``L10H0" in (ranking_key.__doc__ or "") and "L10H0" in (HeadSet.sort_key.__doc__ or "")


def test_as_head_set_parses_a_string_keeps_a_set_and_names_anything_else():
    import inspect

    from celtk.heads import as_head_set

    given = HeadSet.parse("L1H2")
    assert as_head_set(given) is given
    assert as_head_set("L14H8, 1.2") == HeadSet((Head(1, 2), Head(14, 8)))
    assert as_head_set("") == HeadSet()
    unchecked = inspect.unwrap(as_head_set)  # as users call it: past the suite's own runtime type checker
    with pytest.raises(HeadError, match=r"a HeadSet or a string such as 'L1H2,L14H8', got \['L1H2'\] \(list\)"):
        unchecked(["L1H2"])


def test_every_public_function_that_takes_heads_takes_a_head_set_or_a_string():
    """One type for heads at the boundary: ``HeadSet | str`` (``| None`` where None means every head),
    over the public surface: ``dir(celtk)``, ``celtk.run``'s exports, the probe functions and the handle's methods."""
    import inspect

    import celtk
    import celtk.probe
    import celtk.run

    functions = {f"celtk.{n}": getattr(celtk, n) for n in dir(celtk)}
    functions |= {f"celtk.run.{n}": getattr(celtk.run, n) for n in celtk.run.__all__}
    functions |= {f"celtk.probe.{n}": f for n, f in vars(celtk.probe).items()
                  if inspect.isfunction(f) and f.__module__ == "celtk.probe" and not n.startswith("_")}
    functions |= {f"celtk.Run.{n}": f for n, f in vars(celtk.Run).items()
                  if inspect.isfunction(f) and not n.startswith("_")}
    found = {}
    for name, f in functions.items():
        if callable(f) and not inspect.isclass(f) and not inspect.ismodule(f):
            parameter = inspect.signature(inspect.unwrap(f)).parameters.get("heads")
            if parameter is not None:
                found[name] = parameter.annotation
    assert {"celtk.ablate", "celtk.evaluate", "celtk.export_ablated", "celtk.probe.direct_logit_attribution",
            "celtk.probe.effect", "celtk.run.run_eval", "celtk.Run.eval"} <= set(found)
    odd = {name: a for name, a in found.items() if a not in ("HeadSet | str", "HeadSet | str | None")}
    assert not odd, odd


def test_heads_format_as_their_names_and_a_set_indexes_in_set_order():
    heads = HeadSet.parse("L14H8,L1H2")
    assert f"{heads[0]:>6}|{heads[1]}|{heads:<11}|" == "  L1H2|L14H8|L1H2,L14H8 |"
    assert heads[-1] == Head(14, 8) and list(heads) == [heads[0], heads[1]]


@pytest.mark.parametrize("value", [None, 5, ["L0H0"], b"L0H0"])
def test_parse_of_a_non_string_is_a_head_error_naming_the_type_and_the_right_call(value):
    with pytest.raises(HeadError, match=r"HeadSet\.parse takes a string.*HeadSet\.of"):
        HeadSet.parse(value)
    with pytest.raises(HeadError, match=r"Head\.parse takes a head name.*Head\(layer, head\)"):
        Head.parse(value)
