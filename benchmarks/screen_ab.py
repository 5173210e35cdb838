"""Two checkouts' cached screeners side by side: the same slice of the demo's screen, each in a fresh process,
alternated, and their results compared value for value before any time is.

    .venv/bin/python benchmarks/screen_ab.py --base OLD_CHECKOUT --layers 5,20 --rounds 4 --out runs/bench_ab.json

``OLD_CHECKOUT`` is a directory holding another commit's ``celtk`` (``git worktree add --detach DIR REV``); the other
arm is this checkout. Or one checkout under two settings: ``--base-env NAME=VALUE`` runs the base arm with that
environment variable (``CELTK_KEEP_FREED_MEMORY=0``: glibc's allocator as it comes). Each run screens every head of
``--layers`` (SmolLM2-135M, float32, three-shot ``arithmetic:2da``, the demo's split and batch size) after one
warm-up head, in its own process (the model's load is not timed), allocating as the ``celtk`` executable does
(``keep_freed_memory``). Printed and written: each arm's seconds per round, the ratio of the sums (base / this),
whether every set's per-example results are the same in both arms (their ``repr``, so every float to the bit), and
the 2,048² matmul rate before and after (``peers.matmul_gflops``), and each arm's directory and commit (and whether
its ``celtk/`` differs from it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child(layers: str, n: int, heldout: int, seed: int, out: Path) -> None:
    """One arm's screen: its seconds and each set's results, written to ``out``."""
    import torch

    import celtk
    from celtk import Head, HeadSet, get_task, load_model, make_splits
    from celtk.cli.allocator import keep_freed_memory
    from celtk.evaluation.prompts import prepare
    from celtk.screening.cached import CachedScreener

    keep_freed_memory()  # as the celtk executable allocates
    model = load_model("smollm2-135m")
    task = get_task("arithmetic:2da")
    splits = make_splits(task, n, heldout, seed=seed, fewshot=3)
    prepared = prepare(model, task, splits.discovery, splits.shots)
    sets = [HeadSet((Head(int(layer), h),)) for layer in layers.split(",") for h in range(model.n_heads)]
    CachedScreener(model, prepared, batch_size=32).run(sets[:1])  # warm-up
    start = time.perf_counter()
    intact, results = CachedScreener(model, prepared, batch_size=32).run(sets)
    seconds = time.perf_counter() - start
    out.write_text(json.dumps({"seconds": seconds, "intact": repr(intact), "celtk": celtk.__file__,
                               "threads": torch.get_num_threads(), "sets": {str(s): repr(results[s]) for s in sets}}))


def describe(checkout: Path) -> dict[str, object]:
    """Where an arm's code came from: its directory, commit and whether ``celtk/`` differs from that commit."""
    def git(*argv: str) -> str:
        done = subprocess.run(["git", "-C", str(checkout), *argv], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    return {"path": str(checkout), "commit": git("rev-parse", "HEAD"),
            "celtk_changed": bool(git("status", "--porcelain", "--", "celtk"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, default=None,
                        help="the other checkout (a directory with celtk/); default this one, to compare settings")
    parser.add_argument("--base-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable the base arm runs with (repeatable), e.g. "
                             "CELTK_KEEP_FREED_MEMORY=0")
    parser.add_argument("--layers", default="5,20", help="every head of these layers is screened")
    parser.add_argument("--rounds", type=int, default=4, help="an even number: each arm first as often")
    parser.add_argument("--n", type=int, default=100, help="discovery examples (the demo's 100)")
    parser.add_argument("--heldout", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.layers, args.n, args.heldout, args.seed, args.child)
        return
    base = ROOT if args.base is None else args.base.resolve()
    if not (base / "celtk" / "__init__.py").is_file():
        parser.error(f"--base {args.base} holds no celtk/ package: give a checkout of another commit")
    bad = [item for item in args.base_env if "=" not in item or not item.partition("=")[0]]
    if bad:
        parser.error(f"--base-env takes NAME=VALUE, got {', '.join(bad)}")
    if base == ROOT and not args.base_env:
        parser.error("the two arms would be the same: give --base (another checkout) or --base-env (a setting)")
    if args.rounds < 2 or args.rounds % 2:
        parser.error(f"--rounds must be an even number from 2 (each arm first as often), got {args.rounds}")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from peers import matmul_gflops

    arms = {"base": base, "this": ROOT}
    arm_env = {"base": dict(item.split("=", 1) for item in args.base_env), "this": {}}
    seconds: dict[str, list[float]] = {name: [] for name in arms}
    outputs: dict[str, list[dict[str, object]]] = {name: [] for name in arms}
    rate_before = matmul_gflops()
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for name in (("base", "this") if round_ % 2 == 0 else ("this", "base")):
                out = Path(tmp) / f"{name}-{round_}.json"
                env = {**os.environ, **arm_env[name], "PYTHONPATH": str(arms[name])}
                subprocess.run([sys.executable, __file__, "--child", str(out), "--layers", args.layers,
                                "--n", str(args.n), "--heldout", str(args.heldout), "--seed", str(args.seed)],
                               env=env, check=True, cwd=arms[name])
                result = json.loads(out.read_text())
                seconds[name].append(result["seconds"])
                outputs[name].append(result)
                print(f"round {round_ + 1} {name}: {result['seconds']:.2f} s", flush=True)
    rate_after = matmul_gflops()
    first = outputs["base"][0]
    same = all(o["intact"] == first["intact"] and o["sets"] == first["sets"] for arm in outputs.values() for o in arm)
    ratio = sum(seconds["base"]) / sum(seconds["this"])
    summary = {"layers": args.layers, "rounds": args.rounds, "seconds": seconds, "ratio_base_over_this": ratio,
               "results_identical": same, "matmul_gflops": [rate_before, rate_after],
               "threads": outputs["this"][0]["threads"], "base_env": arm_env["base"],
               "arms": {name: describe(path) for name, path in arms.items()}}
    print(f"base/this: {ratio:.3f}x (sums of {args.rounds} rounds); every result identical in both arms: {same}; "
          f"matmul 2048² {rate_before:.0f} -> {rate_after:.0f} GFLOP/s")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
