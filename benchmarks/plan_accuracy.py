"""How close `celtk plan`'s predicted peak memory is to the measured one (the cached screener on CPU).

Each configuration runs in its own process on the packaged SmolLM2-135M (float32): the
requests are prepared, the screener is built, the kernel's peak-RSS counter is reset, and the
screener scores heads of layer 0, as many as fill one pass (the widest ablation: every later
layer runs, with the prefix keys/values of all of them). Measured = peak RSS − RSS before the run; predicted =
:func:`celtk.plan.cached_stage_bytes` for the same sizes. Goal: within 25 %.

    .venv/bin/python benchmarks/plan_accuracy.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

# a fresh process per configuration, so no earlier run's freed memory hides this one's growth
# (glibc's fixed mmap threshold, as the unit test sets, is exact but several times slower here)
MALLOC_ENV = {"OMP_NUM_THREADS": "2"}

CONFIGS = [
    {"name": "2da 0-shot, batch 32, 128 rows/pass (no shared prefix)", "task": "arithmetic:2da", "n": 64, "fewshot": 0,
     "chat": False, "batch": 32, "rows": 128},
    {"name": "all subtasks 5-shot (shared prefix), batch 16, 64 rows/pass", "task": "arithmetic", "n": 48, "fewshot": 5,
     "chat": False, "batch": 16, "rows": 64},
    {"name": "2da chat 0-shot (template prefix), batch 32, 256 rows/pass", "task": "arithmetic:2da", "n": 64, "fewshot": 0,
     "chat": True, "batch": 32, "rows": 256},
]

def child(spec: dict) -> dict:
    import torch

    from celtk import get_task, load_model, make_splits
    from celtk.evaluator import prepare
    from celtk.heads import HeadSet
    from celtk.plan import cached_stage_bytes, peak_resident_growth, shape_from_config, task_size_of
    from celtk.screen import CachedScreener

    torch.set_num_threads(2)
    model = load_model("smollm2-135m")
    task = get_task(spec["task"])
    splits = make_splits(task, spec["n"], 0, seed=1, fewshot=spec["fewshot"])
    prepared = prepare(model, task, splits.discovery, splits.shots, spec["chat"])
    screener = CachedScreener(model, prepared, batch_size=spec["batch"], rows_per_pass=spec["rows"])
    # one pass per batch holds rows_per_pass rows: as many layer-0 ablations as fill it
    sets = [HeadSet.parse(f"L0H{h}") for h in range(min(model.n_heads, spec["rows"] // spec["batch"]))]
    _, measured = peak_resident_growth(lambda: screener.run(sets))
    size = task_size_of(prepared)
    predicted = cached_stage_bytes(shape_from_config(model.hf_model.config), size, len(prepared.examples),
                                   spec["batch"], spec["rows"], 4)
    return {**spec, "measured_mb": measured / 1e6, "predicted_mb": predicted / 1e6, "ratio": predicted / measured,
            "prompt_tokens": size.prompt_tokens, "mean_prompt_tokens": size.mean_prompt, "shared_prefix": size.shared_prefix}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
        return
    rows = []
    for spec in CONFIGS:
        out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], check=True, capture_output=True, text=True,
                             env={**os.environ, **MALLOC_ENV})
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'configuration':62} {'tokens (max/mean/prefix)':>25} {'measured MB':>12} {'predicted MB':>13} {'ratio':>6}")
    for r in rows:
        tokens = f"{r['prompt_tokens']}/{r['mean_prompt_tokens']}/{r['shared_prefix']}"
        print(f"{r['name']:62} {tokens:>25} {r['measured_mb']:12.1f} {r['predicted_mb']:13.1f} {r['ratio']:6.2f}")
    worst = max(abs(r["ratio"] - 1) for r in rows)
    print(f"largest deviation: {worst:.1%} (goal ≤ 25 %)")


if __name__ == "__main__":
    main()
