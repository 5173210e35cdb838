"""``celtk plan``: FLOPs, peak memory and time of each stage, before any work, from a config alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from celtk.cli._common import FiniteFloatRange, console
from celtk.run.options import RUN

if TYPE_CHECKING:  # annotations only: `celtk --help` loads neither transformers nor the run settings
    from transformers import PretrainedConfig

    from celtk.planning.plan import Device
    from celtk.run.config import RunConfig

GPUS = {  # the GPUs a cuda device is planned as: sustained dense bf16 throughput assumed, usable memory
    "l40s": (120e12, 46e9),
    "a100-80gb": (150e12, 80e9),
    "h100": (300e12, 80e9),
}


def _config_of(config_path: str | None, model: str) -> str | PretrainedConfig:
    """The model's config only (no weights): a config.json, a directory, an alias or a hub id."""
    from celtk.errors import ConfigError

    if config_path:
        return config_path
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
        config: PretrainedConfig = AutoConfig.from_pretrained(model)
        return config
    except OSError as error:
        raise ConfigError(f"Cannot read the config of {model!r} ({error}); pass --model-config PATH to a "
                          "config.json.") from None


def _size(n: float, unit: str) -> str:
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if n >= scale:
            return f"{n / scale:.2f} {prefix}{unit}"
    return f"{n:.0f} {unit}"


def _duration(seconds: float) -> str:
    return (f"{seconds / 3600:.2f} h" if seconds >= 3600
            else f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s")


def _memory_available() -> float:
    """This machine's available memory (the kernel's MemAvailable), read without torch; 4 GiB where unknown."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return float(int(line.split()[1]) * 1024)
    except OSError:
        pass
    return float(4 << 30)


def _device(device: str, gpu: str, flops: float | None, memory: float | None) -> Device:
    """The device the plan assumes: for ``--device cpu`` this machine's memory and no throughput unless
    ``--device-flops`` gives one (no time is estimated then); for cuda (or auto) the GPU ``--gpu`` names."""
    from celtk.errors import ConfigError
    from celtk.planning.plan import Device

    if device == "cpu":
        return Device("cpu (this machine)", flops, memory or _memory_available())
    if device in ("cuda", "auto") or device.startswith("cuda:"):
        gpu_flops, gpu_memory = GPUS[gpu]
        return Device(gpu, flops or gpu_flops, memory or gpu_memory)
    raise ConfigError(f"Unknown device {device!r}; --device takes what `celtk run` takes: cpu, cuda, cuda:N or auto "
                      f"(the GPU to plan for is --gpu: {', '.join(sorted(GPUS))}).")


def _run_settings(config_file: str | None, preset: str | None, flags: dict[str, object]) -> RunConfig:
    """The settings the plan is for, resolved as `celtk run` resolves them (defaults < preset < --config < flags), so
    every shared flag means and defaults to what it does there; only the settings a plan reads are kept (a paper
    preset's data source does not change its cost)."""
    from celtk.errors import ConfigError
    from celtk.run.config import RunConfig, load_config_file
    from celtk.run.presets import preset_values

    values = load_config_file(config_file)
    if {"hidden_size", "n_embd", "num_hidden_layers", "n_layer"} & set(values):
        raise ConfigError(f"{config_file} is a model's config.json; give it as --model-config {config_file} (--config "
                          "is a run's settings file, as on `celtk run`).")
    values.update({k: v for k, v in flags.items() if v is not None})
    preset = values.pop("preset", None) if preset is None else preset
    if preset is not None:
        values = preset_values(preset, values.get("task")) | values
    where = str(config_file) if config_file else "overrides"
    if set(values) - set(RunConfig.keys()):  # an unknown key: refused as `celtk run` refuses it, naming the valid ones
        RunConfig.from_dict(values, where)
    return RunConfig.from_dict({k: v for k, v in values.items() if k in PLANNED}, where)


PLANNED = ("model", "task", "discovery", "heldout", "fewshot", "batch_size", "device", "dtype", "p", "k")
"""The run settings a plan reads."""


@click.command("plan")
@click.option("--preset", default=None, help="Settings bundle, as on `celtk run`: 'paper' (the paper's sizes for the "
              "task) or 'paper:TASK'.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="A run's JSON or TOML settings, as on `celtk run` (flags override).")
@click.option("--model-config", "model_config", type=click.Path(dir_okay=False), default=None,
              help="An HF config.json to plan for (no weights needed; GPT-2 style keys too) instead of --model's.")
@click.option("--model", default=None, help="Alias, HF directory or hub id; only its config is read (default "
              f"{RUN.model}, as on `celtk run`).")
@click.option("--task", default=None, help=f"Task, as on `celtk run` (default {RUN.task}); its family's token "
              "estimates (arithmetic, boolq, hellaswag, mbpp, humaneval) are used.")
@click.option("--discovery", type=click.IntRange(min=1), default=None,
              help=f"Discovery examples (default {RUN.discovery}; the "
              "paper's with --preset paper).")
@click.option("--heldout", type=click.IntRange(min=1), default=None,
              help=f"Held-out examples (default {RUN.heldout}; the "
              "paper's with --preset paper).")
@click.option("--fewshot", type=click.IntRange(min=0), default=None,
              help=f"Shots per prompt (default {RUN.fewshot}), each "
              "estimated as one more example of the task unless --fewshot-tokens says how long they are.")
@click.option("--prompt-tokens", type=click.IntRange(min=1), default=None,
              help="Longest prompt in tokens, shots aside (default: the task's estimate).")
@click.option("--mean-prompt-tokens", type=click.IntRange(min=1), default=None, help="Mean prompt in tokens.")
@click.option("--chat-tokens", type=click.IntRange(min=0), default=0, show_default=True,
              help="Tokens the chat template adds to each prompt.")
@click.option("--fewshot-tokens", type=click.IntRange(min=0), default=None,
              help="Tokens of the shots every prompt shares (default: estimated from --fewshot).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None,
              help=f"Examples per batch (default {RUN.batch_size}).")
@click.option("--p", "p", type=click.IntRange(min=1), default=None,
              help=f"Algorithm 1's pool of top heads (default {RUN.p}).")
@click.option("--k", "k", type=click.IntRange(min=1), default=None, help="Largest head set Algorithm 1 scores "
              f"(default {RUN.k}).")
@click.option("--rows-per-pass", type=click.IntRange(min=1), default=None,
              help="Rows (examples × ablations) per forward; default = batch size.")
@click.option("--dtype", default=None, help=f"float32, bfloat16, float16, as on `celtk run` (default {RUN.dtype}).")
@click.option("--device", default=None,
              help="cpu, cuda, cuda:N or auto (the GPU --gpu names), as on `celtk run` (default "
                   f"{RUN.device}: this machine's memory; no time unless --device-flops).")
@click.option("--gpu", type=click.Choice(sorted(GPUS)), default="l40s", show_default=True,
              help="The GPU a cuda device is planned as (sustained bf16 throughput and usable memory assumed).")
@click.option("--device-flops", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Sustained FLOP/s of the device (overrides --gpu's; on cpu, gives a time).")
@click.option("--device-memory", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Usable device memory in bytes (overrides --gpu's or this machine's).")
@click.option("--json", "as_json", is_flag=True, default=False,
              help="Print the plan as JSON (the settings, the device and each stage's FLOPs, bytes and seconds) "
                   "instead of the table.")
def plan_cmd(preset: str | None, config_file: str | None, model_config: str | None, model: str | None,
             task: str | None, discovery: int | None, heldout: int | None, fewshot: int | None,
             prompt_tokens: int | None, mean_prompt_tokens: int | None, chat_tokens: int, fewshot_tokens: int | None,
             batch_size: int | None, p: int | None, k: int | None, rows_per_pass: int | None, dtype: str | None,
             device: str | None, gpu: str, device_flops: float | None, device_memory: float | None,
             as_json: bool) -> None:
    """Estimate FLOPs, peak memory and time of screen, select and test of the run these settings describe, before
    any work (the settings mean and default to what they do on `celtk run`)."""
    from dataclasses import replace

    from rich.table import Table

    from celtk.errors import ConfigError, suggest
    from celtk.planning.plan import TASK_SIZES, plan_run

    config = _run_settings(config_file, preset, dict(model=model, task=task, discovery=discovery, heldout=heldout,
                                                     fewshot=fewshot, batch_size=batch_size, device=device,
                                                     dtype=dtype, p=p, k=k))
    family = config.task.split(":", 1)[0]
    if family not in TASK_SIZES:
        raise ConfigError(f"celtk plan knows the token lengths of {config.task!r} only if it is a paper task or "
                          f"humaneval ({', '.join(TASK_SIZES)}).{suggest(family, TASK_SIZES)}")
    if not isinstance(config.batch_size, int):
        raise ConfigError("celtk plan needs a whole batch size (--batch-size N): 'auto' is sized on the device at "
                          "run time.")
    size = TASK_SIZES[family]
    base = prompt_tokens or size.prompt_tokens
    shot = (mean_prompt_tokens or prompt_tokens or size.mean_prompt) + size.continuation_tokens
    shots = fewshot_tokens if fewshot_tokens is not None else max(0, config.fewshot - size.shots_included) * shot
    longest = base + chat_tokens + shots
    mean = (mean_prompt_tokens or prompt_tokens or size.mean_prompt) + chat_tokens + shots
    size = replace(size, n_discovery=config.discovery, n_heldout=config.heldout, prompt_tokens=longest,
                   mean_prompt_tokens=mean, shared_prefix=shots + chat_tokens if size.kind != "generate" else 0)
    planned = _device(config.device, gpu, device_flops, device_memory)
    stages = plan_run(_config_of(model_config, config.model), size, planned, batch_size=config.batch_size,
                      rows_per_pass=rows_per_pass, dtype=config.dtype, pool=config.p, k=config.k)
    if as_json:
        import json

        settings = {"model": model_config or config.model, "task": config.task, "discovery": size.n_discovery,
                    "heldout": size.n_heldout, "fewshot": config.fewshot, "batch_size": config.batch_size,
                    "dtype": config.dtype, "p": config.p, "k": config.k, "prompt_tokens": size.prompt_tokens,
                    "mean_prompt_tokens": size.mean_prompt_tokens, "shared_prefix": size.shared_prefix,
                    "continuation_tokens": size.continuation_tokens}
        click.echo(json.dumps({"settings": settings, "device": vars(planned),
                               "stages": [{**vars(s), "peak_bytes": s.peak_bytes} for s in stages]}, indent=1))
        return
    speed = ("no time without --device-flops" if planned.flops_per_second is None
             else f"{_size(planned.flops_per_second, 'FLOP')}/s")
    table = Table(title=f"{model_config or config.model} · {config.task} ({size.n_discovery}/{size.n_heldout}, "
                        f"{config.fewshot} shots) · {planned.name} ({speed}, {planned.memory_bytes / 1e9:.0f} GB) · "
                        f"{config.dtype} · batch {config.batch_size}")
    for column in ("stage", "evaluations", "FLOPs", "weights", "activations", "peak", "time", "fits"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for s in stages:
        table.add_row(s.stage, str(s.evaluations), _size(s.flops, "FLOP"), _size(s.weight_bytes, "B"),
                      _size(s.activation_bytes, "B"), _size(s.peak_bytes, "B"),
                      "-" if s.seconds is None else _duration(s.seconds), "yes" if s.fits else "[red]no[/red]")
    console().print(table)


COMMANDS = [plan_cmd]
