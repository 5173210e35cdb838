"""``celtk plan``: FLOPs, peak memory and time of each stage, before any work, from a config alone."""

from __future__ import annotations

import click

from celtk.cli._common import FiniteFloatRange, console

DEVICES = {  # sustained dense bf16 throughput assumed, usable memory
    "l40s": (120e12, 46e9),
    "a100-80gb": (150e12, 80e9),
    "h100": (300e12, 80e9),
}


def _config_of(config_path: str | None, model: str | None):
    """The model's config only (no weights): a config.json, a directory, an alias or a hub id."""
    from celtk.errors import ConfigError

    if config_path:
        return config_path
    if not model:
        raise ConfigError("celtk plan needs --config PATH (an HF config.json) or --model NAME.")
    from pathlib import Path

    from celtk.models import ALIASES

    if model in ALIASES:
        from celtk.models import dequantized_dir

        return str(Path(dequantized_dir(ALIASES[model].locate())) / "config.json")
    if Path(model).is_file():
        return model
    if (Path(model) / "config.json").is_file():
        return str(Path(model) / "config.json")
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(model)
    except OSError as error:
        raise ConfigError(f"Cannot read the config of {model!r} ({error}); pass --config PATH to a "
                          "config.json.") from None


def _size(n: float, unit: str) -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if n >= scale:
            return f"{n / scale:.2f} {prefix}{unit}"
    return f"{n:.0f} {unit}"


def _duration(seconds: float) -> str:
    return (f"{seconds / 3600:.2f} h" if seconds >= 3600
            else f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s")


@click.command("plan")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="An HF config.json (no weights needed).")
@click.option("--model", default=None, help="Alias, HF directory or hub id; only its config is read.")
@click.option("--task", default="arithmetic", show_default=True,
              help="arithmetic, boolq, hellaswag or mbpp (paper sizes and token estimates).")
@click.option("--discovery", type=click.IntRange(min=1), default=None,
              help="Discovery examples (default: the paper's).")
@click.option("--heldout", type=click.IntRange(min=1), default=None, help="Held-out examples (default: the paper's).")
@click.option("--prompt-tokens", type=click.IntRange(min=1), default=None,
              help="Longest prompt in tokens (default: the task's estimate).")
@click.option("--mean-prompt-tokens", type=click.IntRange(min=1), default=None, help="Mean prompt in tokens.")
@click.option("--chat-tokens", type=click.IntRange(min=0), default=0, show_default=True,
              help="Tokens the chat template adds to each prompt.")
@click.option("--fewshot-tokens", type=click.IntRange(min=0), default=0, show_default=True,
              help="Tokens of shots shared by every prompt.")
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--p", "pool", type=click.IntRange(min=1), default=10, show_default=True,
              help="Algorithm 1's pool of top heads.")
@click.option("--k", type=click.IntRange(min=1), default=3, show_default=True,
              help="Largest head set Algorithm 1 scores.")
@click.option("--rows-per-pass", type=click.IntRange(min=1), default=None,
              help="Rows (examples × ablations) per forward; default = batch size.")
@click.option("--dtype", default="bfloat16", show_default=True)
@click.option("--device", "device_name", type=click.Choice(sorted(DEVICES)), default="l40s", show_default=True)
@click.option("--device-flops", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Sustained FLOP/s (overrides --device).")
@click.option("--device-memory", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Usable device memory in bytes (overrides --device).")
def plan_cmd(config_path, model, task, discovery, heldout, prompt_tokens, mean_prompt_tokens, chat_tokens,
             fewshot_tokens, batch_size, pool, k, rows_per_pass, dtype, device_name, device_flops,
             device_memory) -> None:
    """Estimate FLOPs, peak memory and time of screen, select and test, before any work."""
    from dataclasses import replace

    from rich.table import Table

    from celtk.errors import ConfigError, suggest
    from celtk.planning.plan import PAPER_TASKS, Device, plan_run

    if task not in PAPER_TASKS:
        raise ConfigError(f"celtk plan knows the sizes of {task!r} only if it is a paper task."
                          f"{suggest(task, PAPER_TASKS)}")
    size = PAPER_TASKS[task]
    longest = (prompt_tokens or size.prompt_tokens) + chat_tokens + fewshot_tokens
    mean = (mean_prompt_tokens or prompt_tokens or size.mean_prompt) + chat_tokens + fewshot_tokens
    size = replace(size, n_discovery=discovery if discovery is not None else size.n_discovery,
                   n_heldout=heldout if heldout is not None else size.n_heldout, prompt_tokens=longest,
                   mean_prompt_tokens=mean,
                   shared_prefix=fewshot_tokens + chat_tokens if size.kind != "generate" else 0)
    flops, memory = DEVICES[device_name]
    device = Device(device_name, device_flops or flops, device_memory or memory)
    stages = plan_run(_config_of(config_path, model), size, device, batch_size=batch_size, rows_per_pass=rows_per_pass,
                      dtype=dtype, pool=pool, k=k)
    table = Table(title=f"{config_path or model} · {task} ({size.n_discovery}/{size.n_heldout}) · {device.name} "
                        f"({device.flops_per_second / 1e12:.0f} TFLOP/s, {device.memory_bytes / 1e9:.0f} GB) · {dtype}")
    for column in ("stage", "evaluations", "FLOPs", "weights", "activations", "peak", "time", "fits"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for s in stages:
        table.add_row(s.stage, str(s.evaluations), _size(s.flops, "FLOP"), _size(s.weight_bytes, "B"),
                      _size(s.activation_bytes, "B"), _size(s.peak_bytes, "B"), _duration(s.seconds),
                      "yes" if s.fits else "[red]no[/red]")
    console().print(table)


COMMANDS = [plan_cmd]
