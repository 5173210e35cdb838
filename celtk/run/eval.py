"""Score a model, optionally ablated, on one split of a task (``eval.json``): the library side
of ``celtk eval``."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

from celtk.errors import ConfigError
from celtk.heads import HeadSet
from celtk.models import Model, load_model
from celtk.runstore import locked, write_json

SPLITS = ("discovery", "heldout", "all")


def run_eval(out: Path | None, *, model: str | Path | Model = "smollm2-135m", task: str, data: str | Path | None = None,
             heads: str | HeadSet = "", split: str = "discovery", limit: int | None = None, seed: int = 0,
             fewshot: int = 0, chat: bool = False, batch_size: int = 32, device: str = "cpu", dtype: str = "float32",
             allow_code: bool = False, progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Evaluate ``model`` (an alias/path, or a loaded :class:`Model`) on ``split`` of ``task`` with
    ``heads`` ablated; returns the ``eval.json`` document and writes it to ``out`` (unless ``None``).

    ``limit`` takes the first examples of the split; ``allow_code`` lets the sandbox run
    model-written code (MBPP)."""
    from celtk.evaluator import EvalConfig, evaluate
    from celtk.tasks import get_task, make_splits

    head_set = heads if isinstance(heads, HeadSet) else HeadSet.parse(heads)
    data = os.fspath(data) if data is not None else None  # a Path too; recorded as text
    if batch_size < 1:
        raise ConfigError(f"batch_size must be at least 1, got {batch_size}.")
    if limit is not None and limit < 1:  # no examples would give an accuracy of NaN
        raise ConfigError(f"limit must be at least 1 (or None for the whole split), got {limit}.")
    if seed < 0:
        raise ConfigError(f"seed must be non-negative, got {seed}.")
    if split not in SPLITS:
        raise ConfigError(f"Unknown split {split!r}; use one of {', '.join(SPLITS)}.")
    the_task = get_task(task, data_path=data)
    n_disc = limit if split == "discovery" else (0 if split == "heldout" else None)
    n_held = limit if split == "heldout" else (0 if split == "discovery" else None)
    splits = make_splits(the_task, n_disc, n_held, seed=seed, fewshot=fewshot)
    examples = {"discovery": splits.discovery, "heldout": splits.heldout, "all": splits.discovery + splits.heldout}[split]
    if split == "all" and limit is not None:
        examples = examples[:limit]
    with locked(Path(out)) if out is not None else nullcontext():
        loaded = model if isinstance(model, Model) else load_model(model, device=device, dtype=dtype)
        loaded.validate_heads(head_set)
        config = EvalConfig(batch_size=batch_size, chat=chat, allow_code=allow_code)
        result = evaluate(loaded, the_task, examples, splits.shots, head_set, config,
                          progress=(lambda done, total: progress("eval", done, total)) if progress else None)
        document = _document(loaded, the_task, head_set, result, splits, asdict(config) | {
            "fewshot": fewshot, "seed": seed, "split": split, "limit": limit, "data": data, "device": device, "dtype": dtype})
        if out is not None:
            write_json(Path(out) / "eval.json", document)
    return document


def _document(model: Model, task, heads: HeadSet, result, splits, settings: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": model.name, "task": task.full_name, "heads": heads.names(), "n": len(result.examples),
        "accuracy": result.accuracy, "examples": result.to_json(),
        "config": {**settings, "model": model.describe(), "task": task.config(), "splits": splits.manifest()},
    }
