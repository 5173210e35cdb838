"""``celtk eval``: score a model (optionally ablated) on a task and write eval.json."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from celtk.cli._common import console, progress_bar
from celtk.run.options import EVAL, RUN

if TYPE_CHECKING:  # annotations only: the document loads with the stage
    from celtk.store.documents import HeldBack


@click.command("eval")
@click.option("--model", default=EVAL.model, show_default=True, help="Alias, hub id, HF directory or .gguf file.")
@click.option("--task", default=None, help="e.g. arithmetic:2da, boolq, hellaswag, mbpp, jsonl:PATH (not with --run).")
@click.option("--data", default=None, help="Local copy of a hub task's data (file or directory in the hub schema).")
@click.option("--ablate", "heads", default="", help="Heads to ablate, e.g. L5H3,L10H0.")
@click.option("--split", type=click.Choice(["discovery", "heldout", "all"]), default=EVAL.split, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Number of examples (default: all of the split).")
@click.option("--seed", type=click.IntRange(min=0), default=EVAL.seed, show_default=True)
@click.option("--fewshot", type=click.IntRange(min=0), default=None,
              help=f"Shots per prompt (default {RUN.fewshot}, as celtk run uses; lm-eval's num_fewshot "
                   "defaults to 0: pass --fewshot 0 to compare with it).")
@click.option("--chat/--no-chat", default=EVAL.chat, show_default=True,
              help="Wrap prompts in the tokenizer's chat template.")
@click.option("--chat-date", default=EVAL.chat_date, show_default=True, help="ISO date chat templates see as 'today'.")
@click.option("--run", "run", default=None, type=click.Path(file_okay=False, exists=True),
              help="With --split heldout: a run directory; its task, data, seed, shots and held-out set are used and "
                   "the look is logged in its heldout_log.jsonl.")
@click.option("--exploratory", is_flag=True, help="With --split heldout and no --run: score the task's held-out pool "
              "outside any run (recorded in eval.json).")
@click.option("--batch-size", type=click.IntRange(min=1), default=EVAL.batch_size, show_default=True)
@click.option("--device", default=EVAL.device, show_default=True)
@click.option("--dtype", default=EVAL.dtype, show_default=True)
@click.option("--allow-code-execution", is_flag=True, help="Run model-written code (MBPP) in the sandbox.")
@click.option("--ablation", default=EVAL.ablation, show_default=True,
              help="What replaces an ablated head's z: zero (the paper's), mean, resample or scale:α (e.g. scale:0.5).")
@click.option("--reference", type=click.IntRange(min=1), default=None,
              help="With --ablation mean/resample: discovery examples the values are measured on (default: what the "
                   "task's discovery split holds, at most 100).")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Output directory.")
def eval_cmd(model: str, task: str | None, data: str | None, heads: str, split: str, limit: int | None, seed: int,
             fewshot: int | None, chat: bool, chat_date: str, run: str | None, exploratory: bool, batch_size: int,
             device: str, dtype: str, allow_code_execution: bool, ablation: str, reference: int | None,
             out: str) -> None:
    """Evaluate MODEL on TASK; write OUT/eval.json with per-example results. A run's held-out set:
    --split heldout --run DIR."""
    from click.core import ParameterSource

    from celtk.run.eval import run_eval

    if run is not None:  # the run fixes these: a value given here would be silently ignored
        ctx = click.get_current_context()
        given = [f"--{name.replace('_', '-')}" for name in ("model", "task", "data", "seed", "fewshot", "chat",
                                                             "chat_date")
                 if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
        if given:
            raise click.UsageError(f"--run scores the run's held-out set with the run's own model, task, data, seed, "
                                   f"shots and template; {', '.join(given)} cannot change them. Leave "
                                   f"{'it' if len(given) == 1 else 'them'} out, or evaluate outside the run.")
    with progress_bar() as progress:
        doc = run_eval(Path(out), model=model, task=task, data=data, heads=heads, split=split, limit=limit, seed=seed,
                       fewshot=fewshot, chat=chat, chat_date=chat_date, batch_size=batch_size, device=device,
                       dtype=dtype, allow_code=allow_code_execution, run=Path(run) if run else None,
                       exploratory=exploratory, ablation=ablation, reference=reference, progress=progress)
    ablated = f" ablated {doc.heads}" if len(doc.heads) else ""
    stderr = f" ± {doc.accuracy_stderr:.2%} (standard error)" if doc.accuracy_stderr is not None else ""
    console().print(f"[bold]{doc.task}[/] on [bold]{doc.model}[/]{ablated}: accuracy "
                    f"[bold]{doc.accuracy:.2%}[/]{stderr} on {doc.n} {split} examples → {out}/eval.json")
    if doc.config.get("run"):
        console().print(f"Logged as look {doc.config['look']} of {doc.config['run']}'s held-out set "
                        "(exploratory: the run's test stays its result).")
    elif doc.config.get("exploratory"):
        console().print("[yellow]Held-out pool scored outside any run (--exploratory): no run's log records it.[/]")
    if split == "all" and doc.held_back:
        console().print(_held_back_note(doc.held_back))


def _held_back_note(rows: list[HeldBack]) -> str:
    """What no split holds, as counts: the task's few-shot reserve and rows repeating another's content (the ids and
    reasons are eval.json's ``held_back``)."""
    from celtk.tasks import FEWSHOT_POOL

    reserve = sum(r.reason == FEWSHOT_POOL for r in rows)
    repeats = len(rows) - reserve
    parts = []
    if reserve:
        parts.append(f"{reserve} in the task's few-shot pool (set aside whatever --fewshot is, so discovery and "
                     "held-out sets stay the same for every shot count)")
    if repeats:
        parts.append(f"{repeats} repeating another row's content (each scored once)")
    return (f"Held back {len(rows)} row(s) of the task's data, in no split: {'; '.join(parts)}. "
            "Ids: eval.json 'held_back'.")


COMMANDS = [eval_cmd]
