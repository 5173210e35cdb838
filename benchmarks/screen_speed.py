"""The cached screener against the plain hook path, side by side in one run.

Same heads (all heads of three layers: shallow, middle, deep), same examples
(three-shot arithmetic:2da), SmolLM2-135M float32; per-head results must be identical
before times are compared. Prints and writes JSON.

    .venv/bin/python benchmarks/screen_speed.py --n 48 --out runs/bench_screen.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=48)
    parser.add_argument("--layers", default="0,14,29")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", default="runs/bench_screen.json")
    args = parser.parse_args()

    from celtk import Head, HeadSet, get_task, load_model, make_splits
    from celtk.evaluation.prompts import prepare
    from celtk.screening.cached import CachedScreener, screen_plain

    model = load_model("smollm2-135m")
    task = get_task("arithmetic:2da")
    splits = make_splits(task, args.n, 0, seed=1, fewshot=3)
    prepared = prepare(model, task, splits.discovery, splits.shots)
    layers = [int(x) for x in args.layers.split(",")]
    sets = [HeadSet((Head(layer, h),)) for layer in layers for h in range(model.n_heads)]

    timings = {}
    results = {}
    for name, run in (
        ("plain", lambda: screen_plain(model, prepared, sets, batch_size=args.batch_size)),
        ("cached", lambda: CachedScreener(model, prepared, batch_size=args.batch_size, share_prefix=False).run(sets)),
        ("cached+prefix", lambda: CachedScreener(model, prepared, batch_size=args.batch_size).run(sets)),
    ):
        start = time.perf_counter()
        _, results[name] = run()
        timings[name] = time.perf_counter() - start
    identical = all(np.array_equal(results[k][s].correct, results["plain"][s].correct) for k in results for s in sets)
    max_diff = max(np.abs(np.array([e.logprob for e in results[k][s].examples]) -
                          np.array([e.logprob for e in results["plain"][s].examples])).max()
                   for k in results for s in sets)
    report = {"n_examples": args.n, "heads": len(sets), "layers": layers, "threads": torch.get_num_threads(),
              "seconds": timings, "per_head_seconds": {k: v / len(sets) for k, v in timings.items()},
              "speedup_vs_plain": {k: timings["plain"] / v for k, v in timings.items()},
              "identical_correctness": identical, "max_abs_logprob_diff": float(max_diff)}
    print(json.dumps(report, indent=1))
    with open(args.out, "w") as handle:
        json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()
