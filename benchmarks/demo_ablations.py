"""The demo's ablation-kinds table in docs/selection-holds.md: every kind at every position, from the
``ablation-kinds.json`` that ``celtk ablations`` wrote for the demo's run.

    celtk ablations runs/demo                                   # the look: minutes on 2 cores (28 held-out passes)
    .venv/bin/python benchmarks/demo_ablations.py runs/demo     # keeps its figures: docs/demo-ablation-kinds.json
                                                                # and the page's table between its markers
    .venv/bin/python benchmarks/demo_ablations.py --check       # the page's table is the committed JSON's

The look itself is a benchmark (a real model, 28 passes over 300 held-out examples); what CI checks is that the
page's table is the one this script renders from the committed figures (tests/integration/test_docs_figures.py).
The JSON keeps every row's figures, not the per-example outcomes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "selection-holds.md"
DATA = ROOT / "docs" / "demo-ablation-kinds.json"
START = "<!-- demo ablation-kinds table: written by `benchmarks/demo_ablations.py`; do not edit by hand -->"
END = "<!-- end of the demo ablation-kinds table -->"
KEPT = ("kind", "positions", "draws", "ablated_accuracy", "gain", "gain_ci", "fixes", "damage", "mcnemar_p",
        "paired_p", "mean_delta_logprob", "draw_gains")


def figures(document: dict) -> dict:
    """What the page shows of an ``ablation-kinds.json``: its setting and every row's figures."""
    return {"heads": document["heads"], "model": document["model"], "task": document["task"], "n": document["n"],
            "intact_accuracy": document["intact_accuracy"], "test_gain": document["test_gain"],
            "reference": {k: document["reference"][k] for k in ("set", "n") if k in document["reference"]},
            "rows": [{k: row.get(k) for k in KEPT} for row in document["kinds"]]}


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def table(data: dict) -> str:
    """The markdown table of every row."""
    lines = ["| kind | positions | draws | ablated | gain, 95 % CI (points) | fixes / damage | p | draw spread | "
             "Δ log-prob of the answer |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in data["rows"]:
        p = r["mcnemar_p"] if r["mcnemar_p"] is not None else r["paired_p"]
        spread = f"{_pts(min(r['draw_gains']))} … {_pts(max(r['draw_gains']))}" if r["draw_gains"] else ""
        fixes = f"{r['fixes']:g} / {r['damage']:g}"
        lines.append(f"| {r['kind']} | {r['positions']} | {r['draws']} | {100 * r['ablated_accuracy']:.1f} % | "
                     f"{_pts(r['gain'])} [{_pts(r['gain_ci'][0])}, {_pts(r['gain_ci'][1])}] | {fixes} | {p:.2g} | "
                     f"{spread} | {r['mean_delta_logprob']:+.2f} |")
    return "\n".join(lines)


def passage(data: dict) -> str:
    return f"{START}\n{table(data)}\n{END}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", nargs="?", type=Path, help="the demo's run directory, after `celtk ablations`")
    parser.add_argument("--check", action="store_true", help="only check the page against the committed JSON")
    args = parser.parse_args()
    if args.check or args.run is None:
        data = json.loads(DATA.read_text())
        text = PAGE.read_text()
        ok = passage(data) in text
        print("the page's table is the committed JSON's" if ok else "the page's table differs from the JSON's")
        sys.exit(0 if ok else 1)
    data = figures(json.loads((args.run / "ablation-kinds.json").read_text()))
    DATA.write_text(json.dumps(data, indent=1) + "\n")
    from page_markers import write_between

    write_between(PAGE, START, END, table(data), "demo ablation-kinds table")
    print(table(data))


if __name__ == "__main__":
    main()
