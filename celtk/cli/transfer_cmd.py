"""``celtk transfer / calibrate / ablations``: does a selection hold beyond the prompts it was found on,
does its discovery gain stand above what the search finds by chance, and does it survive ablation kinds
other than zeroing?"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from celtk.cli._common import console, progress_bar
from celtk.run.options import ABLATIONS, CALIBRATE, TRANSFER

if TYPE_CHECKING:  # annotations only: the documents load with the stage that writes them
    from celtk.store.documents import AblationKindsDocument, TransferDocument


def _names(text: str | None) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()] if text else []


def _listed(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str]:
    return _names(value)


def _seeds(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int]:
    try:
        return [int(s) for s in _names(value)]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of whole numbers, e.g. 1,2,3.") from None


def _pts(value: float | None) -> str:
    return "undefined" if value is None else f"{100 * value:+.1f}"


def _print_transfer(doc: TransferDocument) -> None:
    from rich.table import Table

    table = Table(title=f"Transfer of {doc.heads} (held-out examples only; discovery gain "
                        f"{100 * doc.discovery_gain:+.1f} pts is selection-biased)")
    for col in ("variant", "task", "data", "shots", "n", "intact", "ablated", "gain (pts)", "95% CI (pts)", "McNemar p",
                "Holm p", "fixes/damage"):
        table.add_column(col, justify="right")
    for r in doc.variants:
        ci = "undefined" if r.gain_ci is None else f"[{100 * r.gain_ci[0]:+.1f}, {100 * r.gain_ci[1]:+.1f}]"
        table.add_row(r.variant + (" (test.json)" if r.from_test else ""), str(r.task), r.data or "?",
                      f"{r.fewshot} (seed {r.shot_seed})" + (" chat" if r.chat else ""), str(r.n),
                      "undefined" if r.intact_accuracy is None else f"{r.intact_accuracy:.1%}",
                      "undefined" if r.ablated_accuracy is None else f"{r.ablated_accuracy:.1%}", _pts(r.gain), ci,
                      "undefined" if r.mcnemar_p is None else f"{r.mcnemar_p:.3g}",
                      "undefined" if r.holm_p is None else f"{r.holm_p:.3g}", f"{r.fixes}/{r.damage}")
    console().print(table)
    for d in doc.dropped:
        console().print(f"Not scored: {d.variant} — " + (f"{d.reason} as {d.same_as} (a duplicate row would also count "
                        "twice in Holm)" if d.same_as else d.reason) + ".")
    if doc.lm_loss:
        lm = doc.lm_loss
        console().print(f"Language-modelling loss on {lm.source} ({lm.n_tokens} tokens): {lm.intact_nll:.4f} → "
                        f"{lm.ablated_nll:.4f} nats/token (Δ {lm.delta:+.4f}, {lm.ci_level:.0%} CI "
                        f"[{lm.delta_ci[0]:+.4f}, {lm.delta_ci[1]:+.4f}]).")


@click.command("transfer")
@click.argument("out", type=click.Path(file_okay=False, exists=True))
@click.option("--shots-seeds", callback=_seeds, default=",".join(map(str, TRANSFER.shots_seeds)), show_default=True,
              help="Other few-shot draws (seeds); the default is skipped on a run with no shots to redraw, seeds given "
                   "there are refused.")
@click.option("--zero-shot/--no-zero-shot", default=TRANSFER.zero_shot, show_default=True,
              help="Add the zero-shot variant.")
@click.option("--subtasks", default=None, help="Neighbouring subtasks of the run's task family, e.g. 2ds,3da.")
@click.option("--tasks", default=None, help="Other tasks (side effects), e.g. boolq,arithmetic:1dc.")
@click.option("--chat", is_flag=True, default=TRANSFER.chat, help="Add the chat-template variant.")
@click.option("--other-model", "other_models", multiple=True, help="Another model of the same shape (repeatable).")
@click.option("--plain-text", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Plain text for the language-modelling loss, intact against ablated.")
@click.option("--heldout", type=click.IntRange(min=1), default=None,
              help="Held-out examples each variant of another task (--tasks, --subtasks) draws (default: the run's "
                   "held-out size); the run's own task keeps its frozen held-out set.")
@click.option("--n-boot", type=click.IntRange(min=1, max=1_000_000), default=TRANSFER.n_boot, show_default=True,
              help="Bootstrap resamples (at most 1,000,000).")
def transfer_cmd(out: str, shots_seeds: list[int], zero_shot: bool, subtasks: str | None, tasks: str | None,
                 chat: bool, other_models: tuple[str, ...], plain_text: str | None, heldout: int | None,
                 n_boot: int) -> None:
    """The frozen selection against the intact model under a grid of variants, on held-out examples; writes
    OUT/transfer.json."""
    from celtk.errors import ConfigError
    from celtk.run.transfer import check_heldout_size, run_transfer, variant_grid
    from celtk.store.documents import SelectionDocument

    task = SelectionDocument.load(Path(out)).task.name
    given = click.get_current_context().get_parameter_source("shots_seeds") != click.core.ParameterSource.DEFAULT
    grid = variant_grid(task, shot_seeds=shots_seeds if given else None, zero_shot=zero_shot, subtasks=_names(subtasks),
                        tasks=_names(tasks), chat=chat, models=other_models)
    try:  # the library's check (run_transfer makes it too), in the flags' words, as a usage error
        check_heldout_size(grid, heldout, flags=True)
    except ConfigError as error:
        raise click.UsageError(str(error)) from None
    with progress_bar() as progress:
        doc = run_transfer(Path(out), grid, heldout=heldout, plain_text=plain_text, n_boot=n_boot, progress=progress)
    _print_transfer(doc)


@click.command("calibrate")
@click.argument("out", type=click.Path(file_okay=False, exists=True))
@click.option("--null", "null", type=click.Choice(["search", "permutation", "random-heads"]), default=CALIBRATE.null,
              show_default=True,
              help="search: the whole search rerun on relabelled outcomes (stored outcomes, no model; the p-value "
                   "to quote). permutation: each scored candidate relabelled alone (a scale, no p-value). "
                   "random-heads: the search on random pools (forward passes; a scale, no p-value).")
@click.option("--repeats", type=click.IntRange(min=1, max=100_000), default=CALIBRATE.repeats, show_default=True,
              help="Null draws (at most 100,000).")
@click.option("--candidates", "n_candidates", type=click.IntRange(min=1, max=100_000), default=None,
              help="random-heads only: the older control, the best of N random sets of the selection's size per "
                   "draw, in place of the search on a random pool (at most 100,000).")
@click.option("--seed", type=click.IntRange(min=0), default=CALIBRATE.seed, show_default=True)
def calibrate_cmd(out: str, null: str, repeats: int, n_candidates: int | None, seed: int) -> None:
    """The best discovery gain a search finds under no effect, beside the run's; writes OUT/calibration-NULL.json."""
    import numpy as np

    from celtk.run.calibrate import run_calibration

    with progress_bar() as progress:
        doc = run_calibration(Path(out), null=null, repeats=repeats, seed=seed, n_candidates=n_candidates,
                              progress=progress)
    disc, held = np.array(doc.null_discovery_gains), np.array(doc.null_heldout_gains)
    console().print(f"Null '{doc.null}' ({doc.validity}), {doc.repeats} draws over {doc.n_candidates} candidates:")
    console().print(f"  best discovery gain: median {100 * np.median(disc):+.1f} pts, 95th percentile "
                    f"{100 * np.quantile(disc, 0.95):+.1f}; its held-out gain: mean {100 * held.mean():+.1f} pts.")
    held_obs = "" if doc.observed_heldout_gain is None else f", held-out {100 * doc.observed_heldout_gain:+.1f} pts"
    console().print(f"  observed: discovery {100 * doc.observed_discovery_gain:+.1f} pts (selection-biased){held_obs}; "
                    + (f"share of null bests at or above it p = {doc.p_value:.3g}." if doc.p_value is not None
                       else f"{doc.p_value_note}"))


def _floats(ctx: click.Context, param: click.Parameter, value: str | None) -> list[float]:
    import math

    try:
        numbers = [float(s) for s in _names(value)]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of numbers, e.g. 1,0.5,0,-0.5.") from None
    if not all(math.isfinite(a) for a in numbers):
        raise click.BadParameter(f"{value!r}: every α must be a finite number.")
    return numbers


def _print_kinds(doc: AblationKindsDocument) -> None:
    from rich.table import Table

    table = Table(title=f"{doc.heads} under each ablation kind, on {doc.n} held-out examples (intact "
                        f"{doc.intact_accuracy:.1%}; the run was tested under {doc.run_ablation}: "
                        f"{100 * doc.test_gain:+.1f} pts)")
    for col in ("kind", "positions", "draws", "ablated", "gain (pts)", "95% CI (pts)", "p", "fixes/damage",
                "draw spread (pts)", "Δ log-prob"):
        table.add_column(col, justify="right")
    for r in doc.kinds:
        ci = "undefined" if r.gain_ci is None else f"[{100 * r.gain_ci[0]:+.1f}, {100 * r.gain_ci[1]:+.1f}]"
        p = r.mcnemar_p if r.draws == 1 else r.paired_p
        spread = (f"{100 * min(r.draw_gains):+.1f} … {100 * max(r.draw_gains):+.1f}" if r.draw_gains else "")
        table.add_row(r.kind, r.positions, str(r.draws),
                      "undefined" if r.ablated_accuracy is None else f"{r.ablated_accuracy:.1%}", _pts(r.gain),
                      ci, "undefined" if p is None else f"{p:.3g}", f"{r.fixes:g}/{r.damage:g}", spread,
                      "" if r.mean_delta_logprob is None else f"{r.mean_delta_logprob:+.3f}")
    console().print(table)
    console().print("positions: where z was replaced (all; prefix: the shared few-shot prefix only; example: the "
                    "example's own positions only). p: exact McNemar with one draw; over several resample draws an "
                    "exact paired sign-flip test of the per-example mean verdicts, whose fixes and damage are sums of "
                    "fractions; draw spread: the lowest and highest single-draw gain.")
    for kind, why in doc.omitted.items():
        console().print(f"{kind}: {why}.")


@click.command("ablations")
@click.argument("out", type=click.Path(file_okay=False, exists=True))
@click.option("--kinds", callback=_listed, default=",".join(ABLATIONS.kinds), show_default=True,
              help="Ablation kinds to score beside the scale sweep (zero, mean, resample, scale:α).")
@click.option("--alphas", callback=_floats, default=",".join(f"{a:g}" for a in ABLATIONS.alphas), show_default=True,
              help="The scale sweep: z × α for each α (1 is intact, 0 is zeroing; −10 ≤ α ≤ 10).")
@click.option("--positions", callback=_listed, default=",".join(ABLATIONS.positions), show_default=True,
              help="Where each named kind replaces z: all positions, the shared few-shot prefix only, the example's "
                   "own positions only (the scale sweep runs at the run's positions).")
@click.option("--draws", type=click.IntRange(min=1, max=1000), default=ABLATIONS.draws, show_default=True,
              help="Resample draws per example, averaged per example before the paired statistics.")
@click.option("--reference-shots", type=click.Choice(("fixed", "redraw")), default=ABLATIONS.reference_shots,
              show_default=True,
              help="The few-shot shots of the reference sequences mean and resample measure z on: the run's own "
                   "(fixed), or each reference its own, drawn from the task's few-shot pool (redraw), so that "
                   "resample at all positions replaces the shot positions too.")
@click.option("--n-boot", type=click.IntRange(min=1, max=1_000_000), default=ABLATIONS.n_boot, show_default=True,
              help="Bootstrap resamples (at most 1,000,000).")
def ablations_cmd(out: str, kinds: list[str], alphas: list[float], positions: list[str], draws: int,
                  reference_shots: str, n_boot: int) -> None:
    """Does the tested selection's gain survive mean, resample and scaled ablation, at every position, the
    few-shot prefix's and the example's own? Held-out looks; writes OUT/ablation-kinds.json."""
    from celtk.run.ablations import run_ablation_kinds

    with progress_bar() as progress:
        doc = run_ablation_kinds(Path(out), kinds=kinds, alphas=alphas, positions=positions,
                                 draws=draws, n_boot=n_boot, progress=progress, reference_shots=reference_shots)
    _print_kinds(doc)


COMMANDS = [transfer_cmd, calibrate_cmd, ablations_cmd]
