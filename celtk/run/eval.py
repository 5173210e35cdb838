"""Score a model, optionally ablated, on one split of a task (``eval.json``): the library side
of ``celtk eval``."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from celtk.ablation_kinds import Ablation, AblationKind
from celtk.boundary import public
from celtk.errors import ConfigError
from celtk.evaluation import evaluate
from celtk.evaluation.results import EvalConfig
from celtk.evaluation.scoring import ablation_for
from celtk.heads import HeadSet, as_head_set
from celtk.models import Model, load_model
from celtk.run.config import CHAT_DATE
from celtk.run.options import EVAL, RUN
from celtk.run.session import session_for
from celtk.store.directory import RunDirectory
from celtk.store.documents import (
    EvalDocument,
    EvalExample,
    HeldBack,
    ModelName,
    ScreenDocument,
    SelectionDocument,
    TaskName,
)
from celtk.store.files import locked, write_json
from celtk.store.ledger import Ledger
from celtk.tasks import Example, Splits, Task, get_task, make_splits

if TYPE_CHECKING:
    from celtk.evaluation.results import EvalResult

SPLITS = ("discovery", "heldout", "all")


@public
def run_eval(out: Path | None, *, model: str | Path | Model = EVAL.model, task: str | None = None,
             data: str | Path | None = None,
             heads: HeadSet | str = "", split: str = EVAL.split, limit: int | None = None,
             seed: int = EVAL.seed, fewshot: int | None = None, chat: bool = EVAL.chat,
             chat_date: str = EVAL.chat_date, batch_size: int = EVAL.batch_size, device: str = EVAL.device,
             dtype: str = EVAL.dtype, allow_code: bool = False, run: Path | None = None,
             exploratory: bool = False, ablation: str = EVAL.ablation, reference: int | None = None,
             progress: Callable[[str, int, int], None] | None = None) -> EvalDocument:
    """Evaluate ``model`` (an alias/path, or a loaded :class:`Model`) on ``split`` of ``task`` with
    ``heads`` ablated; returns the ``eval.json`` document and writes it to ``out`` (unless ``None``).

    ``fewshot`` defaults to ``celtk run``'s shots (3; lm-eval's ``num_fewshot`` defaults to 0, so pass 0 to compare
    with it). ``limit`` takes the first examples of the split; ``allow_code`` lets the sandbox run
    model-written code (MBPP). The held-out split is a run's held-out set: with ``run`` (a run
    directory) the task, data, seed, shots, template and held-out set are the run's, and the
    evaluation is a look logged in its ``heldout_log.jsonl`` (exploratory; the run's test stays its
    result). Without ``run`` it is refused unless ``exploratory``: then the task's held-out pool is
    scored outside any run, and ``eval.json`` says so. ``ablation`` is the kind (``zero``, ``mean``,
    ``resample``, ``scale:α``); mean and resample measure their values on discovery examples, disjoint
    from held-out: a run's discovery set, or else the first ``reference`` of the task's discovery split (default
    what it holds, at most :data:`REFERENCE`)
    (refused with ``split="all"``, which would evaluate them too)."""
    if fewshot is None:  # celtk run's shots; lm-eval's num_fewshot defaults to 0 (pass 0 to compare)
        fewshot = RUN.fewshot
    head_set = as_head_set(heads)
    kind = AblationKind.parse(ablation)
    data = os.fspath(data) if data is not None else None  # a Path too; recorded as text
    _check_arguments(kind, split=split, reference=reference, batch_size=batch_size, limit=limit, seed=seed,
                     chat_date=chat_date, run=run, task=task, data=data, exploratory=exploratory)
    if run is not None:
        return _eval_run(out, Path(run), model, head_set, limit, batch_size, allow_code, progress, kind)
    if task is None:
        raise ConfigError("task is required (--task), unless a run directory is given (--run) for its held-out set.")
    return _eval_free(out, model, get_task(task, data_path=data), head_set, kind, reference,
                      EvalConfig(batch_size=batch_size, chat=chat, allow_code=allow_code, chat_date=chat_date),
                      progress, split=split, limit=limit, seed=seed, fewshot=fewshot, data=data, device=device,
                      dtype=dtype)


def _check_arguments(kind: AblationKind, *, split: str, reference: int | None, batch_size: int, limit: int | None,
                     seed: int, chat_date: str, run: Path | None, task: str | None, data: str | None,
                     exploratory: bool) -> None:
    """Refuse, before anything loads, settings that contradict each other or ask for an unlogged look."""
    if kind.needs_reference and split == "all":
        raise ConfigError(f"{kind} ablation measures its values on discovery examples, which split 'all' evaluates "
                          "too; evaluate --split heldout (or discovery) with it.")
    if reference is not None and reference < 1:
        raise ConfigError(f"reference (--reference) must be at least 1 discovery example, got {reference}.")
    if batch_size < 1:
        raise ConfigError(f"batch_size must be at least 1, got {batch_size}.")
    if limit is not None and limit < 1:  # no examples would give an accuracy of NaN
        raise ConfigError(f"limit must be at least 1 (or None for the whole split), got {limit}.")
    if seed < 0:
        raise ConfigError(f"seed must be non-negative, got {seed}.")
    if split not in SPLITS:
        raise ConfigError(f"Unknown split {split!r}; use one of {', '.join(SPLITS)}.")
    try:
        date.fromisoformat(chat_date)
    except (TypeError, ValueError):
        raise ConfigError(f"chat_date must be an ISO date (YYYY-MM-DD) such as {CHAT_DATE!r}, got "
                          f"{chat_date!r}.") from None
    if run is not None and (task is not None or data is not None):  # the run's own are used: refused, not ignored
        raise ConfigError("run (--run) scores the run's held-out set with the run's own task and data; leave task "
                          "(--task) and data (--data) out, or evaluate outside the run.")
    if run is not None and split != "heldout":
        raise ConfigError("run (--run) evaluates a run's held-out set; use split='heldout' (--split heldout), not "
                          f"{split!r}.")
    if split == "heldout" and run is None and not exploratory:
        raise ConfigError("The held-out split is a run's held-out set, whose every use a run directory logs. Name the "
                          "run (run=DIR, `--run DIR`): its task, data, seed, shots and held-out set are used and the "
                          "look is logged there. To score the task's held-out pool outside any run, pass "
                          "exploratory=True (`--exploratory`); eval.json then says so.")
    if run is not None and reference is not None:  # the run's discovery set is the reference: refused, not ignored
        raise ConfigError("run (--run) measures mean and resample values on the run's own discovery set; leave "
                          "reference (--reference) out.")


def _eval_free(out: Path | None, model: str | Path | Model, the_task: Task, head_set: HeadSet, kind: AblationKind,
               reference: int | None, config: EvalConfig, progress: Callable[[str, int, int], None] | None, *,
               split: str, limit: int | None, seed: int, fewshot: int, data: str | None, device: str,
               dtype: str) -> EvalDocument:
    """An evaluation outside any run, on the examples ``split``, ``limit``, ``seed`` and ``fewshot`` draw; refused
    where they include a frozen held-out set (:func:`_refuse_frozen`)."""
    n_disc = limit if split == "discovery" else (0 if split == "heldout" else None)
    n_held = limit if split == "heldout" else (0 if split == "discovery" else None)
    splits = make_splits(the_task, n_disc, n_held, seed=seed, fewshot=fewshot)
    examples = {"discovery": splits.discovery, "heldout": splits.heldout,
                "all": splits.discovery + splits.heldout}[split]
    if split == "all" and limit is not None:
        examples = examples[:limit]
    refs = reference_examples(the_task, reference, seed, fewshot) if kind.needs_reference else []  # before the model
    with locked(Path(out)) if out is not None else nullcontext():
        loaded = model if isinstance(model, Model) else load_model(model, device=device, dtype=dtype)
        loaded.validate_heads(head_set)
        _refuse_frozen(loaded, the_task, examples)
        chosen = ablation_for(loaded, kind, the_task, refs, splits.shots, config.chat, config.chat_date, seed=seed)
        result = evaluate(loaded, the_task, examples, splits.shots, head_set, config,
                          progress=(lambda done, total: progress("eval", done, total)) if progress else None,
                          ablation=chosen)
        recorded = {"fewshot": fewshot, "seed": seed, "split": split, "limit": limit, "data": data,
                    "device": device, "dtype": dtype}
        document = _document(loaded, the_task, head_set, result, splits, asdict(config) | recorded
                             | ({"exploratory": True} if split == "heldout" else {})
                             | _kind_record(chosen, f"the first {len(refs)} discovery examples"))
        if out is not None:
            write_json(Path(out) / EvalDocument.FILE, document.to_json())
    return document


def _refuse_frozen(model: Model, task: Task, examples: list[Example]) -> None:
    """An evaluation outside any run must not score a frozen held-out set's examples under the weights it was frozen
    for (celtk's ledger records each one): that is a look, and a look goes through its run."""
    shared = Ledger().frozen_among(weights=model.weight_hash, task=task.full_name, examples=[e.content_hash
                                                                                            for e in examples])
    if shared:
        runs = "; ".join(f"{count} of {run}'s" for run, count in shared[:3])
        raise ConfigError(f"These examples include a frozen held-out set ({runs} frozen held-out examples, same "
                          "weights and task): scoring them outside the run would be an unlogged look. Evaluate the "
                          f"run's held-out set through it (--split heldout --run {shared[0][0]}), which logs the look, "
                          "or the discovery split (--split discovery), or a seed whose examples no run froze.")


REFERENCE = 100  # discovery examples mean and resample measure their values on by default, where the task has them


def reference_examples(task: Task, reference: int | None, seed: int, fewshot: int) -> list[Example]:
    """The first ``reference`` examples of ``task``'s discovery split (default: all of it, at most
    :data:`REFERENCE`), on which mean and resample ablation measure their values; more than the split holds is
    refused, naming ``--reference`` and what would fit."""
    available = make_splits(task, None, 0, seed=seed, fewshot=fewshot).discovery
    if reference is None:
        return available[:REFERENCE]
    if reference > len(available):
        raise ConfigError(f"--reference {reference} (reference) asks for more discovery examples than "
                          f"{task.full_name} holds ({len(available)}) to measure the mean or resample values on; "
                          f"use --reference {len(available)} or fewer, or leave it out (default: what the discovery "
                          f"split holds, at most {REFERENCE}).")
    return available[:reference]



def _kind_record(ablation: Ablation, reference: str) -> dict[str, object]:
    """``{"ablation": …}`` for eval.json's config under another kind than zero; zero evaluations keep the
    document they always had."""
    if ablation.is_zero:
        return {}
    return {"ablation": ablation.describe() | ({"reference": reference} if ablation.kind.needs_reference else {})}


def _eval_run(out: Path | None, run: Path, model: str | Path | Model, heads: HeadSet, limit: int | None,
              batch_size: int, allow_code: bool, progress: Callable[[str, int, int], None] | None,
              kind: AblationKind | None = None) -> EvalDocument:
    """``heads`` on the held-out set of the run in ``run`` (the first ``limit`` examples), logged there."""
    rd = RunDirectory(run)
    if not rd.has(SelectionDocument) and not rd.has(ScreenDocument):
        raise ConfigError(f"{run} is not a run directory (no selection.json or screen.json); give the --out of a run.")
    separate = out is not None and Path(out).resolve() != run.resolve()
    with rd.lock(), locked(Path(out)) if separate and out is not None else nullcontext():
        rd.require("eval")
        doc: SelectionDocument | ScreenDocument = rd.load_if(SelectionDocument) or rd.load(ScreenDocument)
        session = session_for(doc, model if isinstance(model, Model) else None, **rd.heldout_overrides())
        rd.admit("eval", session, doc)
        manifest = session.splits.manifest()
        session.model.validate_heads(heads)
        examples = session.splits.heldout[:limit] if limit is not None else session.splits.heldout
        seq = rd.begin_look("eval", [heads], manifest.heldout_hash, len(examples), exploratory=True,
                            limit=limit)
        c = session.config
        config = EvalConfig(batch_size=batch_size, chat=c.chat, allow_code=allow_code, chat_date=c.chat_date)
        chosen = session.ablation(kind)  # mean and resample: measured on the run's discovery set
        result = evaluate(session.model, session.task, examples, session.splits.shots, heads, config,
                          progress=(lambda done, total: progress("eval", done, total)) if progress else None,
                          ablation=chosen)
        document = _document(session.model, session.task, heads, result, session.splits, asdict(config) | {
            "fewshot": c.fewshot, "seed": c.seed, "split": "heldout", "limit": limit, "data": c.data,
            "device": c.device, "dtype": c.dtype, "run": str(run),
            "look": seq} | _kind_record(chosen, "the run's discovery set"))
        if out is not None:
            write_json(Path(out) / EvalDocument.FILE, document.to_json())
            rd.log.complete(seq, Path(out) / EvalDocument.FILE)
        else:
            rd.log.complete(seq)
    return document


def accuracy_stderr(accuracy: float, n: int) -> float | None:
    """The accuracy's standard error as lm-eval reports ``acc_stderr`` (the sample standard deviation of the 0/1
    verdicts over √n): √(acc (1 − acc) / (n − 1)); ``None`` when ``n < 2``."""
    return math.sqrt(accuracy * (1.0 - accuracy) / (n - 1)) if n >= 2 else None


def _document(model: Model, task: Task, heads: HeadSet, result: EvalResult, splits: Splits,
              settings: Mapping[str, object]) -> EvalDocument:
    return EvalDocument(
        model=ModelName(model.name), task=TaskName(task.full_name), heads=heads, n=len(result.examples),
        accuracy=result.accuracy,
        accuracy_stderr=accuracy_stderr(result.accuracy, len(result.examples)),
        examples=[EvalExample(id=e.id, correct=e.correct, logprob=e.logprob, extra=e.extra) for e in result.examples],
        config={**settings, "model": model.describe(), "task": task.config(), "splits": splits.manifest().to_json()},
        held_back=[HeldBack(id=i, reason=why) for i, why in splits.held_back])  # rows no split holds, and why
