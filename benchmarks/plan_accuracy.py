"""How close `celtk plan`'s predicted activation peak is to the measured one (the cached screener on CPU).

All configurations run in one process on a packaged model (float32), one after the other: the
requests are prepared, the screener is built, the kernel's peak-RSS counter is reset, and the
screener scores heads of layer 0, as many as fill one pass (the widest ablation: every layer
runs, with the prefix keys/values of all of them). Predicted = :func:`celtk.planning.plan.cached_stage_bytes`
for the same sizes. Goal: within 25 %.

What is measured, and why so: torch allocates tensors with ``malloc`` outside Python's allocator,
so ``tracemalloc`` does not see them and ``ru_maxrss`` cannot be reset between stages; the
kernel's ``VmHWM`` can (``/proc/self/clear_refs``), so measured = ``VmHWM`` after the work −
``VmRSS`` before it. Two things would make that differ from the live tensors:

* the weights are mapped from the safetensors file and enter RSS only when first read (a first
  forward of SmolLM2-135M adds ~0.5 GB of file pages): every page is read before the baseline;
* the process's first forward allocates once what every later forward reuses (the BLAS/OpenMP
  thread pools and their scratch buffers, ~18 MB here): that is per-process overhead, not
  activations, so one untimed warm-up pass runs before any baseline and its extra is printed apart;
* glibc serves freed blocks below its (growing) mmap threshold from a heap it keeps, so RSS would
  keep memory no tensor holds: the process runs with ``MALLOC_MMAP_THRESHOLD_`` fixed at 128 KiB,
  so every tensor above it is mapped on allocation and unmapped when freed.

    .venv/bin/python benchmarks/plan_accuracy.py [--model gemma3-270m]
"""

from __future__ import annotations

import gc
import os
import re
import sys

FIXED_THRESHOLD = "131072"

CONFIGS = [
    {"name": "2da 0-shot, batch 8, 72 rows/pass (no shared prefix)", "task": "arithmetic:2da", "n": 32, "fewshot": 0,
     "chat": False, "batch": 8, "rows": 72},
    {"name": "2da 3-shot (shared prefix), batch 32, 128 rows/pass", "task": "arithmetic:2da", "n": 64, "fewshot": 3,
     "chat": False, "batch": 32, "rows": 128},
    {"name": "2da chat 0-shot (template prefix), batch 32, 256 rows/pass", "task": "arithmetic:2da", "n": 64,
     "fewshot": 0, "chat": True, "batch": 32, "rows": 256},
]


def status(field: str) -> int:
    """A ``/proc/self/status`` field in bytes."""
    with open("/proc/self/status") as handle:
        return int(re.search(rf"{field}:\s+(\d+)", handle.read()).group(1)) * 1024  # type: ignore[union-attr]


def peak_growth(work) -> tuple[int, int]:
    """Peak RSS above RSS before ``work()``, and how much of RSS growth was file pages (should be ~0)."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # reset VmHWM to the current RSS
    start, start_file = status("VmRSS"), status("RssFile")
    work()
    return status("VmHWM") - start, status("RssFile") - start_file


def measure(model, spec: dict) -> dict:
    from celtk import get_task, make_splits
    from celtk.evaluation.prompts import prepare
    from celtk.heads import HeadSet
    from celtk.planning.plan import cached_stage_bytes, shape_from_config, task_size_of
    from celtk.screening.cached import CachedScreener

    task = get_task(spec["task"])
    splits = make_splits(task, spec["n"], 0, seed=1, fewshot=spec["fewshot"])
    prepared = prepare(model, task, splits.discovery, splits.shots, spec["chat"])
    screener = CachedScreener(model, prepared, batch_size=spec["batch"], rows_per_pass=spec["rows"])
    # one pass per batch holds rows_per_pass rows: as many layer-0 ablations as fill it
    sets = [HeadSet.parse(f"L0H{h}") for h in range(min(model.n_heads, spec["rows"] // spec["batch"]))]
    measured, file_pages = peak_growth(lambda: screener.run(sets))
    size = task_size_of(prepared)
    predicted = cached_stage_bytes(shape_from_config(model.hf_model.config), size, len(prepared.examples),
                                   spec["batch"], spec["rows"], 4)
    return {**spec, "measured_mb": measured / 1e6, "predicted_mb": predicted / 1e6, "ratio": predicted / measured,
            "file_mb": file_pages / 1e6, "tokens": f"{size.prompt_tokens}/{size.mean_prompt}/{size.shared_prefix}"}


def main() -> None:
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") != FIXED_THRESHOLD:  # glibc reads it at start: run again with it
        os.execve(sys.executable, [sys.executable, *sys.argv],
                  {**os.environ, "MALLOC_MMAP_THRESHOLD_": FIXED_THRESHOLD, "OMP_NUM_THREADS": "2"})
    import torch

    from celtk import load_model

    name = sys.argv[sys.argv.index("--model") + 1] if "--model" in sys.argv else "smollm2-135m"
    torch.set_num_threads(2)
    model = load_model(name)
    with torch.no_grad():  # fault every weight page in before any baseline (they are mapped from the file)
        for parameter in model.hf_model.parameters():
            parameter.sum()

    def warm_up() -> None:  # one small forward: the process-level buffers every later pass reuses
        with torch.no_grad():
            model.arch.decoder(input_ids=torch.ones(8, 16, dtype=torch.long), use_cache=False)

    first, _ = peak_growth(warm_up)
    again, _ = peak_growth(warm_up)
    print(f"{name}, float32, MALLOC_MMAP_THRESHOLD_={FIXED_THRESHOLD}; first forward's one-time overhead "
          f"{(first - again) / 1e6:.1f} MB (warm-up, not counted below)")
    print(f"{'configuration':60} {'tokens max/mean/prefix':>23} {'measured MB':>12} {'predicted MB':>13} {'ratio':>6}"
          f" {'file MB':>8}", flush=True)
    rows = []
    for spec in CONFIGS:  # each row as soon as it is measured
        if spec["chat"] and model.tokenizer.chat_template is None:
            print(f"{spec['name']:60} skipped: {name}'s tokenizer has no chat template", flush=True)
            continue
        r = measure(model, spec)
        rows.append(r)
        print(f"{r['name']:60} {r['tokens']:>23} {r['measured_mb']:12.1f} {r['predicted_mb']:13.1f} {r['ratio']:6.2f}"
              f" {r['file_mb']:8.1f}", flush=True)
    print(f"largest deviation: {max(abs(r['ratio'] - 1) for r in rows):.1%} (goal ≤ 25 %)")


if __name__ == "__main__":
    main()
