"""``celtk eval``: score a model (optionally ablated) on a task and write eval.json."""

from __future__ import annotations

from pathlib import Path

import click

from celtk.cli._common import console, progress_bar


@click.command("eval")
@click.option("--model", default="smollm2-135m", show_default=True, help="Alias, hub id, HF directory or .gguf file.")
@click.option("--task", required=True, help="e.g. arithmetic:2da, boolq, hellaswag, mbpp, jsonl:PATH.")
@click.option("--data", default=None, help="Local copy of a hub task's data (file or directory in the hub schema).")
@click.option("--ablate", "heads", default="", help="Heads to ablate, e.g. L5H3,L10H0.")
@click.option("--split", type=click.Choice(["discovery", "heldout", "all"]), default="discovery", show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Number of examples (default: all of the split).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--fewshot", type=click.IntRange(min=0), default=0, show_default=True, help="Shots per prompt (lm-eval's num_fewshot).")
@click.option("--chat/--no-chat", default=False, show_default=True, help="Wrap prompts in the tokenizer's chat template.")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--dtype", default="float32", show_default=True)
@click.option("--allow-code-execution", is_flag=True, help="Run model-written code (MBPP) in the sandbox.")
@click.option("--ablation", default="zero", show_default=True,
              help="What replaces an ablated head's z: zero (the paper's), mean, resample or scale:α (e.g. scale:0.5).")
@click.option("--reference", type=click.IntRange(min=1), default=100, show_default=True,
              help="With --ablation mean/resample: discovery examples the values are measured on.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Output directory.")
def eval_cmd(model, task, data, heads, split, limit, seed, fewshot, chat, batch_size, device, dtype,
             allow_code_execution, ablation, reference, out) -> None:
    """Evaluate MODEL on TASK; write OUT/eval.json with per-example results."""
    from celtk.run.eval import run_eval

    with progress_bar() as progress:
        doc = run_eval(Path(out), model=model, task=task, data=data, heads=heads, split=split, limit=limit, seed=seed,
                       fewshot=fewshot, chat=chat, batch_size=batch_size, device=device, dtype=dtype,
                       allow_code=allow_code_execution, ablation=ablation, reference=reference, progress=progress)
    ablated = f" ablated {','.join(doc['heads'])}" if doc["heads"] else ""
    console().print(f"[bold]{doc['task']}[/] on [bold]{doc['model']}[/]{ablated}: accuracy "
                    f"[bold]{doc['accuracy']:.2%}[/] on {doc['n']} {split} examples → {out}/eval.json")
    if split == "all" and doc["held_back"]:
        console().print(_held_back_note(doc["held_back"]))


def _held_back_note(rows: list[dict]) -> str:
    """What `--split all` did not score: the task's few-shot reserve and rows repeating another's content."""
    from celtk.tasks._splits import FEWSHOT_POOL

    reserve = [r["id"] for r in rows if r["reason"] == FEWSHOT_POOL]
    repeats = len(rows) - len(reserve)
    parts = []
    if reserve:
        shown = ", ".join(reserve[:5]) + (", …" if len(reserve) > 5 else "")
        parts.append(f"{len(reserve)} in the task's few-shot pool ({shown}), which is set aside whatever --fewshot is, "
                     "so discovery and held-out sets stay the same for every shot count")
    if repeats:
        parts.append(f"{repeats} repeating another row's content (each scored once)")
    return f"Held back {len(rows)} row(s) of the task's data, in no split: {'; '.join(parts)}. Ids and reasons: eval.json 'held_back'."


COMMANDS = [eval_cmd]
