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
import torch
from jaxtyping import Bool, Float, Int

from celtk.ablation import ablate, as_ablation
from celtk.ablation_kinds import Ablation, AblationKind
from celtk.boundary import public
from celtk.errors import CeltkError, ConfigError
from celtk.evaluation.prompts import prepared_hash
from celtk.evaluation.results import EvalResult
from celtk.heads import HeadSet
from celtk.models import Model, load_model
from celtk.run.options import TRANSFER
from celtk.run.session import Session, session_for
from celtk.stats import compare_paired, holm
from celtk.store.directory import RunDirectory
from celtk.store.documents import (
    Correctness,
    DroppedVariant,
    LanguageModelLoss,
    ModelName,
    SelectionDocument,
    TaskName,
    TestDocument,
    TransferDocument,
    TransferRow,
)
from celtk.store.memo import WORK_SCALE  # a held-out pass's progress, in thousandths of its work as the screen's
from celtk.tasks import Splits, get_task, make_splits

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Variant:
    """One cell of the grid; ``None`` keeps the run's own setting. ``requested``: asked for by name
    (refused where it cannot apply), not a default of the grid (dropped there, with a note)."""

    name: str
    kind: str  # original / shots / zero-shot / subtask / task / chat / model
    task: str | None = None
    fewshot: int | None = None
    shot_seed: int | None = None
    chat: bool | None = None
    model: str | None = None
    requested: bool = True


Comparison = tuple[Variant, Session, Bool[np.ndarray, " _example"], Bool[np.ndarray, " _example"]]
"""A variant, its session, and the intact and ablated verdicts on its held-out examples."""


@public
def variant_grid(task: str, *, shot_seeds: Iterable[int] | None = None, zero_shot: bool = TRANSFER.zero_shot,
                 subtasks: Iterable[str] = (), tasks: Iterable[str] = (), chat: bool = TRANSFER.chat,
                 models: Iterable[str] = ()) -> list[Variant]:
    """The run's own configuration first, then each asked-for variant of the run's ``task``
    (e.g. ``subtasks=("2ds",)`` on ``arithmetic:2da`` gives ``arithmetic:2ds``). ``shot_seeds`` ``None`` is the
    default draw (``celtk.run.options.TRANSFER.shots_seeds``, 1–5), dropped on a run that has no shots to redraw;
    seeds given by name are refused there."""
    family = task.split(":")[0]
    requested = shot_seeds is not None
    seeds = list(TRANSFER.shots_seeds if shot_seeds is None else shot_seeds)
    if any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise ConfigError(f"shot seeds must be distinct non-negative whole numbers, got {seeds}.")
    grid = [Variant("original", "original")]
    grid += [Variant(f"shots seed={s}", "shots", shot_seed=s, requested=requested) for s in seeds]
    grid += [Variant("zero-shot", "zero-shot", fewshot=0)] if zero_shot else []
    grid += [Variant(f"{family}:{s}", "subtask", task=f"{family}:{s}") for s in subtasks]
    grid += [Variant(t, "task", task=t) for t in tasks]
    grid += [Variant("chat", "chat", chat=True)] if chat else []
    grid += [Variant(f"model {m}", "model", model=m) for m in models]
    return grid


@public
def run_transfer(out: Path, variants: list[Variant] | None = None, model: Model | None = None, *,
                 other_models: dict[str, Model] | None = None, heldout: int | None = None,
                 plain_text: str | Path | None = None, n_boot: int = TRANSFER.n_boot,
                 progress: Progress | None = None) -> TransferDocument:
    """Score ``selection.json``'s heads against the intact model under each of ``variants``
    (default :func:`variant_grid` of the run's task) on held-out examples that share none with
    the discovery set; Holm-adjusts the McNemar p-values across the distinct comparisons; with
    ``plain_text`` (a file), adds the language-modelling loss.

    A tested run only (the first look is the test): the ``original`` row is the test's own
    comparison, read from ``test.json``, not a second look. Variants of the run's task score the
    held-out set fixed with the selection; other tasks draw ``heldout`` examples (default its
    size). A variant whose prompts and held-out examples equal an earlier row's is dropped with a
    note (``dropped``), and so is a default shot seed on a run with no shots to redraw. Variants of
    the run's task family read the run's data (``data``), and every row records its data source.
    Each scored variant is a look, logged before it is scored. ``other_models`` maps a variant's
    model name to a loaded model (otherwise it is loaded). Writes ``transfer.json``.

    ``heldout`` with only variants of the run's own task (the default grid is such) is refused before any
    work (:func:`check_heldout_size`). ``progress(stage, done, total)`` reports ``transfer`` (variants),
    ``transfer work`` (thousandths of the scored variants' passes, each variant an equal share, after every
    batch of a teacher-forced pass), ``load`` (another model) and ``plain-text loss`` (windows)."""
    check_heldout_size(variant_grid("") if variants is None else variants, heldout)  # the default grid: the run's task
    out = Path(out)
    rd = RunDirectory(out)
    with rd.lock():
        admitted = rd.require("transfer")
        sel, test = admitted.frozen, admitted.tested
        base = session_for(sel, model, **rd.heldout_overrides())
        rd.admit("transfer", base, sel)
        variants = variants or variant_grid(base.config.task)
        heads = sel.heads
        planned, dropped = _plan(base, variants, other_models or {}, heldout, progress)
        comparisons, seqs = _score_variants(rd, planned, sel, test, progress)
        rows = _rows(comparisons, n_boot, base.config.seed)
        loss = None
        if plain_text is not None:
            loss = lm_loss(base.model, heads, read_plain_text(plain_text), source=str(plain_text), n_boot=n_boot,
                           seed=base.config.seed, ablation=base.ablation(),
                           progress=(lambda done, total: progress("plain-text loss", done, total)) if progress
                           else None)
        document = TransferDocument(heads=sel.heads, model=sel.model.ref, task=sel.task.ref,
                                    discovery_gain=sel.discovery_gain, n_boot=n_boot, ci_level=0.95, variants=rows,
                                    dropped=dropped, lm_loss=loss)
        rd.finish_looks(seqs, (document, None))
        return document


def _score_variants(rd: RunDirectory, planned: list[tuple[Variant, Session]], sel: SelectionDocument,
                    test: TestDocument, progress: Progress | None) -> tuple[list[Comparison], list[int]]:
    """Each planned variant's intact and ablated verdicts on its held-out examples, each scored variant a look
    logged before it is scored (their ``seq``); the ``original`` row is the test's own comparison, read from
    ``test.json``: no second look."""
    comparisons: list[Comparison] = []
    seqs: list[int] = []
    heads = sel.heads
    scored = [v for v, _ in planned if v.kind != "original"]
    for i, (variant, session) in enumerate(planned):
        if progress:
            progress("transfer", i, len(planned))
        if variant.kind == "original":  # the test's comparison, on the same examples: no second look
            comparisons.append((variant, session, np.array([e.intact_correct for e in test.examples]),
                                np.array([e.ablated_correct for e in test.examples])))
            continue
        rd.check_disjoint(session.splits.heldout, sel)
        seqs.append(rd.begin_look("transfer", [heads], session.splits.manifest().heldout_hash,
                                  len(session.splits.heldout), exploratory=True, variant=variant.name))
        intact, results = heldout_pass(session, [heads], progress, "transfer work",
                                       share=(scored.index(variant), len(scored)))
        comparisons.append((variant, session, intact.correct, results[heads].correct))
    if progress:
        progress("transfer", len(planned), len(planned))
    return comparisons, seqs


def check_heldout_size(variants: Iterable[Variant], heldout: int | None, *, flags: bool = False) -> None:
    """Refuse a held-out size (``heldout``, the CLI's ``--heldout``; ``flags``: say it in the CLI's words) that no
    variant can use: it sizes the held-out sets that variants of other tasks draw, while variants of the run's own
    task score the held-out set frozen with the selection, at its size."""
    variants = list(variants)
    if heldout is None or any(v.task is not None for v in variants):
        return
    size, where, drop = ((f"--heldout {heldout}", "(--tasks, --subtasks)", "Drop --heldout") if flags else
                         (f"heldout={heldout}", "(variant_grid's tasks, subtasks)", "Drop heldout"))
    raise ConfigError(f"{size} sets how many held-out examples a variant of another task draws {where}, and every "
                      "variant asked for here (" + ", ".join(v.name for v in variants) + ") scores the run's own "
                      f"held-out set, frozen with the selection at its size: it cannot apply. {drop}, or add a "
                      "variant of another task.")


def heldout_pass(session: Session, sets: list[HeadSet], progress: Progress | None = None, stage: str = "held-out work",
                 *, share: tuple[int, int] = (0, 1)) -> tuple[EvalResult, dict[HeadSet, EvalResult]]:
    """``session.screener("heldout").run(sets)`` (the intact result and each set's), reporting
    ``progress(stage, done, WORK_SCALE)`` after the intact pass and every forward of a group of sets over a
    batch (a generation-graded task's: after every layer's sets), in thousandths of the work, as the screen
    reports its own. ``share = (i, n)``: this pass is the ``i``-th of ``n`` equal shares of
    the stage (transfer's variants), so the count runs from ``i/n`` to ``(i + 1)/n`` of ``WORK_SCALE``."""
    screener = session.screener("heldout")
    if progress is None:
        return screener.run(sets)
    index, parts = share

    def on_work(done: int, total: int) -> None:
        progress(stage, round(WORK_SCALE * (index + (done / total if total else 1.0)) / parts), WORK_SCALE)

    on_work(0, 1)
    scored = screener.run(sets, on_work=on_work)
    on_work(1, 1)
    return scored


def _plan(base: Session, variants: list[Variant], other_models: dict[str, Model], heldout: int | None,
          progress: Progress | None = None) -> tuple[list[tuple[Variant, Session]], list[DroppedVariant]]:
    """The variants to score, each with its session, and those dropped: a default shot seed with no
    shots to redraw, or a comparison (model, prompts, held-out examples) an earlier row already makes."""
    planned: list[tuple[Variant, Session]] = []
    dropped: list[DroppedVariant] = []
    seen: dict[tuple[str, str, str], str] = {}
    fixed = _fixed_shots(base)
    for variant in variants:
        if variant.kind == "shots" and fixed:
            if variant.requested:
                raise ConfigError(f"Variant {variant.name!r}: {fixed}, so another shot seed draws the same prompts. "
                                  "Leave out shot seeds (--shots-seeds) for this run.")
            dropped.append(DroppedVariant(variant=variant.name, same_as=None, reason=fixed))
            continue
        session = variant_session(base, variant, other_models, heldout, progress=progress)
        key = (session.model.weight_hash, prepared_hash(session.prepared("heldout")),
               session.splits.manifest().heldout_hash)
        if key in seen:
            dropped.append(DroppedVariant(variant=variant.name, same_as=seen[key],
                                          reason="the same model, prompts and held-out examples"))
            continue
        seen[key] = variant.name
        planned.append((variant, session))
    if not planned or planned[0][0].kind != "original":
        raise ConfigError("A transfer grid starts with the run's own configuration (Variant('original', 'original')), "
                          "the test it is compared with; build grids with variant_grid().")
    return planned, dropped


def _fixed_shots(session: Session) -> str | None:
    """Why another shot seed cannot change the prompts (``None``: it can)."""
    if session.config.fewshot == 0:
        return "the run uses no shots (fewshot = 0)"
    if getattr(session.task, "fewshot_sampler", "random") == "first_n":
        return f"{session.task.full_name} always takes its first {session.config.fewshot} shots"
    return None


def variant_session(base: Session, variant: Variant, other_models: dict[str, Model],
                    heldout: int | None = None, *, progress: Progress | None = None) -> Session:
    """A session with the variant's model, task, shots and template. Its held-out set is the run's
    own for the run's task; another task draws ``heldout`` examples (default the run's count) with
    the run's seed. Tasks of the run's family read the run's data; others their own default. A model
    loaded here (one ``other_models`` lacks) is reported as ``progress("load", 0 then 1, 1)``."""
    c = base.config
    if c.ablation in ("mean", "resample") and (variant.task is not None or variant.model is not None):
        raise ConfigError(f"This run ablates by {c.ablation}, whose values are measured on its discovery set "
                          f"with its model; variant {variant.name!r} changes the "
                          f"{'task' if variant.task is not None else 'model'}. "
                          "Transfer such a run to other shots, zero-shot or the chat template only.")
    fewshot = c.fewshot if variant.fewshot is None else variant.fewshot
    shot_seed = c.seed if variant.shot_seed is None else variant.shot_seed
    model = base.model
    if variant.model is not None:
        model = other_models.get(variant.model) or _load(variant.model, c.device, c.dtype, progress)
        if (model.n_layers, model.n_heads) != (base.model.n_layers, base.model.n_heads):
            raise ConfigError(f"Model {variant.model!r} has {model.n_layers} layers × {model.n_heads} heads, the run's "
                              f"{base.model.n_layers} × {base.model.n_heads}; "
                              "a selection transfers only to a model of the same shape.")
    data, discovery = c.data, []
    if variant.task is None:  # the run's task: its discovery set stays the reference of mean/resample ablation
        task, held, source, discovery = base.task, base.splits.heldout, base.splits.source, base.splits.discovery
        same_shots = (fewshot, shot_seed) == (c.fewshot, c.seed)
        shots = base.splits.shots if same_shots else make_splits(task, c.discovery, c.heldout, seed=shot_seed,
                                                                 fewshot=fewshot).shots
    else:
        same_family = variant.task.split(":")[0] == c.task.split(":")[0]
        data = c.data if same_family else None  # the run's data for its own family: never generated beside official
        try:
            task = get_task(variant.task, data_path=data)
            drawn = make_splits(task, 0, heldout or len(base.splits.heldout), seed=c.seed, fewshot=fewshot)
            shots = drawn.shots if shot_seed == c.seed else make_splits(task, 0, len(drawn.heldout), seed=shot_seed,
                                                                         fewshot=fewshot).shots
        except CeltkError as error:
            raise type(error)(f"Transfer variant {variant.name!r}"
                              + (f" (the run's data {data!r})" if data else "") + f": {error}") from None
        held, source = drawn.heldout, drawn.source
    config = replace(c, task=variant.task or c.task, data=data, fewshot=fewshot,
                     chat=c.chat if variant.chat is None else variant.chat, model=variant.model or c.model)
    return Session(config, model, task, Splits(discovery=discovery, heldout=held, shots=shots, source=source))


def _load(name: str, device: str, dtype: str, progress: Progress | None) -> Model:
    if progress:
        progress("load", 0, 1)
    model = load_model(name, device=device, dtype=dtype)
    if progress:
        progress("load", 1, 1)
    return model


def data_source(session: Session) -> str:
    """Where a session's examples come from: the data path given, else the task's own source."""
    return session.config.data or session.splits.source


def _rows(comparisons: list[Comparison], n_boot: int, seed: int) -> list[TransferRow]:
    """One row per variant; Holm across the rows whose McNemar p is defined."""
    stats = [compare_paired(a, b, n_boot=n_boot, seed=seed) for _, _, a, b in comparisons]
    defined = [i for i, s in enumerate(stats) if s.mcnemar_p is not None]
    adjusted = dict(zip(defined, holm([stats[i].mcnemar_p for i in defined]), strict=True)) if defined else {}
    rows = []
    for i, ((variant, session, intact, ablated), s) in enumerate(zip(comparisons, stats, strict=True)):
        c = session.config
        rows.append(TransferRow(
            variant=variant.name, kind=variant.kind, task=TaskName(session.task.full_name),
            model=ModelName(session.model.name),
            fewshot=c.fewshot, shot_seed=c.seed if variant.shot_seed is None else variant.shot_seed, chat=c.chat,
            n=s.n, intact_accuracy=s.intact_accuracy, ablated_accuracy=s.ablated_accuracy, gain=s.gain,
            gain_ci=list(s.gain_ci) if s.gain_ci else None, fixes=s.fixes, damage=s.damage, mcnemar_p=s.mcnemar_p,
            holm_p=float(adjusted[i]) if i in adjusted else None,
            heldout_hash=session.splits.manifest().heldout_hash,
            data=data_source(session), from_test=variant.kind == "original",
            intact_correct=Correctness.of(intact), ablated_correct=Correctness.of(ablated),
            undefined={k: v for k, v in s.undefined.items() if k != "relative_error_reduction"}))
    return rows


# the tokenizer is a Hugging Face one (Model.tokenizer), untyped: it has no type stubs
def bos_id(tokenizer: Any) -> int | None:
    """The BOS token the tokenizer puts before a text (``None``: it adds none, e.g. GPT-2, SmolLM2)."""
    with_special = tokenizer("a").input_ids
    plain = tokenizer("a", add_special_tokens=False).input_ids
    bos = getattr(tokenizer, "bos_token_id", None)
    return bos if bos is not None and len(with_special) > len(plain) and with_special[0] == bos else None


def window_nll(model: Model, text: str, window: int = 128, *, progress: Callable[[int, int], None] | None = None
               ) -> tuple[Float[np.ndarray, " window"], Int[np.ndarray, " window"]]:
    """Summed next-token NLL (nats) and predicted-token count of each ``window``-token piece of ``text``.

    Where the tokenizer begins a text with BOS (Llama, Gemma), every window begins with it, as the
    model saw text in training, and all of the window's tokens are predicted; otherwise a window's
    first token is its context. ``progress(pieces done, pieces)`` after each piece.

    """
    bos = bos_id(model.tokenizer)
    ids = torch.tensor(model.tokenizer(text, add_special_tokens=False).input_ids, dtype=torch.long)
    device = next(model.bridge.parameters()).device
    sums, counts = [], []
    starts = range(0, len(ids), window)
    for done, start in enumerate(starts, 1):
        piece = ids[start:start + window]
        tokens = piece if bos is None else torch.cat([torch.tensor([bos]), piece])
        if len(tokens) >= 2:
            with torch.no_grad():
                logits = model.bridge(tokens[None].to(device))[0, :-1].float()
            nll = -torch.log_softmax(logits, dim=-1).gather(1, tokens[1:, None].to(device)).squeeze(1)
            sums.append(float(nll.sum()))
            counts.append(len(tokens) - 1)
        if progress:
            progress(done, len(starts))
    return np.array(sums, dtype=float), np.array(counts, dtype=int)


def read_plain_text(path: str | Path) -> str:
    """The plain text for the language-modelling loss (UTF-8), or a clear error."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"The plain text {path} is not UTF-8 (byte {error.start}); save it as UTF-8 text.") from None
    except OSError as error:
        raise ConfigError(f"Cannot read the plain text {path}: {error.strerror}.") from None


def lm_loss(model: Model, heads: HeadSet, text: str, *, source: str = "text", window: int = 128, n_boot: int = 10_000,
            level: float = 0.95, seed: int = 0, ablation: Ablation | AblationKind | str | None = None,
            progress: Callable[[int, int], None] | None = None) -> LanguageModelLoss:
    """Mean token NLL on ``text``, intact against ``heads`` ablated (as ``ablation`` says, default zero; resample,
    which needs a reference example per row, is refused), with a paired bootstrap CI over windows.
    ``progress(done, total)`` counts the text's pieces, the intact pass's then the ablated one's."""
    kind = as_ablation(ablation)
    if kind.per_row:
        raise ConfigError("The plain-text loss has no reference example to resample a head's z from; drop --plain-text "
                          "for a resample run.")
    intact, counts = window_nll(model, text, window,
                                progress=(lambda done, pieces: progress(done, 2 * pieces)) if progress else None)
    if not len(counts):
        raise ConfigError(f"The plain text {source} has fewer than two tokens; "
                          "give a longer text for the language-modelling loss.")
    with ablate(model, heads, kind):
        ablated, _ = window_nll(model, text, window, progress=(lambda done, pieces: progress(pieces + done, 2 * pieces))
                                if progress else None)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(counts), size=(n_boot, len(counts)))
    deltas = (ablated[idx].sum(1) - intact[idx].sum(1)) / counts[idx].sum(1)
    lo, hi = np.quantile(deltas, [(1 - level) / 2, 1 - (1 - level) / 2])
    n_tokens = int(counts.sum())
    return LanguageModelLoss(source=source, n_windows=len(counts), n_tokens=n_tokens,
                             intact_nll=float(intact.sum() / n_tokens), ablated_nll=float(ablated.sum() / n_tokens),
                             delta=float((ablated.sum() - intact.sum()) / n_tokens), delta_ci=[float(lo), float(hi)],
                             ci_level=level)
