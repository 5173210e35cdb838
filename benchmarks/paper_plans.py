"""The planning page's table: `celtk plan` for the paper's three 3 B models on its four tasks at its sizes, one L40S
(bf16, batch 8), written into docs/planning.md between its markers.

    .venv/bin/python benchmarks/paper_plans.py            # prints the table and rewrites the page's copy

Each row is ``celtk plan --model-config examples/configs/MODEL.json --task TASK --preset paper --device cuda
--dtype bfloat16 --batch-size 8 --json`` (about a second each, configs only: no weights).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from page_markers import write_between  # noqa: E402

from celtk.cli.plan_cmd import _duration as duration  # noqa: E402  (a time as `celtk plan` prints it)

MODELS = ("Llama-3.2-3B-Instruct", "Qwen2.5-3B-Instruct", "SmolLM3-3B")
TASKS = ("arithmetic", "boolq", "hellaswag", "mbpp")
PAGE = ROOT / "docs" / "planning.md"
START, END = "<!-- paper plans: benchmarks/paper_plans.py -->", "<!-- /paper plans -->"


def row(model: str, task: str) -> str:
    out = subprocess.run([sys.executable, "-m", "celtk.cli", "plan", "--model-config",
                          str(ROOT / "examples" / "configs" / f"{model}.json"), "--task", task, "--preset", "paper",
                          "--device", "cuda", "--dtype", "bfloat16", "--batch-size", "8", "--json"],
                         check=True, capture_output=True, text=True).stdout
    screen, select, test = json.loads(out)["stages"]
    cells = [f"{s['flops'] / 1e15:.0f} / {s['peak_bytes'] / 1e9:.1f} / {duration(s['seconds'])}"
             for s in (screen, select)]
    return (f"| {model} | {task} | {cells[0]} | {cells[1]} | {test['peak_bytes'] / 1e9:.1f} / "
            f"{duration(test['seconds'])} | {screen['activation_bytes'] / 1e9:.2f} |")


def main() -> None:
    lines = ["| model | task | screen: PFLOP / peak GB / time | select: PFLOP / peak GB / time | "
             "test (streamed): peak GB / time | screen activations GB |", "|---|---|---|---|---|---|"]
    lines += [row(model, task) for model in MODELS for task in TASKS]
    table = "\n".join(lines)
    print(table)
    write_between(PAGE, START, END, table, "paper plan table")


if __name__ == "__main__":
    main()
