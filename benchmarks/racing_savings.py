"""The racing screener against the exhaustive cached screen of the same heads, side by side.

Same model (SmolLM2-135M, float32), same three-shot arithmetic:2da discovery examples, the
heads of a few layers. Runs (1) the exhaustive :class:`celtk.screening.cached.CachedScreener` on every
head and example, (2) :func:`celtk.screening.racing.race` in exact mode and (3) in confidence mode, both
through :func:`celtk.screening.racing.cached_scorer` (each chunk is a sub-list of the examples, screened
on its own). Asserts the exact-mode pool equals the exhaustive one; reports the (head, example)
evaluations saved, the confidence mode's pool agreement, and wall times. A race needs the
intact outcomes up front: that intact pass is timed and counted in the racing times.

    .venv/bin/python benchmarks/racing_savings.py --n 100 --layers 0,1,14,29 --out runs/bench_racing.json

With ``--replay DIR`` it loads no model: it races on the per-example outcomes of the exhaustive
screen stored in ``DIR/screen.json`` (every head), for each pool size in ``--ps``. A race is a
deterministic function of those outcomes, so the evaluations it would make and its pool are exactly
those of a live race on the same discovery set; the live mode above checks that equivalence.

    .venv/bin/python benchmarks/racing_savings.py --replay runs/demo --ps 1,3,10,30
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--layers", default="0,1,14,29")
    parser.add_argument("--p", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shots", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--out", default="runs/bench_racing.json")
    parser.add_argument("--replay", default=None, help="A run directory with an exhaustive screen.json: race on it.")
    parser.add_argument("--ps", default="1,3,10,30", help="With --replay: the pool sizes to race for.")
    args = parser.parse_args()
    if args.replay:
        replay(Path(args.replay), [int(p) for p in args.ps.split(",")], args.delta, args.seed)
        return

    from celtk import Head, HeadSet, get_task, load_model, make_splits
    from celtk.evaluation.prompts import prepare
    from celtk.screening.cached import CachedScreener
    from celtk.screening.racing import cached_scorer, exhaustive_pool, pool_agreement, race

    model = load_model("smollm2-135m")
    task = get_task("arithmetic:2da")
    splits = make_splits(task, args.n, 0, seed=args.seed, fewshot=args.shots)
    prepared = prepare(model, task, splits.discovery, splits.shots)
    sets = [HeadSet((Head(int(l), h),)) for l in args.layers.split(",") for h in range(model.n_heads)]

    start = time.perf_counter()
    intact, results = CachedScreener(model, prepared, batch_size=args.batch_size).run(sets)
    t_exhaustive = time.perf_counter() - start
    full = {s: results[s].correct for s in sets}
    reference = exhaustive_pool(full, intact.correct, args.p)

    start = time.perf_counter()
    intact_again, _ = CachedScreener(model, prepared, batch_size=args.batch_size).run([])
    t_intact = time.perf_counter() - start
    assert np.array_equal(intact_again.correct, intact.correct)

    scorer = cached_scorer(model, prepared, batch_size=args.batch_size)
    runs = {}
    for mode in ("exact", "confidence"):
        start = time.perf_counter()
        result = race(scorer, sets, args.n, intact.correct, args.p, mode=mode, delta=args.delta, seed=args.seed)
        seconds = t_intact + time.perf_counter() - start
        mismatches = sum(int((result.outcomes[s] != full[s])[result.scored_mask(s)].sum()) for s in sets)
        runs[mode] = {"seconds": seconds, "time_saved_fraction": 1 - seconds / t_exhaustive,
                      "evaluations": result.evaluations, "evaluations_exhaustive": len(sets) * args.n,
                      "saved_fraction": result.saved_fraction, "schedule": result.schedule,
                      "racing_after": result.racing_after, "pool": [str(s) for s in result.pool],
                      "pool_equal": result.pool == reference, "agreement": pool_agreement(result.pool, reference),
                      "uncertified": [str(s) for s in result.uncertified], "outcome_mismatches": mismatches,
                      "examples_scored": {str(s): m for s, m in result.examples_scored.items()}}
    assert runs["exact"]["pool_equal"], (runs["exact"]["pool"], [str(s) for s in reference])

    out = {"n": args.n, "layers": args.layers, "heads": len(sets), "p": args.p, "seed": args.seed, "shots": args.shots,
           "delta": args.delta, "intact_accuracy": float(intact.correct.mean()),
           "exhaustive_seconds": t_exhaustive, "intact_pass_seconds": t_intact,
           "exhaustive_pool": [str(s) for s in reference],
           "gains": {str(s): int(full[s].sum() - intact.correct.sum()) for s in sets}, "racing": runs}
    print(f"{len(sets)} heads (layers {args.layers}) × {args.n} examples, p = {args.p}; "
          f"intact accuracy {out['intact_accuracy']:.2f}")
    print(f"{'screen':<12}{'seconds':>9}{'evals saved':>13}{'time saved':>12}{'pool agrees':>13}  schedule")
    print(f"{'exhaustive':<12}{t_exhaustive:>9.1f}{0:>13.1%}{0:>12.1%}{1:>13.0%}")
    for mode, r in runs.items():
        print(f"{mode:<12}{r['seconds']:>9.1f}{r['saved_fraction']:>13.1%}{r['time_saved_fraction']:>12.1%}"
              f"{r['agreement']:>13.0%}  {r['schedule']} racing after each: {r['racing_after']}")
    mismatches = ", ".join(f"{mode} {r['outcome_mismatches']}" for mode, r in runs.items())
    print(f"intact pass (counted in each race): {t_intact:.1f} s; per-example outcome mismatches against the "
          f"exhaustive screen: {mismatches}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1))


def replay(directory: Path, ps: list[int], delta: float, seed: int) -> None:
    """Race on a stored exhaustive screen's outcomes for each pool size, in both modes."""
    from celtk.run.session import load_screen
    from celtk.screening.racing import exhaustive_pool, pool_agreement, race

    doc, intact, scores = load_screen(directory)
    if doc.racing is not None:
        raise SystemExit(f"{directory}/screen.json is a racing screen; replay needs an exhaustive one.")
    table = {s.heads: s.correct for s in scores}
    print(f"{doc.model_name}, {doc.task_name}: {len(table)} heads × {doc.n} examples, intact accuracy "
          f"{doc.intact_accuracy:.2f} (replayed from {directory}/screen.json)")
    print(f"{'p':>4}{'mode':>12}{'evals saved':>13}{'pool agrees':>13}{'uncertified':>13}  "
          "heads racing after each chunk")
    for p in ps:
        reference = exhaustive_pool(table, intact, p)
        for mode in ("exact", "confidence"):
            result = race(lambda heads, idx: {h: table[h][idx] for h in heads}, list(table), doc.n, intact, p,
                          mode=mode, delta=delta, seed=seed)
            assert mode == "confidence" or result.pool == reference
            print(f"{p:>4}{mode:>12}{result.saved_fraction:>13.1%}{pool_agreement(result.pool, reference):>13.0%}"
                  f"{len(result.uncertified):>13}  {result.schedule} → {result.racing_after}")


if __name__ == "__main__":
    main()
