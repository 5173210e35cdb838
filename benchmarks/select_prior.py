"""Where screened pools sit, and what that costs stage 2: the prefix tree's layer evaluations for each finished
Algorithm 1 selection's real pool against `celtk plan`'s prior (the pool spread evenly over the lower fraction
``celtk.planning.plan.POOL_DEPTH`` of the layers) and against other fractions.

    .venv/bin/python benchmarks/select_prior.py runs            # every selection.json under runs/

The plan runs before the screen, so it cannot know the pool; select's work depends on the pool's lowest heads
(a subset replays from its lowest head's layer, and the tree shares what subsets share). Per run it prints the
real pool's layer evaluations over the prior's; over all runs the geometric mean and range for each fraction:
a fraction whose geometric mean is near 1 makes the plan unbiased on these runs, and the range is how far one
run's select may fall from it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from itertools import combinations
from pathlib import Path

FRACTIONS = (1.0, 0.85, 0.7, 0.55, 0.4)


def pool_cost(layers: list[int], n_layers: int, k: int) -> int:
    from celtk.heads import Head, HeadSet
    from celtk.screening.prefix_tree import layer_evaluations

    pool = [Head(layer, i) for i, layer in enumerate(layers)]
    return layer_evaluations([HeadSet(c) for s in range(2, k + 1) for c in combinations(pool, s)], n_layers)


def main() -> None:
    from celtk.planning.plan import POOL_DEPTH, prior_pool_layers

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path, nargs="?", default=Path("runs"))
    args = parser.parse_args()
    fractions = sorted({*FRACTIONS, POOL_DEPTH}, reverse=True)
    ratios: dict[float, list[float]] = {f: [] for f in fractions}
    print("| run | layers | pool layers | " + " | ".join(f"real / prior {f:.2f}" for f in fractions) + " |")
    print("|---|---:|---|" + "---:|" * len(fractions))
    for path in sorted(args.root.rglob("selection.json")):
        selection = json.loads(path.read_text())
        screen = path.with_name("screen.json")
        if selection.get("strategy") != "algorithm1" or not selection.get("pool") or not screen.is_file():
            continue
        n_layers = int(json.loads(screen.read_text())["model"]["n_layers"])
        layers = sorted(int(h[1:].split("H")[0]) for h in selection["pool"])
        k = selection.get("k", 3)
        real = pool_cost(layers, n_layers, k)
        cells = []
        for f in fractions:
            ratio = real / pool_cost(prior_pool_layers(n_layers, len(layers), f), n_layers, k)
            ratios[f].append(ratio)
            cells.append(f"{ratio:.2f}")
        print(f"| {path.parent.relative_to(args.root)} | {n_layers} | {', '.join(map(str, layers))} | "
              + " | ".join(cells) + " |")
    print()
    for f in fractions:
        r = ratios[f]
        if r:
            mark = " (the plan's)" if f == POOL_DEPTH else ""
            print(f"lower {f:.2f} of the layers{mark}: geometric mean {statistics.geometric_mean(r):.2f}, "
                  f"range {min(r):.2f}–{max(r):.2f} over {len(r)} runs")


if __name__ == "__main__":
    main()
