"""Examples per second of celtk's teacher-forced evaluator against answering with `generate()`, and of its
shared-prefix passes (the three shots run once per pass) against its plain path (every prompt whole).

All on the same 500 arithmetic examples (three-shot, SmolLM2-135M, float32, batch 32), timed
side by side in one run, alternated; the per-example verdicts must agree (and the two evaluator paths'
log-probabilities be equal) before times are compared.

    .venv/bin/python benchmarks/eval_speed.py --n 500 --out runs/bench_eval.json
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats; medians are reported")
    parser.add_argument("--out", default="runs/bench_eval.json")
    args = parser.parse_args()

    from celtk import get_task, load_model, make_splits
    from celtk.evaluation import evaluate
    from celtk.evaluation.prompts import prepare
    from celtk.evaluation.results import EvalConfig
    from celtk.evaluation.shared_prefix import PLAIN_ENV, prefix_to_share

    model = load_model("smollm2-135m")
    task = get_task("arithmetic")
    splits = make_splits(task, args.n, 0, seed=1, fewshot=3)
    examples = splits.discovery

    prepared = prepare(model, task, examples, splits.shots)
    tok = model.tokenizer

    def run_ours():
        return evaluate(model, task, examples, splits.shots, config=EvalConfig(batch_size=args.batch_size))

    def run_plain():  # the same evaluator, every prompt run whole
        os.environ[PLAIN_ENV] = "1"
        try:
            return run_ours()
        finally:
            del os.environ[PLAIN_ENV]

    def run_generate():  # what a careful user writes: batches of equal target length, greedy, exact match
        verdicts = {}
        tok.padding_side = "left"
        try:
            for length in sorted({len(r.continuation) for r in prepared.requests}):
                idx = [i for i, r in enumerate(prepared.requests) if len(r.continuation) == length]
                for b in range(0, len(idx), args.batch_size):
                    chunk = idx[b:b + args.batch_size]
                    enc = tok([prepared.prompts[i] for i in chunk], return_tensors="pt", padding=True)
                    with torch.no_grad():
                        gen = model.hf_model.generate(**enc, do_sample=False, max_new_tokens=length,
                                                      pad_token_id=tok.pad_token_id)
                    for row, i in enumerate(chunk):
                        verdicts[i] = (gen[row, enc.input_ids.shape[1]:].tolist()
                                       == list(prepared.requests[i].continuation))
        finally:
            tok.padding_side = "right"
        return verdicts

    t_ours_all, t_plain_all, t_gen_all = [], [], []
    for _ in range(args.repeats):  # alternate so that background load hits all alike
        start = time.perf_counter()
        ours = run_ours()
        t_ours_all.append(time.perf_counter() - start)
        start = time.perf_counter()
        plain = run_plain()
        t_plain_all.append(time.perf_counter() - start)
        start = time.perf_counter()
        verdicts = run_generate()
        t_gen_all.append(time.perf_counter() - start)
    if [e.logprob for e in ours.examples] != [e.logprob for e in plain.examples]:
        raise SystemExit("the shared-prefix passes and the plain path disagree: no times are reported")
    t_ours, t_plain, t_gen = (float(np.median(t)) for t in (t_ours_all, t_plain_all, t_gen_all))
    agree = sum(verdicts[i] == e.correct for i, e in enumerate(ours.examples))
    report = {"n": len(examples), "batch_size": args.batch_size, "agreement": agree / len(examples),
              "shared_prefix_tokens": prefix_to_share(model, prepared),
              "celtk_examples_per_s": len(examples) / t_ours, "plain_examples_per_s": len(examples) / t_plain,
              "generate_examples_per_s": len(examples) / t_gen, "speedup": t_gen / t_ours,
              "speedup_over_plain": t_plain / t_ours, "repeats": args.repeats, "seconds_ours": t_ours_all,
              "seconds_plain": t_plain_all, "seconds_generate": t_gen_all, "threads": torch.get_num_threads()}
    print(json.dumps(report, indent=1))
    with open(args.out, "w") as handle:
        json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()
