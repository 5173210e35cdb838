"""The test stage with the shared few-shot prefix run once per pass against the plain whole-prompt passes, on copies
of one selected (not yet tested) run directory: the same test.json byte for byte, and how much faster.

    nice .venv/bin/python benchmarks/test_speed.py RUN --ledger LEDGER --rounds 2

Each round tests two fresh copies of the run, plain (``CELTK_PLAIN_SCORING=1``) and shared, in alternating order
(plain first in even rounds), each copy under its own held-out ledger (the copies are one held-out set tested
several times on purpose; the run itself is never tested). Each test runs in a fresh process that loads the model
first; the time is ``run_test`` alone (the two held-out passes and the statistics). The machine's float32 matmul
rate is measured before and after. Exit status 1 if any two test.json files differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import matmul_gflops  # noqa: E402

CHILD = """
import json, sys, time
from pathlib import Path
from celtk.models import load_model
from celtk.run import run_test
out = Path(sys.argv[1])
config = json.loads((out / "config.json").read_text())
model = load_model(config["model"], device="cpu", dtype=config.get("dtype", "float32"))
start = time.perf_counter()
run_test(out, model=model)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def test_once(run: Path, scratch: Path, plain: bool, ledger: Path | None) -> tuple[float, bytes]:
    copy = scratch / f"{'plain' if plain else 'shared'}-{time.monotonic_ns()}"
    shutil.copytree(run, copy)
    own = scratch / f"{copy.name}-ledger.jsonl"
    if ledger is not None:
        shutil.copyfile(ledger, own)
    env = {**os.environ, "CELTK_LEDGER": str(own), "CELTK_QUIET": "1"}
    env.pop("CELTK_PLAIN_SCORING", None)
    if plain:
        env["CELTK_PLAIN_SCORING"] = "1"
    done = subprocess.run([sys.executable, "-c", CHILD, str(copy)], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"run_test failed on {copy}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"], (copy / "test.json").read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a selected run directory with no test.json")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep the tested copies here (default: a temporary directory)")
    parser.add_argument("--ledger", type=Path, help="the ledger as it was when the run was selected (each copy "
                        "starts from its own copy of it)")
    args = parser.parse_args()
    if not (args.run / "selection.json").exists() or (args.run / "test.json").exists():
        raise SystemExit(f"{args.run}: give a run directory that is selected and not yet tested.")
    before = matmul_gflops()
    times: dict[str, list[float]] = {"plain": [], "shared": []}
    results = set()
    with tempfile.TemporaryDirectory(prefix="celtk-test-speed-") as tmp:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            tmp = str(args.keep)
        for round_ in range(args.rounds):
            for plain in ((True, False) if round_ % 2 == 0 else (False, True)):
                seconds, result = test_once(args.run, Path(tmp), plain, args.ledger)
                times["plain" if plain else "shared"].append(seconds)
                results.add(result)
                print(f"round {round_}: {'plain' if plain else 'shared'} {seconds:.1f} s", flush=True)
    after = matmul_gflops()
    summary = {"plain_s": times["plain"], "shared_s": times["shared"],
               "ratio_of_means": sum(times["plain"]) / sum(times["shared"]),
               "test_json_identical": len(results) == 1, "gflops_before": round(before), "gflops_after": round(after)}
    print(json.dumps(summary, indent=1))
    sys.exit(0 if len(results) == 1 else 1)


if __name__ == "__main__":
    main()
