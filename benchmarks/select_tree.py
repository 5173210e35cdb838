"""`celtk select` walking the subsets as a prefix tree against the scheduling before it (each subset
replayed from its lowest layer), side by side in one script on copies of one screened run.

The old code is the celtk package of a base commit (default: where this branch left main), extracted
with `git archive` into a temporary folder and put first on PYTHONPATH; the new code is this tree.
Each side runs `celtk select OUT` in its own process (the CLI, in-process in a small driver) on its
own copy of the run's screen files, one after the other (``--order``) or both at once (``--parallel``).
The driver counts, through ``CachedScreener._layer``, the example rows every decoder layer ran (per
example: the ablated replays inside ``_score_start_layer``, and everything, intact passes included). Afterwards the two
run directories are compared file by file (benchmarks/compare_runs.py): selection.json,
diagnostics.json and the memo's parts must be identical.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/select_tree.py runs/demo --work runs/select-tree \
        --parallel --out runs/select_tree.json

Wall times on a shared machine move with its load: quote the ratio, and say the machine was shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCREEN_FILES = ("config.json", "fingerprint.json", "intact.json", "screen.json", "screen.csv", "screen_parts",
                "timing.json")

DRIVER = r"""
import json, sys, time
from celtk.screening.cached import CachedScreener

count = {"ablated_rows": 0, "all_rows": 0}
inside = [False]
layer, start_layer = CachedScreener._layer, CachedScreener._score_start_layer

def counted(self, index, hidden, kwargs, rows, copies, cache, mask=None):
    if hidden.shape[0] > copies:  # example rows (the shared prefix runs one row per copy)
        count["all_rows"] += hidden.shape[0]
        if inside[0]:
            count["ablated_rows"] += hidden.shape[0]
    return layer(self, index, hidden, kwargs, rows, copies, cache, mask)

def scored(self, *args):
    inside[0] = True
    try:
        return start_layer(self, *args)
    finally:
        inside[0] = False

CachedScreener._layer, CachedScreener._score_start_layer = counted, scored
import celtk, celtk.screening.cached
from celtk.cli import main

begin = time.perf_counter()
main(["select", sys.argv[1]], standalone_mode=False)
seconds = time.perf_counter() - begin
n = len(json.load(open(sys.argv[1] + "/screen.json"))["discovery_ids"])
json.dump({"seconds": seconds, "n_examples": n, "code": celtk.screening.cached.__file__,
           "ablated_layer_evaluations_per_example": count["ablated_rows"] / n,
           "all_layer_evaluations_per_example": count["all_rows"] / n}, open(sys.argv[2], "w"), indent=1)
"""


def base_commit() -> str:
    return subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def extract(commit: str, into: Path) -> Path:
    """The celtk package of ``commit`` under ``into`` (no worktree registered)."""
    archive = subprocess.run(["git", "archive", "--format=tar", commit, "celtk"], cwd=ROOT, capture_output=True,
                             check=True)
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def fresh_copy(run: Path, dest: Path) -> Path:
    """The screen stage's files of ``run`` in ``dest`` (nothing of select or test)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in SCREEN_FILES:
        src = run / name
        if src.is_dir():
            shutil.copytree(src, dest / name)
        elif src.exists():
            shutil.copy2(src, dest / name)
    return dest


def start_select(code: Path, run: Path, result: Path, log: Path) -> subprocess.Popen:
    """`celtk select RUN` under the driver, with ``code`` first on the path (run from ``run``'s folder: the
    current directory would come first on ``python -c``'s path)."""
    env = dict(os.environ, PYTHONPATH=str(code), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    out = open(log, "w")
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(run), str(result)], env=env, stdout=out, stderr=out,
                            cwd=run.parent)


def finish_select(process: subprocess.Popen, code: Path, result: Path, log: Path) -> dict:
    if process.wait():
        raise SystemExit(f"celtk select failed under {code} (see {log})")
    measured = json.loads(result.read_text())
    if not Path(measured["code"]).resolve().is_relative_to(code.resolve()):
        raise SystemExit(f"the select meant to run {code} imported {measured['code']}")
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a screened run directory (only read)")
    parser.add_argument("--work", type=Path, required=True, help="where the two copies go (replaced)")
    parser.add_argument("--base", default=None, help="the old code's commit (default: merge-base with main)")
    parser.add_argument("--order", default="old,new", help="which side runs first")
    parser.add_argument("--parallel", action="store_true",
                        help="run both at once (one core each): the same background load for both; the first to finish "
                             "leaves the other a quieter machine, which favours the slower side")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from compare_runs import compare

    commit = args.base or base_commit()
    results: dict = {"base_commit": commit, "run": str(args.run), "order": args.order}
    with tempfile.TemporaryDirectory(prefix="celtk-base-") as tmp:
        codes = {"old": extract(commit, Path(tmp)), "new": ROOT}
        args.work.mkdir(parents=True, exist_ok=True)
        sides = args.order.split(",")
        paths = {side: (fresh_copy(args.run, args.work / side), args.work / f"{side}.json", args.work / f"{side}.log")
                 for side in sides}
        running = {}
        for side in sides:
            started = time.strftime("%H:%M:%S")
            running[side] = start_select(codes[side], *paths[side])
            if not args.parallel:
                results[side] = finish_select(running.pop(side), codes[side], *paths[side][1:])
                results[side]["started"] = started
        for side, process in running.items():
            results[side] = finish_select(process, codes[side], *paths[side][1:])
        results["parallel"] = args.parallel
    verdicts = compare(args.work / "old", args.work / "new", set(), {})
    results["files"] = dict(verdicts)
    old, new = results["old"], results["new"]
    results["select_time_ratio"] = old["seconds"] / new["seconds"]
    results["ablated_layer_ratio"] = (old["ablated_layer_evaluations_per_example"]
                                      / new["ablated_layer_evaluations_per_example"])
    results["all_layer_ratio"] = old["all_layer_evaluations_per_example"] / new["all_layer_evaluations_per_example"]
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    different = [name for name, verdict in verdicts if verdict != "identical"]
    sys.exit(1 if different else 0)


if __name__ == "__main__":
    main()
