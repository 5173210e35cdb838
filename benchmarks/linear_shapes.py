"""The float32 rate of a model's own projection shapes, each timed alone in a warm loop, beside the shape the stage
bounds are measured on (``benchmarks/stage_bounds.py``: rows × d_model into the MLP width): how much of a replay's
shortfall from that rate its smaller products explain.

    .venv/bin/python benchmarks/linear_shapes.py --model smollm2-135m --rows 448,896,2048

Each product is ``torch.nn.functional.linear`` of ``rows × in`` by an ``out × in`` weight, the best of ``--repeats``
after one warm-up: weights and inputs stay in cache between repeats, which a replay walking its layers does not get,
so these rates are the products' best case.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_speed import gemm_rate  # noqa: E402  (benchmarks/replay_speed.py: the same timing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", default="448,896,2048", help="comma-separated row counts (tokens per product)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    from celtk.models import load_model

    model = load_model(args.model)
    d, kv, mlp = model.d_model, model.n_kv_heads * model.d_head, model.arch.d_mlp
    shapes = {f"q, o {d} → {d}": (d, d), f"k, v {d} → {kv}": (d, kv), f"gate, up {d} → {mlp}": (d, mlp),
              f"down {mlp} → {d}": (mlp, d)}
    print(f"{model.name}, {torch.get_num_threads()} threads; GFLOP/s, best of {args.repeats}")
    print("| rows | " + " | ".join(shapes) + " |")
    print("|---:|" + "---:|" * len(shapes))
    for rows in (int(r) for r in args.rows.split(",")):
        rates = [gemm_rate(rows, i, o, args.repeats) for i, o in shapes.values()]
        print(f"| {rows} | " + " | ".join(f"{r:.0f}" for r in rates) + " |")


if __name__ == "__main__":
    main()
