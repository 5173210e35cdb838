"""Where a screen's time goes: torch.profiler over a slice of the demo's screen (SmolLM2-135M, three-shot
arithmetic:2da, the demo's split), operators by self CPU time, and the matrix products apart from the rest.

    .venv/bin/python benchmarks/profile_screen.py --layers 5 --out runs/bench_profile.json
    .venv/bin/python benchmarks/profile_screen.py --pool L1H2,L2H1,... --k 3 --out runs/bench_profile_select.json

The second profiles select's work instead: every subset of the pool, walked as select walks them (the prefix tree).

The products (``aten::mm``, ``addmm``, ``bmm``: the decoder's projections, attention's two batched products and
the unembedding) are grouped by shape, each group with its FLOPs (2·M·K·N, from the recorded input shapes), its
time and so its rate *in the screen*; then each shape is timed alone (random inputs of the group's most common
size, warm, best of ``--repeats``), and a 2,048² float32 product beside them. Printed and written: the products'
share of the wall time, their rate in the screen against alone, and what the wall time would be if every product
ran at its rate alone and nothing else took time (the products-only floor of this computation on this CPU and
BLAS); and the same calls replayed in the recorded order and sizes with nothing between them (warm random
operands): what the products cost as the screen issues them, apart from the work between. What the profiler cannot
attribute to an operator is Python: the wall time less the operators' self time.
The wall time is taken inside the profiler (leaving it gathers the recorded events, which the screen does not pay);
the same screen unprofiled is timed after it, to show what the profiler adds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import best_of, matmul_gflops  # noqa: E402  (benchmarks/peers.py: the timing every benchmark shares)

PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm")


def product_shape(name: str, shapes: list[list[int]]) -> tuple[int, tuple[str, int, int, int]] | None:
    """``(flops, (op, batch, k, n))`` of one product event, the batch of ``bmm`` kept (1 otherwise); M is left
    out of the key so one projection's calls at different row counts group together."""
    try:
        if name == "aten::mm":
            (m, k), (_, n) = shapes[0], shapes[1]
            return 2 * m * k * n, (name, 1, k, n)
        if name == "aten::addmm":
            (m, k), (_, n) = shapes[1], shapes[2]
            return 2 * m * k * n, (name, 1, k, n)
        (b, m, k), (_, _, n) = shapes[0], shapes[1]
        return 2 * b * m * k * n, (name, b, k, n)
    except (ValueError, IndexError):
        return None


def rows_of(name: str, shapes: list[list[int]]) -> int:
    return shapes[1][0] if name == "aten::addmm" else shapes[0][-2]


def alone(key: tuple[str, int, int, int], m: int, repeats: int) -> float:
    """Seconds of one product of this shape at ``m`` rows, warm, best of ``repeats``."""
    import torch

    name, b, k, n = key
    a = torch.randn(b, m, k) if name == "aten::bmm" else torch.randn(m, k)
    w = torch.randn(b, k, n) if name == "aten::bmm" else torch.randn(n, k)

    def run() -> object:
        return torch.bmm(a, w) if name == "aten::bmm" else torch.nn.functional.linear(a, w)

    return best_of(run, repeats)


def in_sequence(prof: Any, repeats: int) -> float:
    """Seconds of the screen's products replayed in the order and at the sizes the profiler recorded them, nothing
    between them, on warm random operands (one weight, a transposed view as a linear's is, per projection shape;
    one input per size), best of ``repeats``: what the products cost as a sequence of calls, apart from the work the
    screen does between them. (A projection shape's weight is shared by every layer here: warmer than the screen's
    thirty, so the replay is a floor for the products, not their cost with the screen's weights.)"""
    import torch

    calls: list[tuple[str, tuple[tuple[int, ...], ...]]] = []
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        if event.name in PRODUCTS and product_shape(event.name, event.input_shapes) is not None:
            calls.append((event.name, tuple(tuple(s) for s in event.input_shapes[:3])))
    weights: dict[tuple[int, int], Any] = {}  # one per projection shape, whatever the rows: a weight is one tensor
    operands: dict[tuple[str, tuple[tuple[int, ...], ...]], tuple[Any, ...]] = {}
    for name, shapes in calls:
        if (name, shapes) in operands:
            continue
        if name == "aten::bmm":
            operands[name, shapes] = (torch.randn(*shapes[0]), torch.randn(*shapes[1]))
            continue
        (m, k), (_, n) = shapes[-2], shapes[-1]
        if (k, n) not in weights:
            weights[k, n] = torch.randn(n, k).t()
        weight = weights[k, n]
        operands[name, shapes] = (torch.randn(m, k), weight) if name == "aten::mm" else (
            torch.randn(n), torch.randn(m, k), weight)
    ops = {"aten::mm": torch.mm, "aten::addmm": torch.addmm, "aten::bmm": torch.bmm}
    sequence = [(ops[name], operands[name, shapes]) for name, shapes in calls]

    def run() -> None:
        for op, args in sequence:
            op(*args)

    return best_of(run, repeats)


def products(prof: Any, wall: float, repeats: int) -> dict[str, Any]:
    flops: dict[tuple[str, int, int, int], float] = defaultdict(float)
    seconds: dict[tuple[str, int, int, int], float] = defaultdict(float)
    rows: dict[tuple[str, int, int, int], Counter[int]] = defaultdict(Counter)
    for event in prof.events():
        if event.name not in PRODUCTS:
            continue
        shaped = product_shape(event.name, event.input_shapes)
        if shaped is None:
            continue
        f, key = shaped
        flops[key] += f
        seconds[key] += event.self_cpu_time_total / 1e6
        rows[key][rows_of(event.name, event.input_shapes)] += 1
    groups = []
    for key in sorted(flops, key=lambda k: -seconds[k]):
        m = rows[key].most_common(1)[0][0]
        name, b, k, n = key
        rate_alone = 2 * b * m * k * n / alone(key, m, repeats) / 1e9
        groups.append({"op": name, "batch": b, "k": k, "n": n, "rows": m, "calls": sum(rows[key].values()),
                       "gflop": flops[key] / 1e9, "seconds": seconds[key],
                       "rate": flops[key] / max(seconds[key], 1e-9) / 1e9, "rate_alone": rate_alone,
                       "seconds_alone": flops[key] / 1e9 / rate_alone})
    total_f, total_s = sum(flops.values()) / 1e9, sum(seconds.values())
    floor = sum(g["seconds_alone"] for g in groups)
    replayed = in_sequence(prof, max(1, repeats // 5))
    return {"groups": groups, "gflop": total_f, "seconds": total_s, "share_of_wall": total_s / wall,
            "rate": total_f / max(total_s, 1e-9), "seconds_alone": floor, "floor_share_of_wall": floor / wall,
            "seconds_in_sequence": replayed, "rate_in_sequence": total_f / replayed,
            "sequence_share_of_wall": replayed / wall}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100, help="discovery examples (the demo's 100)")
    parser.add_argument("--heldout", type=int, default=300, help="held-out size of the split (the demo's 300)")
    parser.add_argument("--seed", type=int, default=1, help="split seed (the demo's 1)")
    parser.add_argument("--layers", default="5", help="heads of these layers are screened")
    parser.add_argument("--pool", default=None,
                        help="instead of --layers: every subset of these heads of size 2..--k, as select scores them "
                             "(the demo's pool: L1H2,L2H1,L15H3,L14H8,L19H4,L11H8,L20H6,L27H4,L17H2,L13H0)")
    parser.add_argument("--k", type=int, default=3, help="largest subset of --pool (the demo's 3)")
    parser.add_argument("--repeats", type=int, default=10, help="timings of each product shape alone (best kept)")
    parser.add_argument("--out", default="runs/bench_profile.json")
    args = parser.parse_args()
    if args.pool and args.k < 2:
        parser.error(f"--k is the largest subset of --pool, from 2 (select's smallest), got {args.k}")
    import torch
    from torch.profiler import ProfilerActivity, profile

    from celtk import Head, HeadSet, get_task, load_model, make_splits
    from celtk.cli.allocator import keep_freed_memory
    from celtk.evaluation.prompts import prepare
    from celtk.screening.cached import CachedScreener

    kept = keep_freed_memory()  # as the celtk executable allocates: freed tensors' memory reused, not refaulted
    model = load_model("smollm2-135m")
    task = get_task("arithmetic:2da")
    splits = make_splits(task, args.n, args.heldout, seed=args.seed, fewshot=3)
    prepared = prepare(model, task, splits.discovery, splits.shots)
    if args.pool:
        pool = [Head.parse(name) for name in args.pool.split(",")]
        sets = [HeadSet(c) for size in range(2, args.k + 1) for c in combinations(pool, size)]
    else:
        sets = [HeadSet((Head(int(l), h),)) for l in args.layers.split(",") for h in range(model.n_heads)]
    CachedScreener(model, prepared, batch_size=32).run(sets[:1])  # warm-up
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        start = time.perf_counter()  # inside: leaving the profiler gathers its events, seconds the screen did not take
        CachedScreener(model, prepared, batch_size=32).run(sets)
        wall = time.perf_counter() - start
    start = time.perf_counter()
    CachedScreener(model, prepared, batch_size=32).run(sets)
    unprofiled = time.perf_counter() - start
    events = prof.key_averages()
    total_self = sum(e.self_cpu_time_total for e in events) / 1e6
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:15]
    rows = [{"op": e.key, "self_s": e.self_cpu_time_total / 1e6, "share": e.self_cpu_time_total / 1e6 / total_self,
             "calls": e.count} for e in top]
    prods = products(prof, wall, args.repeats)
    result = {"wall_s": wall, "unprofiled_wall_s": unprofiled, "op_self_s": total_self,
              "python_s": max(wall - total_self, 0.0), "top_ops": rows,
              "products": prods, "matmul_2048_gflops": matmul_gflops(), "threads": torch.get_num_threads(),
              "n_sets": len(sets), "n_examples": args.n, "layers": None if args.pool else args.layers,
              "pool": args.pool, "k": args.k if args.pool else None, "keep_freed_memory": kept}
    for r in rows:
        print(f"{r['op']:40} {r['self_s']:8.2f} s {100 * r['share']:5.1f} %  {r['calls']} calls")
    print(f"wall {wall:.1f} s under the profiler ({unprofiled:.1f} s without it); operator self time "
          f"{total_self:.1f} s; between operators (Python) {result['python_s']:.1f} s")
    print("\nproducts by shape (K → N; rows: the most common M)   GFLOP   s in screen   GFLOP/s in screen   alone")
    for g in prods["groups"]:
        shape = f"{g['op'][6:]} {'' if g['batch'] == 1 else str(g['batch']) + '× '}{g['rows']}×{g['k']} → {g['n']}"
        print(f"  {shape:42} {g['gflop']:9.1f} {g['seconds']:10.2f} {g['rate']:14.0f} {g['rate_alone']:14.0f}")
    print(f"products: {prods['seconds']:.1f} s of the {wall:.1f} s wall ({100 * prods['share_of_wall']:.0f} %) at "
          f"{prods['rate']:.0f} GFLOP/s; each shape at its rate alone: {prods['seconds_alone']:.1f} s "
          f"({100 * prods['floor_share_of_wall']:.0f} % of the wall, so at most "
          f"{1 / prods['floor_share_of_wall']:.2f}× faster without changing the arithmetic); the same calls in "
          f"sequence, nothing between: {prods['seconds_in_sequence']:.1f} s at {prods['rate_in_sequence']:.0f} "
          f"GFLOP/s ({100 * prods['sequence_share_of_wall']:.0f} % of the wall); 2048² float32: "
          f"{result['matmul_2048_gflops']:.0f} GFLOP/s, {result['threads']} threads")
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
