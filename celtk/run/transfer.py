"""Does a selection hold? The frozen selection against the intact model under a grid of
variants (other shot seeds, zero-shot, neighbouring subtasks, other tasks, the chat template,
another model of the same shape), on held-out examples only, with the cost on plain-text
language modelling beside the gains (``transfer.json``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from celtk.errors import ConfigError
from celtk.heads import HeadSet
from celtk.models import Model, load_model
from celtk.run.documents import LanguageModelLoss, SelectionDocument, TransferDocument, TransferRow
from celtk.run.frozen import log_heldout
from celtk.run.session import Session, check_no_overlap, session_for
from celtk.runstore import bits, locked
from celtk.stats import compare_paired, holm
from celtk.tasks import Splits, get_task, make_splits

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Variant:
    """One cell of the grid; ``None`` keeps the run's own setting."""

    name: str
    kind: str  # original / shots / zero-shot / subtask / task / chat / model
    task: str | None = None
    fewshot: int | None = None
    shot_seed: int | None = None
    chat: bool | None = None
    model: str | None = None


def variant_grid(task: str, *, shot_seeds: Iterable[int] = (1, 2, 3, 4, 5), zero_shot: bool = True,
                 subtasks: Iterable[str] = (), tasks: Iterable[str] = (), chat: bool = False,
                 models: Iterable[str] = ()) -> list[Variant]:
    """The run's own configuration first, then each asked-for variant of the run's ``task``
    (e.g. ``subtasks=("2ds",)`` on ``arithmetic:2da`` gives ``arithmetic:2ds``)."""
    family = task.split(":")[0]
    grid = [Variant("original", "original")]
    grid += [Variant(f"shots seed={s}", "shots", shot_seed=s) for s in shot_seeds]
    grid += [Variant("zero-shot", "zero-shot", fewshot=0)] if zero_shot else []
    grid += [Variant(f"{family}:{s}", "subtask", task=f"{family}:{s}") for s in subtasks]
    grid += [Variant(t, "task", task=t) for t in tasks]
    grid += [Variant("chat", "chat", chat=True)] if chat else []
    grid += [Variant(f"model {m}", "model", model=m) for m in models]
    return grid


def run_transfer(out: Path, variants: list[Variant] | None = None, model: Model | None = None, *,
                 other_models: dict[str, Model] | None = None, heldout: int | None = None,
                 plain_text: str | Path | None = None, n_boot: int = 10_000,
                 progress: Progress | None = None) -> TransferDocument:
    """Score ``selection.json``'s heads against the intact model under each of ``variants``
    (default :func:`variant_grid` of the run's task) on held-out examples that share none with
    the discovery set; Holm-adjusts the McNemar p-values across the grid; with ``plain_text``
    (a file), adds the language-modelling loss. ``other_models`` maps a variant's model name to
    a loaded model (otherwise it is loaded). Writes ``transfer.json``; each variant's held-out use
    is appended to ``heldout_log.jsonl``, and counts as a test for the frozen rule (a later select
    is refused unforced). Not refused itself: it reads the held-out set, it chooses nothing."""
    out = Path(out)
    with locked(out):
        sel = SelectionDocument.load(out)
        base = session_for(sel, model, **({"heldout": heldout} if heldout is not None else {}))
        variants = variants or variant_grid(base.config.task)
        heads = HeadSet.parse(",".join(sel.heads))
        comparisons = []
        for i, variant in enumerate(variants):
            if progress:
                progress("transfer", i, len(variants))
            session = variant_session(base, variant, other_models or {})
            check_no_overlap(sel.discovery_hashes, sel.discovery_ids, session.splits.heldout)
            intact, results = session.screener("heldout").run([heads])
            log_heldout(out, "transfer", [sel.heads], session.splits.manifest()["heldout_hash"], variant=variant.name,
                        n=len(intact.correct))
            comparisons.append((variant, session, intact.correct, results[heads].correct))
        if progress:
            progress("transfer", len(variants), len(variants))
        rows = _rows(comparisons, n_boot, base.config.seed)
        loss = None
        if plain_text is not None:
            loss = lm_loss(base.model, heads, Path(plain_text).read_text(), source=str(plain_text), n_boot=n_boot,
                           seed=base.config.seed, ablation=base.ablation())
        document = TransferDocument(heads=sel.heads, model=sel.model["name"], task=sel.task["task"],
                                    discovery_gain=sel.discovery_gain, n_boot=n_boot, ci_level=0.95, variants=rows,
                                    lm_loss=loss)
        document.save(out)
        return document


def variant_session(base: Session, variant: Variant, other_models: dict[str, Model]) -> Session:
    """A session with the variant's model, task, shots and template; its held-out set is the
    run's own for the run's task, else the variant task's held-out draw (seed as configured)."""
    c = base.config
    if c.ablation in ("mean", "resample") and (variant.task is not None or variant.model is not None):
        raise ConfigError(f"This run ablates by {c.ablation}, whose values are measured on its discovery set with its model; "
                          f"variant {variant.name!r} changes the {'task' if variant.task is not None else 'model'}. "
                          "Transfer such a run to other shots, zero-shot or the chat template only.")
    fewshot = c.fewshot if variant.fewshot is None else variant.fewshot
    shot_seed = c.seed if variant.shot_seed is None else variant.shot_seed
    model = base.model
    if variant.model is not None:
        model = other_models.get(variant.model) or load_model(variant.model, device=c.device, dtype=c.dtype)
        if (model.n_layers, model.n_heads) != (base.model.n_layers, base.model.n_heads):
            raise ConfigError(f"Model {variant.model!r} has {model.n_layers} layers × {model.n_heads} heads, the run's "
                              f"{base.model.n_layers} × {base.model.n_heads}; a selection transfers only to a model of the same shape.")
    discovery = []
    if variant.task is None:  # the run's task: its discovery set stays the reference of mean/resample ablation
        task, heldout, discovery = base.task, base.splits.heldout, base.splits.discovery
        same_shots = (fewshot, shot_seed) == (c.fewshot, c.seed)
        shots = base.splits.shots if same_shots else make_splits(task, c.discovery, c.heldout, seed=shot_seed,
                                                                 fewshot=fewshot).shots
    else:
        task = get_task(variant.task)
        drawn = make_splits(task, 0, c.heldout, seed=c.seed, fewshot=fewshot)
        heldout = drawn.heldout
        shots = drawn.shots if shot_seed == c.seed else make_splits(task, 0, c.heldout, seed=shot_seed, fewshot=fewshot).shots
    config = replace(c, task=variant.task or c.task, data=c.data if variant.task is None else None, fewshot=fewshot,
                     chat=c.chat if variant.chat is None else variant.chat, model=variant.model or c.model)
    return Session(config, model, task, Splits(discovery=discovery, heldout=heldout, shots=shots, source=base.splits.source))


def _rows(comparisons, n_boot: int, seed: int) -> list[TransferRow]:
    """One row per variant; Holm across the rows whose McNemar p is defined."""
    stats = [compare_paired(a, b, n_boot=n_boot, seed=seed) for _, _, a, b in comparisons]
    defined = [i for i, s in enumerate(stats) if s.mcnemar_p is not None]
    adjusted = dict(zip(defined, holm([stats[i].mcnemar_p for i in defined]))) if defined else {}
    rows = []
    for i, ((variant, session, intact, ablated), s) in enumerate(zip(comparisons, stats)):
        c = session.config
        rows.append(TransferRow(
            variant=variant.name, kind=variant.kind, task=session.task.full_name, model=session.model.name,
            fewshot=c.fewshot, shot_seed=c.seed if variant.shot_seed is None else variant.shot_seed, chat=c.chat,
            n=s.n, intact_accuracy=s.intact_accuracy, ablated_accuracy=s.ablated_accuracy, gain=s.gain,
            gain_ci=list(s.gain_ci) if s.gain_ci else None, fixes=s.fixes, damage=s.damage, mcnemar_p=s.mcnemar_p,
            holm_p=float(adjusted[i]) if i in adjusted else None, heldout_hash=session.splits.manifest()["heldout_hash"],
            intact_correct=bits(intact), ablated_correct=bits(ablated),
            undefined={k: v for k, v in s.undefined.items() if k != "relative_error_reduction"}))
    return rows


def window_nll(model: Model, text: str, window: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """Summed next-token NLL (nats) and predicted-token count of each ``window``-token piece of ``text``.

    Returns:
        (float [n_windows], int [n_windows]).
    """
    import torch

    ids = model.tokenizer(text, return_tensors="pt").input_ids[0]
    device = next(model.bridge.parameters()).device
    sums, counts = [], []
    for start in range(0, len(ids), window):
        piece = ids[start:start + window]
        if len(piece) < 2:
            continue
        with torch.no_grad():
            logits = model.bridge(piece[None].to(device))[0, :-1].float()
        nll = -torch.log_softmax(logits, dim=-1).gather(1, piece[1:, None].to(device)).squeeze(1)
        sums.append(float(nll.sum()))
        counts.append(len(piece) - 1)
    return np.array(sums), np.array(counts)


def lm_loss(model: Model, heads: HeadSet, text: str, *, source: str = "text", window: int = 128, n_boot: int = 10_000,
            level: float = 0.95, seed: int = 0, ablation: Any = None) -> LanguageModelLoss:
    """Mean token NLL on ``text``, intact against ``heads`` ablated (as ``ablation`` says, default zero; resample,
    which needs a reference example per row, is refused), with a paired bootstrap CI over windows."""
    from celtk.ablation import ablate, as_ablation

    kind = as_ablation(ablation)
    if kind.per_row:
        raise ConfigError("The plain-text loss has no reference example to resample a head's z from; drop --plain-text "
                          "for a resample run.")
    intact, counts = window_nll(model, text, window)
    if not len(counts):
        raise ConfigError(f"The plain text {source} has fewer than two tokens; give a longer text for the language-modelling loss.")
    with ablate(model, heads, kind):
        ablated, _ = window_nll(model, text, window)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(counts), size=(n_boot, len(counts)))
    deltas = (ablated[idx].sum(1) - intact[idx].sum(1)) / counts[idx].sum(1)
    lo, hi = np.quantile(deltas, [(1 - level) / 2, 1 - (1 - level) / 2])
    n_tokens = int(counts.sum())
    return LanguageModelLoss(source=source, n_windows=len(counts), n_tokens=n_tokens,
                             intact_nll=float(intact.sum() / n_tokens), ablated_nll=float(ablated.sum() / n_tokens),
                             delta=float((ablated.sum() - intact.sum()) / n_tokens), delta_ci=[float(lo), float(hi)],
                             ci_level=level)
