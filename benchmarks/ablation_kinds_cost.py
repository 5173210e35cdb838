"""What a screen costs under each ablation kind, side by side in one process: the cached screener on the
demo's discovery set (SmolLM2-135M, arithmetic:2da, three shots, seed 1) scoring every head of a few layers
under zero, mean, resample and scale ablation, in alternation (zero, mean, resample, scale, zero, …) after
a warm-up, with the same per-example verdicts required on every repeat. Building the mean and resample
values (one intact pass over the discovery set, recording z) is timed apart, once per kind: a screen pays it
once, whatever the number of heads.

    .venv/bin/python benchmarks/ablation_kinds_cost.py --layers 2,15,28 --repeats 2 --out runs/bench_kinds.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", default="2,15,28")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--kinds", default="zero,mean,resample,scale:0.5")
    parser.add_argument("--n", type=int, default=100, help="discovery examples (the demo's 100)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    import torch

    from celtk.heads import HeadSet, all_heads
    from celtk.run import RunConfig
    from celtk.run.session import Session

    torch.set_grad_enabled(False)
    session = Session.open(RunConfig(discovery=args.n, heldout=300, seed=1, fewshot=3))
    layers = [int(x) for x in args.layers.split(",")]
    sets = [HeadSet((h,)) for h in all_heads(session.model.n_layers, session.model.n_heads) if h.layer in layers]
    kinds = args.kinds.split(",")
    build = {}
    for kind in kinds:
        start = time.perf_counter()
        session.ablation(kind)
        build[kind] = time.perf_counter() - start
    prepared = session.prepared("discovery")
    seconds: dict[str, list[float]] = {k: [] for k in kinds}
    verdicts: dict[str, dict] = {}
    for repeat in range(args.repeats + 1):  # the first round warms up and is not counted
        for kind in kinds:
            screener = session.screener_on(prepared, session.ablation(kind))
            start = time.perf_counter()
            _, results = screener.run(sets)
            took = time.perf_counter() - start
            now = {str(s): r.correct.tobytes() for s, r in results.items()}
            if kind in verdicts and verdicts[kind] != now:
                raise SystemExit(f"{kind}: verdicts differ between repeats")
            verdicts[kind] = now
            if repeat:
                seconds[kind].append(took)
    zero, fastest = float(np.median(seconds[kinds[0]])), min(seconds[kinds[0]])
    summary = {"model": session.model.name, "n_discovery": args.n, "layers": layers, "heads": len(sets),
               "replay": session.replay(), "repeats": args.repeats, "threads": torch.get_num_threads(),
               "kinds": {k: {"median_seconds": float(np.median(v)), "min_seconds": min(v), "seconds": v,
                             "seconds_per_head": float(np.median(v)) / len(sets),
                             "median_ratio": float(np.median(v)) / zero, "min_ratio": min(v) / fastest,
                             "build_seconds": build[k]}
                         for k, v in seconds.items()}}
    for kind, row in summary["kinds"].items():  # on a shared machine the fastest of the repeats is the least disturbed
        print(f"{kind:>12}: median {row['median_seconds']:6.1f} s, fastest {row['min_seconds']:6.1f} s for {len(sets)} "
              f"heads; × {row['median_ratio']:.3f} (median), × {row['min_ratio']:.3f} (fastest) of {kinds[0]}; "
              f"values built once in {row['build_seconds']:.1f} s")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(summary, handle, indent=1)


if __name__ == "__main__":
    main()
