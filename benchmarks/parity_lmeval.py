"""Parity with lm-evaluation-harness on arithmetic: per-example correctness and target log-likelihoods.

Generator mode (default): runs celtk and `lm_eval --model hf` on the same examples (celtk's
prompts, three shots baked in, written to a local JSON file that a task YAML points at), for the
intact model and for an ablation exported with `export_ablated`, and compares example by example.

Official mode (`--official`): writes raw GPT-3-format lines (`{"context": "\\n\\nQ: What is 98 plus
45?\\n\\nA:", "completion": " 143"}`) as the hub's data files, reads them through celtk's
official-data path (`--data DIR`), and runs lm-eval's own `arithmetic_<sub>` task (its YAML and its
`process_docs`, included unchanged, only the data file pointed at the local copy), 0-shot.

    python3 -m venv /tmp/lmeval-venv && \\
        /tmp/lmeval-venv/bin/pip install torch==2.13.0 "lm-eval==0.4.*" "transformers<5.24" accelerate
    .venv/bin/python benchmarks/parity_lmeval.py --n 200 --out runs/parity --lmeval-python /tmp/lmeval-venv/bin/python
    .venv/bin/python benchmarks/parity_lmeval.py --official --n 50 --out runs/parity-official \\
        --lmeval-python /tmp/lmeval-venv/bin/python
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
    from celtk.evaluation import evaluate
    from celtk.evaluation.prompts import prepare
    from celtk.evaluation.results import EvalConfig

    result = evaluate(model, task, examples, shots, heads, EvalConfig(batch_size=32))
    prompts = prepare(model, task, examples, shots).prompts
    return prompts, result


def lmeval_side(model_dir: Path, yaml: str, name: str, out: Path, reuse: bool, python: str) -> list[tuple[float, bool]]:
    include = out / f"tasks_{name}"
    include.mkdir(parents=True, exist_ok=True)
    (include / f"{name}.yaml").write_text(yaml)
    cmd = [python, "-m", "lm_eval", "--model", "hf", "--model_args", f"pretrained={model_dir},dtype=float32",
           "--tasks", f"celtk_parity_{name}", "--include_path", str(include), "--log_samples",
           "--output_path", str(out / f"lmeval_{name}"), "--batch_size", "16", "--device", "cpu"]
    pattern = str(out / f"lmeval_{name}" / "**" / f"samples_celtk_parity_{name}_*.jsonl")
    if not (reuse and glob.glob(pattern, recursive=True)):
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in open(sorted(glob.glob(pattern, recursive=True))[-1])]
    rows.sort(key=lambda r: r["doc_id"])
    # lm-eval logs (log-likelihood, is_greedy) as strings; its per-sample `acc` is the verdict
    return [(float(r["filtered_resps"][0][0]), bool(r["acc"])) for r in rows]


OFFICIAL_YAML = """include: {lm_eval_yaml}
task: celtk_parity_{name}
tag: []
dataset_kwargs:
  data_files:
    validation: {data}
"""


def write_raw_lines(out: Path, subtasks: list[str], n: int) -> Path:
    """Raw GPT-3-format lines (drawn by celtk's generator, written as the official files are)
    in the hub's layout, ``DIR/data/two_digit_addition.jsonl`` ..."""
    from celtk.tasks.arithmetic import OFFICIAL_FILES, generate

    root = out / "raw"
    (root / "data").mkdir(parents=True, exist_ok=True)
    for sub in subtasks:
        lines = []
        for e in generate(sub, n, seed=7):
            question = e.context[len("Question: "):-len("\nAnswer:")]
            lines.append(json.dumps({"context": f"\n\nQ: {question}\n\nA:", "completion": e.target}) + "\n")
        (root / "data" / f"{OFFICIAL_FILES[sub]}.jsonl").write_text("".join(lines))
    return root


def official(args, model, out: Path) -> dict:
    """celtk's official-data path against lm-eval's own arithmetic task, on the same raw lines."""
    from celtk import HeadSet, export_ablated, get_task
    from celtk.tasks.arithmetic import OFFICIAL_FILES

    subtasks = args.subtasks.split(",")
    root = write_raw_lines(out, subtasks, args.n)
    tasks_dir = subprocess.run([args.lmeval_python, "-c",
                                "import lm_eval, os; print(os.path.dirname(lm_eval.__file__))"],
                               check=True, capture_output=True, text=True).stdout.strip() + "/tasks/arithmetic"
    report = {"n_per_subtask": args.n, "subtasks": subtasks, "model": "smollm2-135m",
              "mode": "official raw lines, 0-shot", "runs": {}}
    for variant, heads in (("intact", HeadSet()), ("ablated", HeadSet.parse(args.heads))):
        model_dir = out / f"model_{variant}"
        if not model_dir.exists():
            export_ablated(model, heads, model_dir)
        diffs, agree, n, ours_right, theirs_right = [], 0, 0, 0, 0
        for sub in subtasks:
            task = get_task(f"arithmetic:{sub}", data_path=str(root))
            examples = task.load_pools().discovery  # the official path holds some rows back for shots
            rows = {int(e.id.split("-")[1]): e for e in examples}
            _, ours = celtk_side(model, task, examples, [], heads)
            yaml = OFFICIAL_YAML.format(lm_eval_yaml=f"{tasks_dir}/arithmetic_{sub}.yaml", name=f"{variant}_{sub}",
                                        data=root / "data" / f"{OFFICIAL_FILES[sub]}.jsonl")
            theirs = lmeval_side(model_dir, yaml, f"{variant}_{sub}", out, args.reuse, args.lmeval_python)
            by_row = dict(zip(rows, ours.examples, strict=True))
            for doc_id, (ll, greedy) in enumerate(theirs):
                if doc_id in by_row:
                    mine = by_row[doc_id]
                    diffs.append(abs(mine.logprob - ll))
                    agree += mine.correct == greedy
                    ours_right += mine.correct
                    theirs_right += greedy
                    n += 1
        report["runs"][variant] = {"heads": heads.names(), "n": n, "agreement": agree / n,
                                   "max_abs_logprob_diff": max(diffs),
                                   "celtk_accuracy": ours_right / n, "lmeval_accuracy": theirs_right / n}
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--heads", default="L14H3,L1H2")
    parser.add_argument("--out", default="runs/parity")
    parser.add_argument("--reuse", action="store_true", help="reuse lm-eval sample logs already in --out")
    parser.add_argument("--lmeval-python", default=sys.executable, help="the interpreter that has lm-eval installed")
    parser.add_argument("--official", action="store_true", help="raw GPT-3 lines through the official-data path")
    parser.add_argument("--subtasks", default="2da,1dc", help="official mode: which subtasks")
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.official:
        from celtk import load_model

        report = official(args, load_model("smollm2-135m"), out)
        (out / "parity.json").write_text(json.dumps(report, indent=1) + "\n")
        print(json.dumps(report, indent=1))
        return

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
                                for p, e in zip(prompts, splits.discovery, strict=True)))
        theirs = lmeval_side(model_dir, YAML.format(name=name, data=data), name, out, args.reuse, args.lmeval_python)
        diffs = [abs(a.logprob - ll) for a, (ll, _) in zip(ours.examples, theirs, strict=True)]
        agree = sum(a.correct == g for a, (_, g) in zip(ours.examples, theirs, strict=True))
        report["runs"][name] = {"heads": heads.names(), "agreement": agree / len(theirs), "n": len(theirs),
                                "max_abs_logprob_diff": max(diffs), "celtk_accuracy": ours.accuracy,
                                "lmeval_accuracy": sum(g for _, g in theirs) / len(theirs)}
    (out / "parity.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
