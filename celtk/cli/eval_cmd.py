"""``celtk eval``: score a model (optionally ablated) on a task and write eval.json."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from celtk.cli._common import console, progress_bar


@click.command("eval")
@click.option("--model", default="smollm2-135m", show_default=True, help="Alias, hub id, HF directory or .gguf file.")
@click.option("--task", required=True, help="e.g. arithmetic:2da, boolq, hellaswag, mbpp, jsonl:PATH.")
@click.option("--data", default=None, help="Local copy of a hub task's data (file or directory in the hub schema).")
@click.option("--ablate", "heads", default="", help="Heads to ablate, e.g. L5H3,L10H0.")
@click.option("--split", type=click.Choice(["discovery", "heldout", "all"]), default="discovery", show_default=True)
@click.option("--limit", type=int, default=None, help="Number of examples (default: all of the split).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--fewshot", type=int, default=0, show_default=True, help="Shots per prompt (lm-eval's num_fewshot).")
@click.option("--chat/--no-chat", default=False, show_default=True, help="Wrap prompts in the tokenizer's chat template.")
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option("--device", default="cpu", show_default=True)
@click.option("--dtype", default="float32", show_default=True)
@click.option("--allow-code-execution", is_flag=True, help="Run model-written code (MBPP) in the sandbox.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Output directory.")
def eval_cmd(model, task, data, heads, split, limit, seed, fewshot, chat, batch_size, device, dtype,
             allow_code_execution, out) -> None:
    """Evaluate MODEL on TASK; write OUT/eval.json with per-example results."""
    from celtk.errors import ConfigError
    from celtk.evaluator import EvalConfig, evaluate
    from celtk.heads import HeadSet
    from celtk.models import load_model
    from celtk.runstore import locked, write_json
    from celtk.tasks import get_task, make_splits

    head_set = HeadSet.parse(heads)
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, got {batch_size}.")
    the_task = get_task(task, data_path=data)
    n_disc = limit if split == "discovery" else (0 if split == "heldout" else None)
    n_held = limit if split == "heldout" else (0 if split == "discovery" else None)
    splits = make_splits(the_task, n_disc, n_held, seed=seed, fewshot=fewshot)
    examples = {"discovery": splits.discovery, "heldout": splits.heldout, "all": splits.discovery + splits.heldout}[split]
    if split == "all" and limit is not None:
        examples = examples[:limit]
    with locked(Path(out)):
        loaded = load_model(model, device=device, dtype=dtype)
        loaded.validate_heads(head_set)
        config = EvalConfig(batch_size=batch_size, fewshot=fewshot, chat=chat, seed=seed, allow_code=allow_code_execution)
        with progress_bar() as progress:
            result = evaluate(loaded, the_task, examples, splits.shots, head_set, config,
                              progress=lambda done, total: progress("eval", done, total))
        document = {
            "model": loaded.name, "task": the_task.full_name, "heads": head_set.names(), "n": len(result.examples),
            "accuracy": result.accuracy, "examples": result.to_json(),
            "config": {**asdict(config), "split": split, "limit": limit, "data": data, "device": device, "dtype": dtype,
                       "model": loaded.describe(), "task": the_task.config(), "splits": splits.manifest()},
        }
        write_json(Path(out) / "eval.json", document)
    console().print(f"[bold]{the_task.full_name}[/] on [bold]{loaded.name}[/]"
                    f"{' ablated ' + str(head_set) if len(head_set) else ''}: accuracy "
                    f"[bold]{result.accuracy:.2%}[/] on {len(result.examples)} {split} examples → {out}/eval.json")


COMMANDS = [eval_cmd]
