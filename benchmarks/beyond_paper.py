"""Search strategies, alternative screeners and stability on one screened run directory.

Copies the screen of RUN (e.g. the demo's runs/demo) into OUT/<strategy>/, runs each strategy's
selection and the held-out test there, then the stability report and the alternative screeners
in OUT/algorithm1/. Prints a table and writes OUT/summary.json. Every step resumes if rerun.

    .venv/bin/python benchmarks/beyond_paper.py --run runs/demo --out runs/beyond \\
        --strategies algorithm1,greedy,beam --resamples 10 --masks 200
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

SCREEN_FILES = ("screen.json", "screen.csv", "intact.json", "config.json", "fingerprint.json", "screen_parts")


def prepare_copy(run: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in SCREEN_FILES:
        src, dst = run / name, target / name
        if dst.exists() or not src.exists():
            continue
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    # set outcomes already computed for the run (any layout) seed the memo: same format
    sets = target / "select_parts" / "sets"
    sets.mkdir(parents=True, exist_ok=True)
    for part in (run / "select_parts").rglob("*.json") if (run / "select_parts").is_dir() else []:
        dst = sets / f"{part.parent.name}-{part.name}"
        if not dst.exists() and not (run / "select_parts" / "sets" / part.name) == part:
            shutil.copy2(part, dst)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", default="runs/demo")
    parser.add_argument("--out", default="runs/beyond")
    parser.add_argument("--strategies", default="algorithm1,greedy,beam")
    parser.add_argument("--p", type=int, default=10)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--width", type=int, default=2)
    parser.add_argument("--resamples", type=int, default=10)
    parser.add_argument("--masks", type=int, default=200)
    parser.add_argument("--rate", type=float, default=0.05)
    parser.add_argument("--skip", default="", help="comma list of: stability,gradient,lasso")
    args = parser.parse_args()

    from celtk import load_model
    from celtk.run import run_altscreen, run_select, run_stability, run_test
    from celtk.store.files import read_json, write_json

    run, out = Path(args.run), Path(args.out)
    config = read_json(run / "config.json")
    model = load_model(config["model"], device=config.get("device", "cpu"), dtype=config.get("dtype", "float32"))
    summary_path = out / "summary.json"
    summary = read_json(summary_path) if summary_path.exists() else {"run": str(run), "strategies": {}}
    for name in args.strategies.split(","):
        if name in summary["strategies"]:
            continue
        target = out / name
        prepare_copy(run, target)
        start = time.perf_counter()
        selection = run_select(target, p=args.p, k=args.k, strategy=name, width=args.width, model=model).to_json()
        select_s = time.perf_counter() - start
        test = run_test(target, model=model).to_json()
        summary["strategies"][name] = {
            "heads": selection["heads"], "n_evaluations": selection["n_evaluations"],
            "discovery_intact": selection["intact_discovery_accuracy"],
            "discovery_ablated": selection["discovery_accuracy"],
            "discovery_gain": selection["discovery_gain"], "heldout_intact": test["intact_accuracy"],
            "heldout_ablated": test["ablated_accuracy"], "heldout_gain": test["gain"], "heldout_ci": test["gain_ci"],
            "mcnemar_p": test["mcnemar_p"], "select_seconds_this_run": round(select_s, 1),
            "options": selection["strategy_options"],
        }
        write_json(summary_path, summary)
        print(name, json.dumps(summary["strategies"][name]), flush=True)
    base = out / "algorithm1"
    prepare_copy(run, base)
    skip = set(filter(None, args.skip.split(",")))
    if "stability" not in skip and "stability" not in summary:
        doc = run_stability(base, resamples=args.resamples, p=args.p, k=args.k, model=model).to_json()
        summary["stability"] = {key: doc[key] for key in ("n_resamples", "resampling", "reference_selection",
                                                          "reference_frequency", "mean_pairwise_jaccard",
                                                          "n_distinct_selections", "heldout_gain_over_resamples",
                                                          "n_discovery_evaluations")}
        summary["stability"]["head_frequency_top"] = dict(list(doc["head_frequency"].items())[:10])
        summary["stability"]["selections"] = doc["selections"]
        write_json(summary_path, summary)
        print("stability", json.dumps(summary["stability"])[:2000], flush=True)
    for method in ("gradient", "lasso"):
        if method in skip or method in summary:
            continue
        altscreen = run_altscreen(base, method=method, p=args.p, masks=args.masks, rate=args.rate, model=model)
        doc = altscreen.to_json() | {"timing": {"seconds": round(altscreen.seconds, 1)}}
        summary[method] = {**doc["comparison"], "seconds": doc["timing"]["seconds"],
                           **({"alpha": doc["details"]["alpha"], "n_nonzero": doc["details"]["n_nonzero"],
                               "mean_mask_accuracy": doc["details"]["mean_mask_accuracy"]}
                              if method == "lasso" else {})}
        write_json(summary_path, summary)
        print(method, json.dumps(summary[method]), flush=True)


if __name__ == "__main__":
    main()
