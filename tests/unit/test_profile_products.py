"""benchmarks/profile_screen.py's accounting of matrix products: each profiled product's FLOPs come from its
recorded input shapes (2·M·K·N; ``bmm`` times its batch), grouped by shape, with their share of the wall time."""
import importlib.util
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

_PATH = Path(__file__).parents[2] / "benchmarks" / "profile_screen.py"
_SPEC = importlib.util.spec_from_file_location("profile_screen", _PATH)
assert _SPEC and _SPEC.loader
profile_screen = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(profile_screen)


def test_products_count_the_flops_of_each_shape_from_the_recorded_inputs() -> None:
    a, w = torch.randn(7, 5), torch.randn(3, 5)
    x, y = torch.randn(2, 4, 6), torch.randn(2, 6, 8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.mm(a, w.t())
        torch.mm(a[:4], w.t())  # the same projection at fewer rows: one group, its most common rows kept
        torch.mm(a, w.t())
        torch.addmm(torch.zeros(3), a, w.t())
        torch.bmm(x, y)
    got = profile_screen.products(prof, wall=1.0, repeats=1)
    groups = {(g["op"], g["batch"], g["k"], g["n"]): g for g in got["groups"]}
    assert set(groups) == {("aten::mm", 1, 5, 3), ("aten::addmm", 1, 5, 3), ("aten::bmm", 2, 6, 8)}
    mm = groups["aten::mm", 1, 5, 3]
    assert mm["calls"] == 3 and mm["rows"] == 7
    assert mm["gflop"] * 1e9 == 2 * (7 + 4 + 7) * 5 * 3
    assert groups["aten::addmm", 1, 5, 3]["gflop"] * 1e9 == 2 * 7 * 5 * 3
    assert groups["aten::bmm", 2, 6, 8]["gflop"] * 1e9 == 2 * 2 * 4 * 6 * 8
    assert abs(got["gflop"] * 1e9 - 2 * (18 * 15 + 7 * 15 + 2 * 4 * 48)) < 1e-6
    assert got["share_of_wall"] == got["seconds"]  # a wall of one second
    assert got["seconds_alone"] == sum(g["seconds_alone"] for g in got["groups"]) > 0
    assert got["sequence_share_of_wall"] == got["seconds_in_sequence"] > 0


def test_a_projection_through_a_linear_layer_is_counted_once_at_its_rows() -> None:
    layer = torch.nn.Linear(5, 3)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        layer(torch.randn(2, 7, 5))  # F.linear on a 3-D input: one product of 2·7 rows
    got = profile_screen.products(prof, wall=1.0, repeats=1)
    assert [(g["k"], g["n"], g["rows"], g["calls"]) for g in got["groups"]] == [(5, 3, 14, 1)]
    assert got["gflop"] * 1e9 == 2 * 14 * 5 * 3


def test_a_product_with_shapes_it_cannot_read_is_left_out() -> None:
    assert profile_screen.product_shape("aten::mm", []) is None
    assert profile_screen.product_shape("aten::bmm", [[3, 4], [4, 5]]) is None


def test_the_products_are_replayed_in_the_recorded_order_at_the_recorded_sizes(monkeypatch) -> None:
    a, w = torch.randn(7, 5), torch.randn(3, 5)
    x, y = torch.randn(2, 4, 6), torch.randn(2, 6, 8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.bmm(x, y)
        torch.mm(a[:4], w.t())
        torch.addmm(torch.zeros(3), a, w.t())
        torch.mm(a, w.t())
    seen: list[tuple[str, list[tuple[int, ...]]]] = []

    def recorded(name: str) -> object:
        real = getattr(torch, name)

        def call(*args: torch.Tensor) -> torch.Tensor:
            seen.append((name, [tuple(t.shape) for t in args]))
            return real(*args)
        return call

    for name in ("mm", "addmm", "bmm"):
        monkeypatch.setattr(torch, name, recorded(name))
    seconds = profile_screen.in_sequence(prof, repeats=2)
    one = [("bmm", [(2, 4, 6), (2, 6, 8)]), ("mm", [(4, 5), (5, 3)]), ("addmm", [(3,), (7, 5), (5, 3)]),
           ("mm", [(7, 5), (5, 3)])]
    assert seen == one * 3  # a warm-up, then each of the two timed replays: the four calls in the profiled order
    assert seconds > 0
