"""Parity with lm-evaluation-harness on arithmetic: per-example correctness and target log-likelihoods.

Runs celtk and `lm_eval --model hf` on the same examples (celtk's prompts, three shots baked in,
written to a local JSON file that a task YAML points at), for the intact model and for an
ablation exported with `export_ablated`, and compares example by example.

    .venv/bin/pip install lm-eval==0.4.13 "transformers<5.24"
    .venv/bin/python benchmarks/parity_lmeval.py --n 200 --out runs/parity
"""

from __future__ import annotations

import argparse
import glob
import json
import subprocess
import sys
from pathlib import Path

YAML = """task: celtk_parity_{name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{completion}}}}"
target_delimiter: ""
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def celtk_side(model, task, examples, shots, heads):
    from celtk.evaluator import EvalConfig, evaluate, prepare

    result = evaluate(model, task, examples, shots, heads, EvalConfig(batch_size=32))
    prompts = prepare(model, task, examples, shots).prompts
    return prompts, result


def lmeval_side(model_dir: Path, data: Path, name: str, out: Path, reuse: bool) -> list[tuple[float, bool]]:
    include = out / f"tasks_{name}"
    include.mkdir(parents=True, exist_ok=True)
    (include / f"{name}.yaml").write_text(YAML.format(name=name, data=data))
    cmd = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={model_dir},dtype=float32",
           "--tasks", f"celtk_parity_{name}", "--include_path", str(include), "--log_samples",
           "--output_path", str(out / f"lmeval_{name}"), "--batch_size", "16", "--device", "cpu"]
    pattern = str(out / f"lmeval_{name}" / "**" / f"samples_celtk_parity_{name}_*.jsonl")
    if not (reuse and glob.glob(pattern, recursive=True)):
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in open(sorted(glob.glob(pattern, recursive=True))[-1])]
    rows.sort(key=lambda r: r["doc_id"])
    # lm-eval logs (log-likelihood, is_greedy) as strings; its per-sample `acc` is the verdict
    return [(float(r["filtered_resps"][0][0]), bool(r["acc"])) for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--heads", default="L14H3,L1H2")
    parser.add_argument("--out", default="runs/parity")
    parser.add_argument("--reuse", action="store_true", help="reuse lm-eval sample logs already in --out")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)

    from celtk import HeadSet, export_ablated, get_task, load_model, make_splits

    model = load_model("smollm2-135m")
    task = get_task("arithmetic")
    splits = make_splits(task, args.n, 0, seed=1, fewshot=3)
    report = {"n": args.n, "model": "smollm2-135m", "task": "arithmetic (all subtasks), 3-shot, seed 1", "runs": {}}
    for name, heads in (("intact", HeadSet()), ("ablated", HeadSet.parse(args.heads))):
        model_dir = out / f"model_{name}"
        if not model_dir.exists():
            export_ablated(model, heads, model_dir)
        prompts, ours = celtk_side(model, task, splits.discovery, splits.shots, heads)
        data = out / f"data_{name}.json"
        data.write_text("".join(json.dumps({"context": p, "completion": e.target}) + "\n"
                                for p, e in zip(prompts, splits.discovery)))
        theirs = lmeval_side(model_dir, data, name, out, args.reuse)
        diffs = [abs(a.logprob - ll) for a, (ll, _) in zip(ours.examples, theirs)]
        agree = sum(a.correct == g for a, (_, g) in zip(ours.examples, theirs))
        report["runs"][name] = {"heads": heads.names(), "agreement": agree / len(theirs), "n": len(theirs),
                                "max_abs_logprob_diff": max(diffs), "celtk_accuracy": ours.accuracy,
                                "lmeval_accuracy": sum(g for _, g in theirs) / len(theirs)}
    (out / "parity.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
