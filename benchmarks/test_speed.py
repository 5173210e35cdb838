"""The test stage with the shared few-shot prefix run once per pass against the plain whole-prompt passes, on copies
of one selected (not yet tested) run directory: the same test.json byte for byte, and how much faster.

    nice .venv/bin/python benchmarks/test_speed.py RUN --ledger LEDGER --rounds 2

Each round tests two fresh copies of the run, plain (``CELTK_PLAIN_SCORING=1``) and shared, in alternating order
(plain first in even rounds), each copy under its own held-out ledger (the copies are one held-out set tested
several times on purpose; the run itself is never tested). Each test runs in a fresh process that loads the model
first; it times ``run_test`` alone (the same-run checks, the two held-out passes, the statistics) and, within it,
the two held-out passes (``score_streaming``): the checks are the same work in both arms, so the passes' ratio is
the speed-up of the scoring itself. ``--threads N`` sets torch's threads in the children. The machine's float32
matmul rate is measured before and after. When two test.json files differ in bytes, the largest per-example
log-probability difference and whether any verdict differs are printed; exit status 1 if a verdict differs.
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
import torch
from celtk.models import load_model
from celtk.run import run_test, test as stage
if int(sys.argv[2]):
    torch.set_num_threads(int(sys.argv[2]))
passes = [0.0]
score_streaming = stage.score_streaming
def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
        return score_streaming(*args, **kwargs)
    finally:
        passes[0] += time.perf_counter() - start
stage.score_streaming = timed
out = Path(sys.argv[1])
config = json.loads((out / "selection.json").read_text())["config"]  # any selected run (config.json: celtk run's only)
model = load_model(config["model"], device="cpu", dtype=config.get("dtype", "float32"))
start = time.perf_counter()
run_test(out, model=model)
print(json.dumps({"seconds": time.perf_counter() - start, "passes": passes[0]}))
"""


def test_once(run: Path, scratch: Path, plain: bool, ledger: Path | None, threads: int = 0
              ) -> tuple[dict[str, float], bytes]:
    copy = scratch / f"{'plain' if plain else 'shared'}-{time.monotonic_ns()}"
    shutil.copytree(run, copy)
    own = scratch / f"{copy.name}-ledger.jsonl"
    if ledger is not None:
        shutil.copyfile(ledger, own)
    env = {**os.environ, "CELTK_LEDGER": str(own), "CELTK_QUIET": "1"}
    env.pop("CELTK_PLAIN_SCORING", None)
    if plain:
        env["CELTK_PLAIN_SCORING"] = "1"
    done = subprocess.run([sys.executable, "-c", CHILD, str(copy), str(threads)], env=env, capture_output=True,
                          text=True)
    if done.returncode:
        raise SystemExit(f"run_test failed on {copy}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1]), (copy / "test.json").read_bytes()


def _numbers(value: float | list[float] | None) -> list[float]:
    """A log-probability as test.json stores it: one number, one per choice, or none (graded by generation)."""
    return [] if value is None else [value] if isinstance(value, (int, float)) else list(value)


def differences(results: list[bytes]) -> dict[str, object]:
    """How each test.json file differs from the first: the largest per-example log-probability difference and the
    number of (file, example) pairs whose verdict, intact or ablated, differs."""
    first = json.loads(results[0])["examples"]
    largest, verdicts = 0.0, 0
    for other in results[1:]:
        if other == results[0]:
            continue
        for a, b in zip(first, json.loads(other)["examples"], strict=True):
            for key in ("intact_logprob", "ablated_logprob"):
                pairs = zip(_numbers(a[key]), _numbers(b[key]), strict=True)
                largest = max([largest, *(abs(x - y) for x, y in pairs)])
            verdicts += (a["intact_correct"], a["ablated_correct"]) != (b["intact_correct"], b["ablated_correct"])
    return {"max_abs_logprob_difference": largest, "verdicts_differing": verdicts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a selected run directory with no test.json")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep the tested copies here (default: a temporary directory)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads in each test (default: torch's own)")
    parser.add_argument("--ledger", type=Path, help="the ledger as it was when the run was selected (each copy "
                        "starts from its own copy of it)")
    args = parser.parse_args()
    if not (args.run / "selection.json").exists() or (args.run / "test.json").exists():
        raise SystemExit(f"{args.run}: give a run directory that is selected and not yet tested.")
    before = matmul_gflops()
    times: dict[str, list[dict[str, float]]] = {"plain": [], "shared": []}
    results: list[bytes] = []
    order: list[tuple[str, int]] = []  # (arm, round) of each result
    with tempfile.TemporaryDirectory(prefix="celtk-test-speed-") as tmp:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            tmp = str(args.keep)
        for round_ in range(args.rounds):
            for plain in ((True, False) if round_ % 2 == 0 else (False, True)):
                timed, result = test_once(args.run, Path(tmp), plain, args.ledger, args.threads)
                times["plain" if plain else "shared"].append(timed)
                results.append(result)
                order.append(("plain" if plain else "shared", round_))
                print(f"round {round_}: {'plain' if plain else 'shared'} run_test {timed['seconds']:.1f} s, "
                      f"passes {timed['passes']:.1f} s", flush=True)
    after = matmul_gflops()

    def ratio(key: str) -> float:
        return sum(t[key] for t in times["plain"]) / sum(t[key] for t in times["shared"])

    by_arm = {arm: [r for r, (a, _) in zip(results, order, strict=True) if a == arm] for arm in ("plain", "shared")}
    summary = {"plain": times["plain"], "shared": times["shared"], "run_test_ratio": ratio("seconds"),
               "passes_ratio": ratio("passes"), "test_json_identical": len(set(results)) == 1,
               # whether an arm repeats itself: a difference between the arms is then the path's, not run-to-run
               "identical_within_plain": len(set(by_arm["plain"])) == 1,
               "identical_within_shared": len(set(by_arm["shared"])) == 1,
               **differences(results), "threads": args.threads or "torch default",
               "gflops_before": round(before), "gflops_after": round(after)}
    print(json.dumps(summary, indent=1))
    sys.exit(1 if summary["verdicts_differing"] else 0)


if __name__ == "__main__":
    main()
