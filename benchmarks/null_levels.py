"""Does each calibration null's p-value hold its level? The false-positive rates the docs show.

Simulates searches with no effect anywhere (:mod:`celtk.search.null_levels`) at SmolLM2's scale (270 heads,
100 discovery examples, Algorithm 1 with p = 10, k = 3) under three models of how a set's outcomes relate to its
heads' (independent; additive margin shifts; additive with margins away from zero), and counts how often each
null's p-value is at most α = 0.05. Writes ``docs/null-levels.json`` and the table between the markers in
``docs/selection-holds.md``:

    nice .venv/bin/python benchmarks/null_levels.py                 # 1,000 searches per model, 19 draws each
    nice .venv/bin/python benchmarks/null_levels.py --sims 200      # a quicker look; writes nothing with --dry-run

Deterministic: the same arguments give the same table. ``tests/integration/test_calibrate.py`` checks a
smaller run (300 searches per model, two models) in CI; ``tests/unit/test_nulls.py`` checks that the page's
table is the JSON's.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from celtk.search.null_levels import MODELS, NULL_NAMES, UNION_ONLY, false_positive_rates, level_bound

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "null-levels.json"
PAGE = ROOT / "docs" / "selection-holds.md"
START = "<!-- null-levels table: written by `benchmarks/null_levels.py`; do not edit by hand -->"
END = "<!-- end of the null-levels table -->"
NULLS = (NULL_NAMES[0], UNION_ONLY, *NULL_NAMES[1:])
PRINTS = {"search": "yes (the one to quote)", UNION_ONLY: "— (not offered)", "permutation": "no (a scale)",
          "random-heads": "no (a scale)", "random-heads-control": "no (a different statistic)"}
WHAT = {"search": "`--null search`: the whole search rerun on relabelled outcomes",
        UNION_ONLY: "the same without sets' changes beyond their heads' union",
        "permutation": "`--null permutation`: each candidate relabelled alone",
        "random-heads": "`--null random-heads`: the search on random pools",
        "random-heads-control": "`--null random-heads --candidates 20`: best of 20 random sets"}
LABELS = {"independent": "independent", "additive": "additive", "additive-gapped": "additive, margins ≥ 0.3"}


def table(data: dict) -> str:
    """The markdown table of ``data`` (what :func:`main` writes to the JSON)."""
    bound = data["bound"]
    head = "| null | prints a p-value | " + " | ".join(LABELS[m] for m in data["models"]) + " |"
    rows = [head, "|---|---|" + "---:|" * len(data["models"])]
    for null in data["nulls"]:
        cells = [f"{100 * data['rates'][m][null]:.1f} %" + ("" if data["rates"][m][null] <= bound else " ✗")
                 for m in data["models"]]
        rows.append(f"| {WHAT[null]} | {PRINTS[null]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def caption(data: dict) -> str:
    return (f"False-positive rate at α = {data['alpha']} over {data['sims']:,} simulated searches per model with no "
            f"effect anywhere ({data['n_heads']} heads, {data['n']} discovery examples, p = {data['p']}, "
            f"k = {data['k']}; each p-value from {data['repeats']} null draws). ✗: above "
            f"{100 * data['bound']:.1f} %, i.e. 5 % plus three standard errors of a rate over {data['sims']:,} "
            "searches: the null does not hold its level under that model.")


def write_page(data: dict, page: Path = PAGE) -> None:
    from page_markers import write_between

    write_between(page, START, END, f"{table(data)}\n\n{caption(data)}", "null-levels table")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=1000, help="searches per model")
    parser.add_argument("--repeats", type=int, default=19, help="null draws per p-value")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dry-run", action="store_true", help="print the table, write nothing")
    args = parser.parse_args()
    scale = dict(n_heads=270, n=100, p=10, k=3)
    data: dict = {"alpha": 0.05, "sims": args.sims, "repeats": args.repeats, "seed": args.seed, **scale,
                  "bound": level_bound(args.sims), "models": list(MODELS), "nulls": list(NULLS), "rates": {}}
    for model in MODELS:
        start = time.perf_counter()
        data["rates"][model] = false_positive_rates(model, args.sims, seed=args.seed, nulls=NULLS,
                                                    repeats=args.repeats, **scale)
        print(f"{model}: {data['rates'][model]} ({time.perf_counter() - start:.0f} s)", flush=True)
    print(table(data))
    if not args.dry_run:
        DATA.write_text(json.dumps(data, indent=1) + "\n")
        write_page(data)
        print(f"wrote {DATA} and the table in {PAGE}")


if __name__ == "__main__":
    main()
