"""Does the selection survive? The frozen, tested selection on its held-out examples under each ablation
kind (zero, mean, resample) at each of the positions asked (all, the shared few-shot prefix only, the
example's own only) and along a scale sweep (α = 1 … 0 and one negative value, at the run's positions), each
against the intact model with its paired CI and exact test (``ablation-kinds.json``).

Zeroing can push later layers off their training distribution, so a gain from zeroing could be that shift
rather than the removal of a harmful computation (Zhang & Nanda 2023; Heimersheim & Nanda 2024). Mean and
resample ablation keep the head's output on its usual distribution; the scale sweep asks whether the gain
grows as the head's output shrinks. These are held-out looks of the frozen selection, logged as such: the
selection was tested first (``celtk test``), and nothing here chooses heads.

Positions make the kinds comparable. Under fixed shots every resample reference shares the shot prefix, which
each example reads unmoved (its own positions are aligned on the last prompt token), so resampling writes each
example's own ``z`` there: ``resample`` replaces only the example's own positions, while ``zero`` and ``mean`` at
``all`` replace every one. ``zero @ example`` and ``mean @ example`` are what ``resample`` compares with like for
like; ``@ prefix`` shows what replacing the shots alone does. With ``reference_shots="redraw"`` each reference
sequence carries its own shots, drawn from the task's few-shot pool (never a held-out example), so the
references share only the chat template's opening with an example and ``resample`` at ``all`` replaces the shot
positions too, like for like with ``zero`` and ``mean`` at ``all``; mean is then measured on those sequences too.
The run's own kind is then not test.json's ablation (its references differ), so only the intact outcomes are
checked against test.json.

Resample is drawn ``draws`` times per example (the run's seed, then seed + 1, …). Its per-example outcome is the
mean verdict over the draws, a fraction; the row's accuracy, gain, fixes and damage are those fractions summed,
its CI a paired bootstrap of the per-example differences (mean verdict − intact), and its p-value an exact paired
sign-flip test of those differences (``paired_p``: every difference is a multiple of 1/draws, so the null
distribution of their sum under independent sign flips is enumerated exactly; with one draw the differences are
−1, 0, 1 and the test is McNemar's exact test). Each draw's own outcomes and gain are kept (their spread is the
resampling noise). The first draw is the run's own seed, so a resample run's test reproduces from it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from jaxtyping import Float, Int
from scipy.stats import binom

from celtk.ablation_kinds import (
    LEFT_RULE,
    REFERENCE_SHOTS,
    Ablation,
    AblationKind,
    check_positions,
    check_reference_shots,
)
from celtk.boundary import public
from celtk.errors import ConfigError, RunStoreError
from celtk.evaluation.scoring import ablation_for, prompt_prefix
from celtk.models import Model
from celtk.run.options import ABLATIONS
from celtk.run.session import Session, session_for
from celtk.run.test import score_kinds
from celtk.stats import bootstrap_chunks, compare_paired
from celtk.store.directory import RunDirectory
from celtk.store.documents import AblationKindsDocument, Correctness, KindRow, TestDocument
from celtk.store.files import JsonObject

if TYPE_CHECKING:
    from celtk.evaluation.results import EvalResult

Progress = Callable[[str, int, int], None]


@public
def run_ablation_kinds(out: Path, *, kinds: Sequence[str] = ABLATIONS.kinds,
                       alphas: Sequence[float] = ABLATIONS.alphas, positions: Sequence[str] = ABLATIONS.positions,
                       draws: int = ABLATIONS.draws, model: Model | None = None, n_boot: int = ABLATIONS.n_boot,
                       progress: Progress | None = None,
                       reference_shots: str = ABLATIONS.reference_shots) -> AblationKindsDocument:
    """Score ``selection.json``'s heads on the tested held-out set under each of ``kinds`` at each of
    ``positions`` (all, prefix, example) and each ``scale:α`` of ``alphas`` at the run's positions, against one
    intact pass (plain streamed passes, as ``celtk test``); mean and resample are measured on the run's
    discovery set, resample drawn ``draws`` times per example, their reference sequences prompted with the run's shots
    (``reference_shots="fixed"``) or each with its own shots drawn from the task's few-shot pool (``"redraw"``).
    Refuses a run that has not been tested, a
    held-out set other than the test's, and a baseline or a run-kind result that no longer reproduces
    ``test.json``. The look (every kind at once) is logged in the run's held-out log before anything is scored,
    and ``ablation-kinds.json`` is recorded there when written."""
    out = Path(out)
    rd = RunDirectory(out)
    where = _check_draws_and_positions(draws, positions)
    wanted = _kinds(kinds, alphas)
    redraw = check_reference_shots(reference_shots) == "redraw"
    with rd.lock():
        admitted = rd.require("ablations")
        sel, test = admitted.frozen, admitted.tested
        session = session_for(sel, model, **(rd.heldout_overrides() or {"heldout": test.n}))
        rd.admit("ablations", session, sel)
        heldout_hash = session.splits.manifest().heldout_hash
        run_where = session.config.positions
        cells, omitted = _cells(wanted, where, run_where, generated=session.task.kind == "generate")
        heads = sel.heads
        # each cell's ablations: one, or one per draw for resample (the run's seed first, then seed + 1, ...)
        measured: dict[str, Ablation] = {}  # redrawn references: each kind's values, measured once
        plans = [_draws(_redrawn(session, k, p, measured) if redraw and k.needs_reference else session.ablation(k, p),
                        draws) for k, p in cells]
        noted: dict[str, Any] = {"reference_shots": "redraw"} if redraw else {}  # fixed: the line it always had
        seq = rd.begin_look("ablation-kinds", [heads], heldout_hash, len(session.splits.heldout), exploratory=True,
                            kinds=[_label(k, p) for k, p in cells], draws=draws,
                            **noted)
        flat_plans = [a for plan in plans for a in plan]
        if progress:  # one step per held-out pass: the intact one, then each kind (each resample draw) in turn
            progress("ablation passes", 0, 1 + len(flat_plans))
        intact, flat = score_kinds(session, "heldout", heads, flat_plans,
                                   on_pass=(lambda done, passes: progress("ablation passes", done, passes))
                                   if progress else None)
        results = _regroup(flat, plans)
        own = {str(k): r[0] for (k, p), r in zip(cells, results, strict=True)
               if p == run_where and not (redraw and k.needs_reference)}  # redrawn references: not the test's kind
        _check_reproduces_test(out, test, intact, own, session.config.ablation)
        rows = [_row(k, p, intact, result, session, n_boot) for (k, p), result in zip(cells, results, strict=True)]
        document = AblationKindsDocument(
            heads=sel.heads, model=sel.model.ref, task=sel.task.ref, run_ablation=session.config.ablation,
            test_gain=test.gain, n=len(intact.examples), intact_accuracy=intact.accuracy,
            intact_correct=Correctness.of(intact.correct), heldout_hash=heldout_hash,
            reference=_reference(session, [plan[0] for plan in plans], draws),
            n_boot=n_boot, ci_level=0.95, kinds=rows, omitted=omitted)
        rd.finish_look(seq, (document, None))
        return document


def _check_draws_and_positions(draws: int, positions: Sequence[str]) -> list[str]:
    """The positions asked for, each once, after checking ``draws`` and them."""
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ConfigError(f"draws must be a whole number of resample draws per example, at least 1, got {draws!r}.")
    where = list(dict.fromkeys(check_positions(p) for p in positions))
    if not where:
        raise ConfigError("Name at least one of the positions all, prefix, example to score the kinds at.")
    return where


def _cells(wanted: list[AblationKind], where: list[str], run_where: str, *, generated: bool
           ) -> tuple[list[tuple[AblationKind, str]], dict[str, str]]:
    """(kind, positions) to score: each named kind at each of ``where``, each scale at the run's positions; on a
    generation-graded task only what a generation can be scored under, with why the rest is left out."""
    cells = [(k, p) for k in wanted if k.alpha is None for p in where]
    cells += [(k, run_where) for k in wanted if k.alpha is not None]
    omitted = {}
    if generated:
        if any(k.name == "resample" for k, _ in cells):
            omitted["resample"] = ("not offered for generation-graded tasks "
                                   "(a generation reads positions no reference has)")
        if any(p != "all" for _, p in cells):
            omitted["prefix and example positions"] = ("not offered for generation-graded tasks (left-padded "
                                                       "batches move every position)")
        cells = [(k, p) for k, p in cells if k.name != "resample" and p == "all"]
    return cells, omitted


def _regroup(flat: list[EvalResult], plans: list[list[Ablation]]) -> list[list[EvalResult]]:
    """The passes of one flat list back into one list per cell (a cell's plan: its draws)."""
    results, at = [], 0
    for plan in plans:
        results.append(flat[at:at + len(plan)])
        at += len(plan)
    return results


def _redrawn(session: Session, kind: AblationKind, positions: str, cache: dict[str, Ablation]) -> Ablation:
    """``kind`` at ``positions`` with its values measured on the discovery set, each reference prompted with its
    own shots (:func:`celtk.evaluation.scoring.redrawn_shots`, never a held-out example), drawn with the run's
    seed; the values are measured once per kind into ``cache`` (only where they replace ``z`` differs between
    positions)."""
    c = session.config
    if str(kind) not in cache:
        cache[str(kind)] = ablation_for(session.model, kind, session.task, session.splits.discovery,
                                        session.splits.shots, c.chat, c.chat_date, seed=c.seed,
                                        reference_shots="redraw",
                                        exclude=[e.content_hash for e in session.splits.heldout])
    if positions == "all":
        return cache[str(kind)]
    prefix = prompt_prefix(session.model, session.task, session.splits.shots, c.chat, c.chat_date)
    return replace(cache[str(kind)], positions=positions, prefix=prefix)


def _label(kind: AblationKind, positions: str) -> str:
    return str(kind) if positions == "all" else f"{kind} @ {positions}"


def _draws(ablation: Ablation, draws: int) -> list[Ablation]:
    """``ablation`` alone, or for resample ``draws`` copies drawing with the seeds ``seed, seed + 1, …`` (the
    reference values are the same; only each example's reference differs)."""
    if not ablation.per_row:
        return [ablation]
    return [replace(ablation, seed=ablation.seed + i) for i in range(draws)]


def _kinds(kinds: Sequence[str], alphas: Sequence[float]) -> list[AblationKind]:
    """The kinds to score, in order, each once (``scale:α`` for every α after the named kinds)."""
    parsed = [AblationKind.parse(k) for k in kinds] + [AblationKind.parse(f"scale:{float(a)!r}") for a in alphas]
    unique = list(dict.fromkeys(parsed))
    if not unique:
        raise ConfigError("Name at least one ablation kind or scale α to score "
                          "(e.g. zero,mean,resample and α = 1 … 0).")
    return unique


def _check_reproduces_test(out: Path, test: TestDocument, intact: EvalResult, results: dict[str, EvalResult],
                           run_kind: str) -> None:
    """The intact outcomes, and the run's own kind where it was scored, must be test.json's example by example."""
    if Correctness.of(intact.correct) != Correctness.of(e.intact_correct for e in test.examples):
        raise RunStoreError(f"{out}: the intact model now scores the held-out set differently from test.json, so the "
                            "baseline changed (model, data, device or numerics); ask on the test's setup.")
    if run_kind in results and (Correctness.of(results[run_kind].correct)
                                != Correctness.of(e.ablated_correct for e in test.examples)):
        raise RunStoreError(f"{out}: the selection under the run's own ablation ({run_kind}) now scores the held-out "
                            "set differently from test.json; ask on the test's setup.")


def _correct_logprobs(result: EvalResult, session: Session) -> Float[np.ndarray, " example"] | None:
    """Per example, the summed target log-probability (the correct choice's); ``None`` for generation."""
    values = []
    for r, example in zip(result.examples, session.splits.heldout, strict=True):
        if r.logprob is None:
            return None
        values.append(r.logprob[example.label or 0] if isinstance(r.logprob, list) else r.logprob)
    return np.array(values, dtype=float)


def _row(kind: AblationKind, positions: str, intact: EvalResult, results: Sequence[EvalResult], session: Session,
         n_boot: int) -> KindRow:
    before = _correct_logprobs(intact, session)
    deltas = []
    for result in results:
        after = _correct_logprobs(result, session)
        if before is not None and after is not None and len(before):
            deltas.append(float(np.mean(after - before)))
    delta = float(np.mean(deltas)) if deltas and len(deltas) == len(results) else None
    first = compare_paired(intact.correct, results[0].correct, n_boot=n_boot, seed=session.config.seed)
    row = KindRow(kind=str(kind), alpha=kind.alpha, positions=positions, mean_delta_logprob=delta,
                  ablated_correct=Correctness.of(results[0].correct), ablated_accuracy=first.ablated_accuracy,
                  gain=first.gain, gain_ci=list(first.gain_ci) if first.gain_ci else None, fixes=first.fixes,
                  damage=first.damage, mcnemar_p=first.mcnemar_p,
                  undefined={k: v for k, v in first.undefined.items() if k != "relative_error_reduction"})
    if len(results) == 1:
        return row
    base = np.asarray(intact.correct, dtype=bool)
    verdicts = np.array([np.asarray(r.correct, dtype=bool) for r in results])  # [draw, example]
    row = replace(row, draws=len(results), draw_correct=[Correctness.of(v) for v in verdicts], mcnemar_p=None)
    if not len(base):
        return replace(row, undefined=row.undefined | {"paired_p": "no examples (n = 0)"})
    units = verdicts.sum(axis=0) - len(results) * base  # per example (mean verdict − intact) × draws: integers
    mean = verdicts.mean(axis=0)
    return replace(row, ablated_accuracy=float(mean.mean()), gain=float(mean.mean() - base.mean()),
                   gain_ci=_bootstrap_ci(units / len(results), n_boot, session.config.seed),
                   fixes=float(mean[~base].sum()), damage=float((1 - mean[base]).sum()), paired_p=sign_flip_p(units),
                   draw_gains=[float(v.mean() - base.mean()) for v in verdicts],
                   undefined=row.undefined | {
                       "mcnemar_p": f"averaged over {len(results)} draws: paired_p is the exact sign-flip test of "
                                    "the per-example mean verdicts (McNemar's with one draw)"})


def sign_flip_p(units: Int[np.ndarray, " example"]) -> float:
    """Two-sided exact p-value of a paired sign-flip test: the probability, under independent random signs on
    every difference, of a sum at least as far from 0 as ``units.sum()`` (integer differences, e.g. per-example
    mean verdict − intact outcome in units of 1/draws). With differences in {−1, 0, 1} this is McNemar's exact test."""
    sizes = np.abs(np.asarray(units, dtype=np.int64))
    observed = abs(int(np.asarray(units).sum()))
    if not sizes.any():
        return 1.0
    dist = np.ones(1)  # P(sum = s) for s = −reach … reach
    for size, count in zip(*np.unique(sizes[sizes > 0], return_counts=True), strict=True):
        # c differences of size v with random signs sum to v·(2k − c), k ~ Binomial(c, ½)
        kernel = np.zeros(2 * int(size) * int(count) + 1)
        kernel[::2 * int(size)] = binom.pmf(np.arange(count + 1), count, 0.5)
        dist = np.convolve(dist, kernel)
    reach = (len(dist) - 1) // 2
    sums = np.arange(-reach, reach + 1)
    return float(min(1.0, dist[np.abs(sums) >= observed].sum()))


def _bootstrap_ci(differences: Float[np.ndarray, " example"], n_boot: int, seed: int,
                  level: float = 0.95) -> list[float]:
    """Percentile bootstrap CI of the mean per-example difference (examples resampled with replacement)."""
    rng = np.random.default_rng(seed)
    n, means = len(differences), []
    for chunk in bootstrap_chunks(n_boot, n):
        means.append(differences[rng.integers(0, n, size=(chunk, n))].mean(axis=1))
    values = np.concatenate(means)
    tail = (1 - level) / 2
    return [float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))]


def _reference(session: Session, ablations: Sequence[Ablation], draws: int = 1) -> JsonObject:
    """What mean and resample were measured on: the run's discovery set, prompted as the held-out examples."""
    out: JsonObject = {"set": "discovery", "n": len(session.splits.discovery)}
    for ablation in ablations:
        if ablation.kind.name == "mean":
            out["mean"] = "per head, z averaged over every position of every reference sequence (prompt + answer)"
            out["mean_positions"] = ablation.reference_positions
        if ablation.kind.name == "resample":
            out["resample"] = ("per example, z of a seeded reference drawn from the discovery set, "
                               + ("left-aligned on the first token; past the reference's end its last position"
                                  if ablation.alignment_rule() == LEFT_RULE else
                                  "aligned on the last prompt token: the tokens an example's prompt shares with the "
                                  "reference's (the shots under fixed shots) read unmoved, its own positions at the "
                                  "same distance from the last prompt token, clamped into the reference's own part"))
            out["seed"] = ablation.seed
            out["draws"] = draws
            out["draw_seeds"] = f"{ablation.seed} … {ablation.seed + draws - 1}"
        if ablation.reference_shots != "fixed":
            out["reference_shots"] = REFERENCE_SHOTS[ablation.reference_shots]
        if not ablation.everywhere:
            out["prefix"] = ("the prompt text before the example's own (chat opening, shots, delimiters): "
                             f"{len(ablation.prefix)} tokens; an example's boundary is the tokens its context shares "
                             "with it")
    return out
