"""Does the selection survive? The frozen, tested selection on its held-out examples under each ablation
kind (zero, mean, resample) and along a scale sweep (α = 1 … 0 and one negative value), each against the
intact model with its paired CI and exact McNemar p (``ablation-kinds.json``).

Zeroing can push later layers off their training distribution, so a gain from zeroing could be that shift
rather than the removal of a harmful computation (Zhang & Nanda 2023; Heimersheim & Nanda 2024). Mean and
resample ablation keep the head's output on its usual distribution; the scale sweep asks whether the gain
grows as the head's output shrinks. These are held-out looks of the frozen selection, logged as such: the
selection was tested first (``celtk test``), and nothing here chooses heads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from jaxtyping import Float

from celtk.ablation_kinds import Ablation, AblationKind
from celtk.errors import ConfigError, RunStoreError
from celtk.models import Model
from celtk.run.directory import RunDirectory
from celtk.run.documents import AblationKindsDocument, Correctness, KindRow, TestDocument
from celtk.run.session import Session, session_for
from celtk.run.test import score_kinds
from celtk.stats import compare_paired

if TYPE_CHECKING:
    from celtk.evaluation.results import EvalResult

Progress = Callable[[str, int, int], None]
KINDS = ("zero", "mean", "resample")
ALPHAS = (1.0, 0.75, 0.5, 0.25, 0.0, -0.5)


def run_ablation_kinds(out: Path, *, kinds: Sequence[str] = KINDS, alphas: Sequence[float] = ALPHAS,
                       model: Model | None = None, n_boot: int = 10_000,
                       progress: Progress | None = None) -> AblationKindsDocument:
    """Score ``selection.json``'s heads on the tested held-out set under each of ``kinds`` and each
    ``scale:α`` of ``alphas``, against one intact pass (plain streamed passes, as ``celtk test``); mean and
    resample are measured on the run's discovery set. Refuses a run that has not been tested, a held-out
    set other than the test's, and a baseline or a run-kind result that no longer reproduces ``test.json``.
    The look (every kind at once) is logged in the run's held-out log before anything is scored, and
    ``ablation-kinds.json`` is recorded there when written."""
    out = Path(out)
    rd = RunDirectory(out)
    wanted = _kinds(kinds, alphas)
    with rd.lock():
        admitted = rd.require("ablations")
        sel, test = admitted.frozen, admitted.tested
        session = session_for(sel, model, **(rd.heldout_overrides() or {"heldout": test.n}))
        rd.admit("ablations", session, sel)
        heldout_hash = session.splits.manifest().heldout_hash
        omitted = {}
        if session.task.kind == "generate" and any(k.name == "resample" for k in wanted):
            wanted = [k for k in wanted if k.name != "resample"]
            omitted["resample"] = ("not offered for generation-graded tasks "
                                   "(a generation reads positions no reference has)")
        heads = sel.heads
        if progress:
            progress("ablation kinds", 0, len(wanted))
        ablations = [session.ablation(k) for k in wanted]
        seq = rd.begin_look("ablation-kinds", [heads], heldout_hash, len(session.splits.heldout), exploratory=True,
                            kinds=[str(k) for k in wanted])
        intact, results = score_kinds(session, "heldout", heads, ablations)
        if progress:
            progress("ablation kinds", len(wanted), len(wanted))
        _check_reproduces_test(out, test, intact, dict(zip(map(str, wanted), results, strict=True)),
                               session.config.ablation)
        rows = [_row(kind, intact, result, session, n_boot) for kind, result in zip(wanted, results, strict=True)]
        document = AblationKindsDocument(
            heads=sel.heads, model=sel.model.name, task=sel.task.name, run_ablation=session.config.ablation,
            test_gain=test.gain, n=len(intact.examples), intact_accuracy=intact.accuracy,
            intact_correct=Correctness.of(intact.correct), heldout_hash=heldout_hash,
            reference=_reference(session, ablations),
            n_boot=n_boot, ci_level=0.95, kinds=rows, omitted=omitted)
        rd.finish_look(seq, (document, None))
        return document


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


def _row(kind: AblationKind, intact: EvalResult, result: EvalResult, session: Session, n_boot: int) -> KindRow:
    s = compare_paired(intact.correct, result.correct, n_boot=n_boot, seed=session.config.seed)
    before, after = _correct_logprobs(intact, session), _correct_logprobs(result, session)
    delta = None if before is None or after is None or not len(before) else float(np.mean(after - before))
    return KindRow(kind=str(kind), alpha=kind.alpha, ablated_accuracy=s.ablated_accuracy, gain=s.gain,
                   gain_ci=list(s.gain_ci) if s.gain_ci else None, fixes=s.fixes, damage=s.damage,
                   mcnemar_p=s.mcnemar_p, mean_delta_logprob=delta, ablated_correct=Correctness.of(result.correct),
                   undefined={k: v for k, v in s.undefined.items() if k != "relative_error_reduction"})


def _reference(session: Session, ablations: Sequence[Ablation]) -> dict:
    """What mean and resample were measured on: the run's discovery set, prompted as the held-out examples."""
    out: dict = {"set": "discovery", "n": len(session.splits.discovery)}
    for ablation in ablations:
        if ablation.kind.name == "mean":
            out["mean"] = "per head, z averaged over every position of every reference sequence (prompt + answer)"
            out["mean_positions"] = ablation.reference_positions
        if ablation.kind.name == "resample":
            out["resample"] = ("per example, z of a seeded reference drawn from the discovery set, left-aligned on the "
                               "first token; past the reference's end its last position")
            out["seed"] = ablation.seed
    return out
