"""How the screen's time and peak memory grow with discovery size, prompt length (shots) and the
number of heads; and bfloat16 against float32 (speed and per-example agreement).

Each configuration runs in its own process so its peak resident memory is its own. Times are
from one run on a possibly busy machine: read the ratios between rows of one table.

    .venv/bin/python benchmarks/scaling.py --out runs/bench_scaling.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import numpy as np
from celtk import Head, HeadSet, get_task, load_model, make_splits
from celtk.evaluation.prompts import prepare
from celtk.screening.cached import CachedScreener
cfg = json.loads(sys.argv[1])
model = load_model("smollm2-135m", dtype=cfg["dtype"])
task = get_task("arithmetic:2da")
splits = make_splits(task, cfg["n"], 0, seed=1, fewshot=cfg["fewshot"])
prepared = prepare(model, task, splits.discovery, splits.shots)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
sets = [HeadSet((Head(l, h),)) for l in cfg["layers"] for h in range(model.n_heads)]
start = time.perf_counter()
intact, results = CachedScreener(model, prepared, batch_size=32).run(sets)
seconds = time.perf_counter() - start
tokens = float(np.mean([len(r.context) + len(r.continuation) for r in prepared.requests]))
print(json.dumps({**cfg, "seconds": seconds, "heads": len(sets), "mean_tokens": tokens,
                  "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "rss_before_screen_gib": before / 2**20,
                  "correct": {str(s): results[s].correct.astype(int).tolist() for s in sets},
                  "intact": intact.correct.astype(int).tolist()}))
"""


def run(cfg: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="runs/bench_scaling.json")
    args = parser.parse_args()
    base = {"n": 50, "fewshot": 3, "layers": [15], "dtype": "float32"}
    tables = {"discovery": [run({**base, "n": n}) for n in (25, 50, 100)],
              "prompt": [run({**base, "fewshot": k}) for k in (0, 1, 3, 6)],
              "heads": [run({**base, "layers": list(range(15, 15 + m))}) for m in (1, 2, 4)]}
    fp32 = run({**base, "layers": [0, 14, 29]})
    bf16 = run({**base, "layers": [0, 14, 29], "dtype": "bfloat16"})
    agree = [np.mean(np.array(fp32["correct"][h]) == np.array(bf16["correct"][h])) for h in fp32["correct"]]
    tables["dtype"] = [fp32, bf16]
    summary = {name: [{k: v for k, v in row.items() if k not in ("correct", "intact")} for row in rows]
               for name, rows in tables.items()}
    summary["bfloat16"] = {"speedup": fp32["seconds"] / bf16["seconds"],
                           "per_example_agreement_mean": float(np.mean(agree)),
                           "per_example_agreement_min": float(np.min(agree)),
                           "intact_agreement": float(np.mean(np.array(fp32["intact"]) == np.array(bf16["intact"]))),
                           "heads_with_identical_outcomes": int(sum(a == 1.0 for a in agree)), "heads": len(agree)}
    print(json.dumps(summary, indent=1))
    with open(args.out, "w") as handle:
        json.dump(summary, handle, indent=1)


if __name__ == "__main__":
    import numpy as np

    main()
