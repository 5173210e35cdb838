"""Where a screen's time goes: torch.profiler over a small screen (SmolLM2-135M, three-shot
arithmetic:2da), operators by self CPU time, and the share spent outside operators (Python).

    .venv/bin/python benchmarks/profile_screen.py --n 32 --layers 10,20 --out runs/bench_profile.json
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--layers", default="10,20")
    parser.add_argument("--out", default="runs/bench_profile.json")
    args = parser.parse_args()
    from torch.profiler import ProfilerActivity, profile

    from celtk import Head, HeadSet, get_task, load_model, make_splits
    from celtk.evaluation.prompts import prepare
    from celtk.screening.cached import CachedScreener

    model = load_model("smollm2-135m")
    task = get_task("arithmetic:2da")
    splits = make_splits(task, args.n, 0, seed=1, fewshot=3)
    prepared = prepare(model, task, splits.discovery, splits.shots)
    sets = [HeadSet((Head(int(l), h),)) for l in args.layers.split(",") for h in range(model.n_heads)]
    CachedScreener(model, prepared, batch_size=32).run(sets[:1])  # warm-up
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        CachedScreener(model, prepared, batch_size=32).run(sets)
    wall = time.perf_counter() - start
    events = prof.key_averages()
    total_self = sum(e.self_cpu_time_total for e in events) / 1e6
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:15]
    rows = [{"op": e.key, "self_s": e.self_cpu_time_total / 1e6, "share": e.self_cpu_time_total / 1e6 / total_self,
             "calls": e.count} for e in top]
    result = {"wall_s": wall, "op_self_s": total_self, "top_ops": rows, "n_sets": len(sets), "n_examples": args.n}
    for r in rows:
        print(f"{r['op']:40} {r['self_s']:8.2f} s {100 * r['share']:5.1f} %  {r['calls']} calls")
    print(f"wall {wall:.1f} s; operator self time {total_self:.1f} s (profiler overhead included)")
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
