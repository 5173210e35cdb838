"""The generation screener against the naive loop, side by side in one run.

Naive loop: for each head, ``ablate()`` then batched greedy HF ``generate()`` (stop strings,
left padding) on every example, then grading. Generation screener:
:class:`celtk.screening.generation.GenerationScreener` on the same examples and heads. The task is
free-form two-digit addition (``Question: What is 48 plus 76?\\nAnswer:`` → ``124``, stop at a
newline, three shots) written as a JSONL file graded with ``?grading=generate``. Per-example
verdicts must be identical before times are compared. The screener runs twice: cold (the
process's first screen, whose memory is faulted in) and warm (the cost of each later chunk of a
long screen; the speedup is taken on it). The naive loop is warmed up on one other head. Each
measurement gives wall, user and system seconds and minor page faults. ``--allocator glibc``
measures without :func:`celtk.cli.allocator.keep_freed_memory` (on by default, as in the CLI).
Prints and writes JSON.

    .venv/bin/python benchmarks/generation_speed.py --n 30 --heads 20 --out runs/bench_generation.json
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np
import torch


def write_task(path: Path, n: int, shots: int) -> None:
    from celtk.tasks.arithmetic import generate

    rows = [{"id": e.id, "prompt": e.context, "target": e.target} for e in generate("2da", n, seed=1)]
    rows += [{"id": f"shot-{e.id}", "prompt": e.context, "target": e.target, "split": "fewshot"}
             for e in generate("2da", shots, seed=2)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def naive(model, task, examples, shots, heads, batch_size: int) -> list[bool]:
    """For each head: ablate, then batched ``generate()`` with the task's stop strings; grade."""
    from celtk import ablate
    from celtk.evaluation.prompts import format_prompt

    tok, stop = model.tokenizer, task.stop_strings()
    prompts = [format_prompt(model, task, e, shots, False) for e in examples]
    out = []
    side, tok.padding_side = tok.padding_side, "left"
    try:
        with ablate(model, heads), torch.no_grad():
            for start in range(0, len(prompts), batch_size):
                enc = tok(prompts[start:start + batch_size], return_tensors="pt", padding=True)
                gen = model.hf_model.generate(**enc, do_sample=False, max_new_tokens=task.max_new_tokens(),
                                              pad_token_id=tok.pad_token_id, stop_strings=stop, tokenizer=tok)
                for row, example in zip(gen[:, enc.input_ids.shape[1]:], examples[start:start + batch_size],
                                        strict=True):
                    text = tok.decode(row, skip_special_tokens=True)
                    cuts = [text.index(s) for s in stop if s in text]
                    out.append(task.grade_generation(example, text[:min(cuts)] if cuts else text, False))
    finally:
        tok.padding_side = side
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--heads", type=int, default=20)
    parser.add_argument("--shots", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=30)
    parser.add_argument("--rows-per-pass", type=int, default=120)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", default="runs/bench_generation.json")
    parser.add_argument("--allocator", choices=["keep", "glibc"], default="keep",
                        help="keep: celtk.cli.allocator.keep_freed_memory(), as the CLI does; glibc: "
                             "the C library's default")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from celtk.cli.allocator import keep_freed_memory

    kept = keep_freed_memory() if args.allocator == "keep" else False
    if args.allocator == "keep" and not kept:
        parser.error("--allocator keep did not take effect here (glibc only, CELTK_KEEP_FREED_MEMORY unset); "
                     "use --allocator glibc")

    from celtk import Head, HeadSet, get_task, load_model
    from celtk.evaluation.prompts import prepare
    from celtk.screening.generation import GenerationScreener
    from celtk.tasks.jsonl import jsonl_spec

    data = Path(args.out).with_suffix(".task.jsonl")
    write_task(data, args.n, args.shots)
    task = get_task(jsonl_spec(str(data), "generate", max_new_tokens=8))
    pools = task.load_pools()
    examples, shots = pools.discovery, pools.fewshot
    model = load_model("smollm2-135m")
    layers = np.linspace(0, model.n_layers - 1, args.heads).round().astype(int)
    sets = [HeadSet((Head(int(layer), i % model.n_heads),)) for i, layer in enumerate(layers)]
    naive(model, task, examples, shots, HeadSet((Head(1, 1),)), args.batch_size)  # warm-up, not timed

    def screen() -> tuple:
        screener = GenerationScreener(model, prepare(model, task, examples, shots), task, batch_size=args.batch_size,
                                      rows_per_pass=args.rows_per_pass)
        return screener, *screener.run(sets)

    cold, (_, _, first) = measured(screen)  # the process's first screen: its memory is faulted in
    warm, (screener, intact, screened) = measured(screen)  # what every later chunk of a long screen costs
    same_as_cold = sum(first[s].correct.tolist() == screened[s].correct.tolist() for s in sets)
    naive_m, reference = measured(lambda: {s: naive(model, task, examples, shots, s, args.batch_size) for s in sets})

    agree = sum(int(np.array_equal(screened[s].correct, np.array(reference[s]))) for s in sets)
    assert agree == len(sets), f"verdicts differ on {len(sets) - agree} of {len(sets)} heads"
    assert same_as_cold == len(sets), "the two screener runs disagree"
    ablated_tokens = sum(e.extra["new_tokens"] for s in sets for e in screened[s].examples)
    naive_s, screen_s = naive_m["wall_s"], warm["wall_s"]
    report = {"model": "smollm2-135m", "n_examples": args.n, "shots": args.shots, "heads": [str(s) for s in sets],
              "threads": torch.get_num_threads(), "allocator": args.allocator, "keep_freed_memory_took_effect": kept,
              "prefix_tokens": screener.prefix_len, "rows_per_pass": args.rows_per_pass,
              "intact_accuracy": intact.accuracy, "ablated_accuracy_range": [min(screened[s].accuracy for s in sets),
                                                                             max(screened[s].accuracy for s in sets)],
              "naive": naive_m, "screener_cold": cold, "screener_warm": warm,
              "seconds_per_head": {"naive": naive_s / len(sets), "screener_warm": screen_s / len(sets),
                                   "screener_cold": cold["wall_s"] / len(sets)},
              "speedup": naive_s / screen_s, "speedup_cold": naive_s / cold["wall_s"],
              "ablated_tokens_generated": ablated_tokens,
              "tokens_per_second": {"naive": ablated_tokens / naive_s,
                                    "screener": ablated_tokens / screen_s,
                                    "screener_incl_intact": screener.new_tokens / screen_s},
              "identical_verdicts_heads": f"{agree}/{len(sets)}"}
    print(json.dumps(report, indent=1))
    with open(args.out, "w") as handle:
        json.dump(report, handle, indent=1)


def measured(work):
    """``work()``'s wall, user and system seconds and minor page faults, and its result."""
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    out = work()
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    return {"wall_s": wall, "user_s": after.ru_utime - before.ru_utime, "system_s": after.ru_stime - before.ru_stime,
            "minor_faults": after.ru_minflt - before.ru_minflt}, out


if __name__ == "__main__":
    main()
