"""The float32 rate of a model's own projection shapes, each timed alone in a warm loop, beside the shape the stage
bounds are measured on (``benchmarks/stage_bounds.py``: rows × d_model into the MLP width): how much of a replay's
shortfall from that rate its smaller products explain.

    .venv/bin/python benchmarks/linear_shapes.py --model smollm2-135m --rows 448,896,2048 --out runs/linear_shapes.jsonl

Each product is ``torch.nn.functional.linear`` of ``rows × in`` by an ``out × in`` weight, the best of ``--repeats``
after one warm-up: weights and inputs stay in cache between repeats, which a replay walking its layers does not get,
so these rates are the products' best case. The reference shape is timed the same way (one call per repeat), beside
the others. ``--out FILE`` appends the run's rates to FILE as one JSON line, so several runs can be compared.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_speed import gemm_rate  # noqa: E402  (benchmarks/replay_speed.py: the same timing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", default="448,896,2048", help="comma-separated row counts (tokens per product)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None, help="append this run's rates to FILE (JSON lines)")
    args = parser.parse_args()
    from celtk.models import load_model

    model = load_model(args.model)
    d, heads, kv, mlp = (model.d_model, model.n_heads * model.d_head, model.n_kv_heads * model.d_head,
                         model.arch.d_mlp)
    shapes = {f"q {d} → {heads}": (d, heads), f"k, v {d} → {kv}": (d, kv), f"o {heads} → {d}": (heads, d),
              f"gate, up {d} → {mlp}": (d, mlp), f"down {mlp} → {d}": (mlp, d)}
    print(f"{model.name}, {torch.get_num_threads()} threads; GFLOP/s, best of {args.repeats}; the reference shape "
          f"(stage_bounds.py's) is {d} → {mlp} at 2048 rows")
    print("| rows | " + " | ".join(shapes) + " |")
    print("|---:|" + "---:|" * len(shapes))
    table = {}
    for rows in (int(r) for r in args.rows.split(",")):
        rates = [gemm_rate(rows, i, o, args.repeats) for i, o in shapes.values()]
        table[rows] = dict(zip(shapes, (round(r, 1) for r in rates), strict=True))
        print(f"| {rows} | " + " | ".join(f"{r:.0f}" for r in rates) + " |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            f.write(json.dumps({"model": model.name, "threads": torch.get_num_threads(), "repeats": args.repeats,
                                "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "rates": table}) + "\n")


if __name__ == "__main__":
    main()
