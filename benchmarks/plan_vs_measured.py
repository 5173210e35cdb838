"""`celtk plan` against a measured run: each stage's predicted seconds and the run's peak memory beside what one
`celtk run` of the same settings took, per model; and, across models, the screen's seconds per head against its
FLOPs per head (does the cached screener keep its share of the matmul bound as the model grows?).

    nice .venv/bin/python benchmarks/plan_vs_measured.py --model smollm2-135m --model qwen2.5-coder-1.5b \\
        --task arithmetic:1dc --discovery 30 --heldout 60 --out runs/plan_vs_measured

Per model, one after the other (run it on an otherwise idle machine; say what shared it with ``--shared``):

1. this machine's float32 matmul rate (2048² products, best of 10: ``peers.matmul_gflops``), the rate the plan is
   given (``--device-flops``), measured again after the run (both are recorded: the spread is the machine's noise);
2. ``celtk plan --json`` twice: as a user runs it (the task family's token estimates) and with the token lengths
   the run's prompts turned out to have (shared prefix, longest and mean prompt), which separates the plan's cost
   model from its length guess;
3. ``celtk run`` of those settings in a child process (its own held-out ledger under ``--out``); its peak resident
   memory is the kernel's ``ru_maxrss`` for that child (``os.wait4``), the stage times those of
   ``benchmarks/stage_bounds.py`` (which also counts each stage's FLOPs from the real tokens: the bound);
4. the floor every celtk process pays before any model (Python, torch, transformers, TransformerLens imported):
   a child that imports them and exits, its ``ru_maxrss``. The plan's peak is weights and activations only, so it is
   compared with the measured peak less this floor (both are printed).

A model's result is written to ``OUT/MODEL-TASK.json`` once its run is finished; a rerun prints it and measures
nothing again. A run directory left by an interrupted measurement is refused (a resumed run's times are not one
run's): delete it and start again.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from peers import matmul_gflops  # noqa: E402
from stage_bounds import stage_bounds  # noqa: E402

CELTK = [sys.executable, "-m", "celtk.cli"]
STAGES = ("screen", "select", "test")
FLOOR = "import torch, transformers, transformer_lens, celtk, celtk.cli"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", action="append", required=True, help="an alias (repeat for several models)")
    parser.add_argument("--task", default="arithmetic:1dc")
    parser.add_argument("--discovery", type=int, default=30)
    parser.add_argument("--heldout", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "plan_vs_measured")
    parser.add_argument("--shared", default="", help="what else ran on the machine (recorded beside the times)")
    parser.add_argument("--replan", action="store_true",
                        help="plan finished measurements again with this checkout's `celtk plan` (at the rate "
                             "recorded before each run), keeping what was measured: every row then prices with one "
                             "cost model")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = [measure(model, args) for model in args.model]
    if args.replan:
        results = [replan(result, args.out) for result in results]
    print(report(results))


def measure(model: str, args: argparse.Namespace) -> dict[str, Any]:
    """One model's plan beside its measured run (read back when already finished)."""
    name = f"{model}-{args.task.replace(':', '-')}"
    done, run = args.out / f"{name}.json", args.out / name
    if done.is_file():
        return dict(json.loads(done.read_text()))
    if run.exists():
        raise SystemExit(f"{run} holds an unfinished measurement (a resumed run's times are not one run's); delete it "
                         "and run this again.")
    settings = ["--model", model, "--task", args.task, "--discovery", str(args.discovery), "--heldout",
                str(args.heldout)]
    floor = peak_rss([sys.executable, "-c", FLOOR])[1]
    rate_before = matmul_gflops()
    planned = plan(settings, rate_before)
    env = {**os.environ, "CELTK_LEDGER": str(args.out / "ledger.jsonl")}
    code, peak = peak_rss([*CELTK, "run", *settings, "--seed", str(args.seed), "--out", str(run)], env=env)
    if code != 0:
        raise SystemExit(f"celtk run exited with {code}; see its output above")
    rate_after = matmul_gflops()
    bounds = stage_bounds(run, rate=rate_before)
    lengths = token_lengths(run)
    fitted = plan(with_lengths(settings, lengths), rate_before)
    result = {"model": model, "task": args.task, "discovery": args.discovery, "heldout": args.heldout,
              "seed": args.seed, "gflop_per_s_before": rate_before, "gflop_per_s_after": rate_after,
              "threads": bounds["threads"], "shared": args.shared, "floor_rss_bytes": floor, "peak_rss_bytes": peak,
              "token_lengths": lengths, "plan": planned, "plan_with_measured_lengths": fitted,
              "measured": {s: bounds["stages"].get(s, {}) for s in (*STAGES, "load")},
              "heads": heads_screened(run)}
    save(done, result)
    return result


def replan(result: dict[str, Any], out: Path) -> dict[str, Any]:
    """``result`` with both plans made again by this checkout's ``celtk plan``, written back in place."""
    settings = ["--model", result["model"], "--task", result["task"], "--discovery", str(result["discovery"]),
                "--heldout", str(result["heldout"])]
    lengths, rate = result["token_lengths"], result["gflop_per_s_before"]
    result = {**result, "plan": plan(settings, rate),
              "plan_with_measured_lengths": plan(with_lengths(settings, lengths), rate)}
    done = out / f"{result['model']}-{result['task'].replace(':', '-')}.json"
    save(done, result)
    return result


def with_lengths(settings: list[str], lengths: dict[str, Any]) -> list[str]:
    """``celtk plan``'s flags for the prompts' measured lengths (shots, longest and mean prompt beside them)."""
    shared = lengths["shared_prefix"]
    return [*settings, "--fewshot-tokens", str(shared), "--prompt-tokens", str(lengths["longest_prompt"] - shared),
            "--mean-prompt-tokens", str(max(1, round(lengths["mean_prompt"]) - shared))]


def peak_rss(command: list[str], env: dict[str, str] | None = None) -> tuple[int, int]:
    """Run ``command`` to its end; its exit status and its peak resident memory in bytes (``ru_maxrss``, KiB)."""
    child = subprocess.Popen(command, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_maxrss * 1024


def plan_json(*flags: str) -> dict[str, Any]:
    """``celtk plan FLAGS --json``, parsed."""
    out = subprocess.run([*CELTK, "plan", *flags, "--json"], check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out))


def plan(settings: list[str], gflops: float) -> dict[str, Any]:
    """The plan of ``settings`` on this machine at ``gflops``."""
    return plan_json(*settings, "--device-flops", f"{gflops * 1e9:.6g}")


def save(path: Path, result: dict[str, Any]) -> None:
    """Write ``result`` whole or not at all."""
    from celtk.store.files import atomic_write_text

    atomic_write_text(path, json.dumps(result, indent=1) + "\n")


def token_lengths(run: Path) -> dict[str, Any]:
    """The discovery prompts' lengths in the model's tokens: shared prefix, longest and mean prompt, answer."""
    from celtk.evaluation.shared_prefix import shared_prefix_length
    from celtk.run.session import session_for
    from celtk.store.documents import ScreenDocument

    requests = session_for(ScreenDocument.load(run)).prepared("discovery").requests
    return {"shared_prefix": shared_prefix_length(requests),
            "longest_prompt": max(len(r.context) for r in requests),
            "mean_prompt": statistics.fmean(len(r.context) for r in requests),
            "mean_answer": statistics.fmean(len(r.continuation) for r in requests)}


def heads_screened(run: Path) -> int:
    from celtk.store.documents import ScreenDocument

    return len(ScreenDocument.load(run).complete_rows())


def report(results: list[dict[str, Any]]) -> str:
    lines = ["| model | stage | plan s (task estimates) | plan s (measured lengths) | measured s | measured / plan "
             "(lengths) | share of bound |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        plans = {s["stage"]: s for s in r["plan"]["stages"]}
        fitted = {s["stage"]: s for s in r["plan_with_measured_lengths"]["stages"]}
        for stage in STAGES:
            wall, share = r["measured"][stage].get("wall_s"), r["measured"][stage].get("share")
            ratio = "—" if not wall else f"{wall / fitted[stage]['seconds']:.2f}"
            lines.append(f"| {r['model']} | {stage} | {plans[stage]['seconds']:.0f} | {fitted[stage]['seconds']:.0f} | "
                         f"{'—' if wall is None else f'{wall:.0f}'} | {ratio} | "
                         f"{'—' if share is None else f'{share:.2f}'} |")
    lines += ["", "| model | GFLOP/s before, after | plan peak GB (lengths) | measured peak RSS GB | floor GB | "
              "peak − floor / plan |", "|---|---|---:|---:|---:|---:|"]
    for r in results:
        peak_plan = max(s["peak_bytes"] for s in r["plan_with_measured_lengths"]["stages"])
        net = r["peak_rss_bytes"] - r["floor_rss_bytes"]
        lines.append(f"| {r['model']} | {r['gflop_per_s_before']:.0f}, {r['gflop_per_s_after']:.0f} | "
                     f"{peak_plan / 1e9:.2f} | {r['peak_rss_bytes'] / 1e9:.2f} | {r['floor_rss_bytes'] / 1e9:.2f} | "
                     f"{net / peak_plan:.2f} |")
    if len(results) > 1:
        base = results[0]
        lines += ["", f"Screen per head against {base['model']}:", "",
                  "| model | s per head | GFLOP per head | time ratio | FLOP ratio | share of bound kept |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r in results:
            seconds = r["measured"]["screen"]["wall_s"] / r["heads"]
            gflop = r["measured"]["screen"]["gflop"] / r["heads"]
            base_s = base["measured"]["screen"]["wall_s"] / base["heads"]
            base_g = base["measured"]["screen"]["gflop"] / base["heads"]
            lines.append(f"| {r['model']} | {seconds:.2f} | {gflop:.1f} | {seconds / base_s:.2f} | "
                         f"{gflop / base_g:.2f} | {(gflop / base_g) / (seconds / base_s):.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
