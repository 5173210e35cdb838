"""``celtk screen / select / test / run / merge``: Algorithm 1 on a run directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar

import click

from celtk.cli._common import FiniteFloatRange, console, progress_bar, resolve_config
from celtk.run.options import REPLICATE, RUN, SELECT
from celtk.run.registry import SCREENS
from celtk.search.registry import STRATEGIES, TIE_BREAKS

if TYPE_CHECKING:  # annotations only: the documents load with the stage that writes them
    from celtk.run.config import RunConfig
    from celtk.run.replicate import ReplicateDocument
    from celtk.store.documents import ScreenDocument, SelectionDocument, TestDocument
    from celtk.store.heldout import Look

    _BatchBase = click.ParamType[int | str, int | str]
else:
    _BatchBase = click.ParamType  # generic only in click's stubs of 8.2 and later; click>=8.1 at run time

F = TypeVar("F", bound=Callable[..., object])  # a command function, as click's option decorators take and return it


def _run_options(fn: F) -> F:
    options = [
        click.option("--preset", default=None, help="Settings bundle under the config file and flags: 'paper' "
                     "(the paper's sizes and splits for the task) or 'paper:TASK'; see the README."),
        click.option("--config", "config_file", default=None, type=click.Path(dir_okay=False),
                     help="JSON or TOML settings (flags override)."),
        click.option("--model", default=None, help=f"Alias, hub id, HF directory or .gguf (default {RUN.model})."),
        click.option("--task", default=None, help=f"Task (default {RUN.task}); see `celtk tasks`."),
        click.option("--data", default=None, help="Local copy of a hub task's data."),
        click.option("--synthetic/--no-synthetic", default=None, help="With --preset paper[:arithmetic]: run the "
                     "paper's sizes on generated data instead of the official rows (recorded and shown)."),
        click.option("--discovery", type=click.IntRange(min=1), default=None,
                     help=f"Discovery examples (default {RUN.discovery})."),
        click.option("--heldout", type=click.IntRange(min=1), default=None,
                     help=f"Held-out examples (default {RUN.heldout})."),
        click.option("--seed", type=click.IntRange(min=0), default=None,
                     help=f"Split and shot seed (default {RUN.seed})."),
        click.option("--fewshot", type=click.IntRange(min=0), default=None,
                     help=f"Shots per prompt (default {RUN.fewshot})."),
        click.option("--chat/--no-chat", default=None, help=f"Chat template (default {'on' if RUN.chat else 'off'})."),
        click.option("--chat-date", default=None,
                     help=f"ISO date chat templates see as 'today' (default {RUN.chat_date})."),
        click.option("--batch-size", type=_BATCH, default=None,
                     help=f"Examples per batch, or 'auto' to fit the device's free memory (default {RUN.batch_size})."),
        click.option("--device", default=None, help=f"cpu, cuda, cuda:N, auto (default {RUN.device})."),
        click.option("--dtype", default=None, help=f"float32, bfloat16, float16 (default {RUN.dtype})."),
        click.option("--grading", type=click.Choice(["teacher", "generate"]), default=None,
                     help="jsonl:PATH tasks: grade teacher-forced targets (default) or the greedy generation "
                          "(exact match)."),
        click.option("--stop", multiple=True,
                     help="With --grading generate: a stop string (repeatable; default a newline)."),
        click.option("--max-new-tokens", type=click.IntRange(min=1), default=None,
                     help="With --grading generate: token limit (default 32)."),
        click.option("--allow-code-execution/--no-allow-code-execution", "allow_code", default=None,
                     help="Let mbpp/humaneval run model-written code in the sandbox."),
        click.option("--ablation", default=None, help="What replaces an ablated head's z: zero (the paper's), mean "
                     "or resample (values from the discovery set) or scale:α; recorded, never mixed in one run "
                     f"(default {RUN.ablation})."),
        _tie_break_option(RUN.tie_break),
        click.option("--positions", type=click.Choice(("all", "prefix", "example")), default=None,
                     help="Where the ablation replaces z: all positions (default, the paper's), the shared few-shot "
                     "prefix only, or the example's own positions only; recorded, never mixed in one run."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _tie_break_option(default: str) -> Callable[[F], F]:
    return click.option("--tie-break", "tie_break", type=click.Choice(TIE_BREAKS), default=None,
                        help="How heads tied in gain, damage, accuracy and size are ranked (the pool and the "
                        "selection): numeric ids, L2H0 before L10H0, or the paper's string order, L10H0 before L2H0 "
                        f"(default {default}; recorded).")


class _BatchSize(_BatchBase):
    name = "INTEGER|auto"

    def convert(self, value: int | str, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if value == "auto" or isinstance(value, int):
            return value
        try:
            size = int(value)
        except ValueError:
            self.fail(f"{value!r} is neither a whole number nor 'auto'.", param, ctx)
        if size < 1:
            self.fail(f"{size} is not a batch size; use a whole number ≥ 1 or 'auto'.", param, ctx)
        return size


_BATCH = _BatchSize()


def _screen_options(fn: F) -> F:
    fn = click.option("--racing-mode", type=click.Choice(["exact", "confidence"]), default=None,
                      help="With --screen racing: 'exact' (the exhaustive pool, guaranteed; default) or 'confidence' "
                      "(drops heads on a 95% Hoeffding–Serfling bound too; recorded).")(fn)
    return click.option("--screen", "screen", type=click.Choice(SCREENS.names()), default=None,
                        help="exhaustive (default): every head on every example. racing: stop scoring a head once it "
                        "cannot enter the top-p pool (--p); only greedy/beam/stability need exhaustive.")(fn)


def _flags(**kw: object) -> dict[str, object]:
    if "stop" in kw:  # click gives () for a repeatable option not given
        stop = kw["stop"]
        kw["stop"] = list(stop) if isinstance(stop, tuple) and stop else None
    return {k: v for k, v in kw.items() if k not in {"config_file", "out", "shard"}}


def _print_screen(doc: ScreenDocument, top: int = 10) -> None:
    from rich.table import Table

    rows = doc.ranked_rows()[:top]
    table = Table(title=f"Top single-head ablations on {doc.n} discovery examples (intact {doc.intact_accuracy:.1%})")
    for col in ("head", "accuracy", "gain (pts)", "fixes", "damage"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r.head), f"{r.accuracy:.1%}", f"{100 * r.gain:+.1f}", str(r.fixes), str(r.damage))
    console().print(table)
    if doc.config.get("synthetic"):
        console().print(f"[bold yellow]Synthetic data:[/] {doc.config.get('preset') or 'these'} settings on celtk's "
                        "generated data, not the official rows (synthetic = true in config.json).")
    from celtk.run.select import screen_regime

    regime = screen_regime(doc.intact_accuracy, doc.n)
    if regime:
        console().print(f"[bold yellow]{regime}[/]")
    if not any(r.gain_count > 0 for r in doc.complete_rows()):
        console().print("[bold yellow]No single head gains on the discovery set when removed[/]: a subset may still "
                        "(select searches them), but a selection that gains nothing is not frozen.")
    if doc.racing:
        race = doc.racing
        dropped = len(doc.dropped_rows())
        console().print(f"Racing screen ({race.mode} mode, top p = {race.p}): {dropped} of {len(doc.heads)} heads "
                        f"dropped early; {race.evaluations} of {race.exhaustive_evaluations} (head, example) "
                        f"evaluations made, {race.saved_fraction:.1%} saved." + (
                            f" Dropped by the confidence bound alone: {', '.join(map(str, race.uncertified))}."
                            if race.uncertified else ""))


def _print_selection(doc: SelectionDocument) -> None:
    change = (f"discovery accuracy {doc.intact_discovery_accuracy:.1%} → {doc.discovery_accuracy:.1%} "
              f"(gain {100 * doc.discovery_gain:+.1f} pts, selection-biased: the best of the candidates on the "
              "examples that chose it; `celtk test` gives the honest held-out gain)")
    if doc.forced_after_test:
        looks = ", ".join(f"{look.what} (look {look.seq})" for look in doc.prior_looks or []) or "the test"
        console().print("[bold red]Selected again after the held-out set was looked at (--force: " + looks + "): the "
                        "held-out set is no longer untouched for this selection.[/]")
    if doc.forced_no_gain:
        console().print("[bold red]Frozen with --force although it gains nothing on the discovery set: a test of it "
                        "looks for an effect the search did not find.[/]")
    if doc.strategy == "algorithm1":
        console().print(f"Selected [bold]{doc.heads}[/] from pool {', '.join(map(str, doc.pool or []))} "
                        f"({doc.n_evaluated_subsets} subsets evaluated): {change}. "
                        f"{len(doc.flagged_interactions or [])} subset(s) flagged as non-additive "
                        "(descriptive, not a test).")
    else:
        console().print(f"Selected [bold]{doc.heads}[/] by {doc.strategy} search "
                        f"({doc.n_evaluations} interventions evaluated, the screen included): {change}.")
    console().print(f"Frozen with its held-out set: {doc.heldout.n} examples (seed {doc.heldout.seed}, hash "
                    f"{doc.heldout.hash}); `celtk test` scores exactly these, once.")


def _print_test(doc: TestDocument, out: Path | None = None) -> None:
    _print_test_table(doc, f"Held-out test on {doc.n} examples: ablate {doc.heads}")
    looks = doc.looks or []
    if doc.seen_before_test:
        console().print(f"[bold red]Not a first look: look(s) {', '.join(map(str, doc.seen_before_test))} already "
                        "scored this selection on this held-out set before the test (seen before test).[/]")
    this = next((look for look in looks if look.seq == doc.look), None)
    if this is not None and this.seen_elsewhere:
        console().print(f"[bold red]Seen before: this held-out set was already tested under the same weights and task "
                        f"in another run directory ({', '.join(this.seen_elsewhere)}); this test is forced and "
                        "exploratory, not a first look.[/]")
    if out is not None and len(looks) > 1:
        from celtk.store.directory import RunDirectory

        _print_looks(RunDirectory(out).looks(), doc.look)
    latest = looks[-1] if looks else None
    if out is not None and latest is not None and latest.seq != doc.look and latest.what == "test" and latest.result:
        from celtk.store.documents import TestDocument

        repeat = TestDocument.load(out, latest.result)
        console().print("[bold red]A second look (--force): the result above stays the first test's; this look's "
                        f"figures, in {latest.result}, are not a test of the selection.[/]")
        _print_test_table(repeat, f"Repeated look {latest.seq} on {repeat.n} examples (not the result)")


def _print_looks(looks: list[Look], result_seq: int | None) -> None:
    from celtk.cli.analysis_cmds import print_looks

    print_looks(looks, result_seq)


def _print_test_table(doc: TestDocument, title: str) -> None:
    from rich.table import Table

    table = Table(title=title)
    for col in ("intact", "ablated", "gain (pts)", "95% CI (pts)", "rel. error red.", "McNemar p", "fixes/damage"):
        table.add_column(col, justify="right")
    lo, hi = doc.gain_ci
    table.add_row(f"{doc.intact_accuracy:.2%}", f"{doc.ablated_accuracy:.2%}", f"{100 * doc.gain:+.2f}",
                  f"[{100 * lo:+.2f}, {100 * hi:+.2f}]",
                  "undefined" if doc.relative_error_reduction is None else f"{100 * doc.relative_error_reduction:.1f}%",
                  f"{doc.mcnemar_p:.3g}", f"{doc.fixes}/{doc.damage}")
    console().print(table)
    if doc.shrinkage is not None and doc.discovery_gain is not None:
        console().print(f"Shrinkage: discovery gain {100 * doc.discovery_gain:+.2f} pts (selection-biased) − held-out "
                        f"gain {100 * doc.gain:+.2f} pts = {100 * doc.shrinkage:.2f} pts.")


class _ProgressUnits(TypedDict):
    units: dict[str, str]
    per_unit: dict[str, int]


def _progress_units(config: RunConfig) -> _ProgressUnits:
    """What the progress lines count, from the settings: heads (a racing screen: head × example
    evaluations), head sets, passes, and the examples each holds."""
    racing = config.screen == "racing"
    return {"units": {"screen": "evaluations"} if racing else {},
            "per_unit": {"screen": 1 if racing else config.discovery, "select": config.discovery,
                         "test": config.heldout}}


@click.command("screen")
@_run_options
@_screen_options
@click.option("--p", "p", type=click.IntRange(min=1), default=None,
              help=f"With --screen racing: the pool to race for (default {RUN.p}).")
@click.option("--shard", default=None, help="Screen slice i of N (i/N) into OUT/shard-i-of-N; join with `celtk merge`.")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Run directory.")
def screen_cmd(config_file: str | None, out: str, shard: str | None, **flags: object) -> None:
    """Stage 1: ablate every head alone on the discovery set (resumable); --screen racing: only until it
    cannot enter the top p."""
    from celtk.run.config import parse_shard, preflight

    config = resolve_config(config_file, _flags(**flags))
    preflight(config, out, shard=parse_shard(shard))  # a wrong name or another run's directory, before torch loads
    from celtk.run.screen import run_screen, stored_screen

    stored = stored_screen(config, Path(out), shard=parse_shard(shard))
    if stored is not None:
        _stored_note("screen.json", Path(out))
        _print_screen(stored)
        return
    with progress_bar(**_progress_units(config)) as progress:
        doc = run_screen(config, Path(out), shard=parse_shard(shard), progress=progress)
    _print_screen(doc)


@click.command("merge")
@click.argument("out", type=click.Path(file_okay=False, exists=True))
def merge_cmd(out: str) -> None:
    """Join OUT/shard-i-of-N screens into OUT/screen.json."""
    from celtk.run.screen import merge_shards

    _print_screen(merge_shards(Path(out)))


def _out_options(fn: F) -> F:
    """A run directory as the argument OUT or as ``--out OUT`` (the word every verb that writes a run uses)."""
    fn = click.option("--out", "out_option", default=None, type=click.Path(file_okay=False, exists=True),
                      help="Run directory (the same as the argument OUT).")(fn)
    return click.argument("out", required=False, type=click.Path(file_okay=False, exists=True))(fn)


def _device_options(fn: F) -> F:
    """``--device`` and ``--batch-size`` for a verb on an existing run: where it computes, not what (results cannot
    depend on them); the run's recorded values by default."""
    fn = click.option("--batch-size", type=_BATCH, default=None,
                      help="Examples per batch, or 'auto' (default: the run's).")(fn)
    return click.option("--device", default=None, help="cpu, cuda, cuda:N, auto (default: the run's).")(fn)


def _run_dir(out: str | None, out_option: str | None) -> Path:
    if out is not None and out_option is not None and Path(out).resolve() != Path(out_option).resolve():
        raise click.UsageError(f"Two run directories given: OUT {out!r} and --out {out_option!r}; give one.")
    if out is None and out_option is None:
        raise click.UsageError("Missing the run directory: give it as OUT or --out OUT.")
    return Path(out if out is not None else out_option)  # type: ignore[arg-type]  # one of them is set (above)


def _stored_note(what: str, path: Path) -> None:
    console().print(f"[bold]{path}/{what} is already there for these settings[/]: nothing was recomputed or "
                    "rewritten. The stored result:")


@click.command("select")
@_out_options
@click.option("--p", "p", type=click.IntRange(min=1), default=None,
              help=f"Candidate pool size (algorithm1; default: the run's p, {RUN.p} unless it was set).")
@click.option("--k", "k", type=click.IntRange(min=1), default=None,
              help=f"Largest subset size (default: the run's k, {RUN.k} unless it was set).")
@click.option("--strategy", type=click.Choice(STRATEGIES.names()), default=SELECT.strategy, show_default=True,
              help="algorithm1: every subset of the top-p pool (the paper's). greedy / beam: search over all heads "
                   "(no pool, --p unused).")
@click.option("--width", type=click.IntRange(min=1), default=SELECT.width, show_default=True,
              help="Beam width (beam only).")
@click.option("--heldout", type=click.IntRange(min=1), default=None,
              help="Held-out examples frozen with the selection, which every test scores (default: as configured).")
@click.option("--force", is_flag=True, default=False,
              help="Reselect after the held-out set has been looked at, or freeze a selection that gains nothing on "
                   "the discovery set (recorded in selection.json, the held-out log and the report).")
@_tie_break_option(f"the run's, {RUN.tie_break} unless it was set")
@_device_options
def select_cmd(out: str | None, out_option: str | None, p: int | None, k: int | None, strategy: str, width: int,
               heldout: int | None, force: bool, tie_break: str | None, device: str | None,
               batch_size: int | str | None) -> None:
    """Stage 2: search for the best head set, freeze it and its held-out set in OUT/selection.json (a selection
    already frozen with these options is printed, not searched again)."""
    from celtk.run.select import run_select, search_settings, stored_selection

    path = _run_dir(out, out_option)
    p, k, tie_break = search_settings(path, p, k, tie_break)  # the run's, where not given
    stored = None if force else stored_selection(path, p=p, k=k, strategy=strategy, width=width, heldout=heldout,
                                                 tie_break=tie_break)
    if stored is not None:
        _stored_note("selection.json", path)
        _print_selection(stored)
        return
    with progress_bar() as progress:
        doc = run_select(path, p=p, k=k, strategy=strategy, width=width, heldout=heldout, force=force,
                         progress=progress, device=device, batch_size=batch_size, tie_break=tie_break)
    _print_selection(doc)


@click.command("test")
@_out_options
@click.option("--heldout", type=click.IntRange(min=1), default=None,
              help="Held-out examples: must equal the size frozen with the selection (default: that size).")
@click.option("--force", is_flag=True, default=False,
              help="Look again after the first test: test.json keeps the first result and lists every look.")
@_device_options
def test_cmd(out: str | None, out_option: str | None, heldout: int | None, force: bool, device: str | None,
             batch_size: int | str | None) -> None:
    """Held-out comparison of the frozen selection with the intact model (once: the first test is the result; a
    rerun prints it)."""
    from celtk.run.test import run_test, stored_test

    path = _run_dir(out, out_option)
    stored = None if force else stored_test(path, heldout)
    if stored is not None:
        _stored_note("test.json", path)
        _print_test(stored, path)
        return
    with progress_bar() as progress:
        doc = run_test(path, heldout=heldout, force=force, progress=progress, device=device, batch_size=batch_size)
    _print_test(doc, path)


@click.command("run")
@_run_options
@_screen_options
@click.option("--p", "p", type=click.IntRange(min=1), default=None,
              help=f"Candidate pool size (default {RUN.p}).")
@click.option("--k", "k", type=click.IntRange(min=1), default=None,
              help=f"Largest subset size (default {RUN.k}).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Run directory.")
def run_cmd(config_file: str | None, out: str, **flags: object) -> None:
    """Screen, select and test in one go (each stage resumes if interrupted)."""
    from celtk.cli._common import quiet_libraries
    from celtk.run.config import preflight

    config = resolve_config(config_file, _flags(**flags))
    preflight(config, out)  # a wrong name or another run's directory, before torch or transformers load
    quiet_libraries()
    from celtk.run.full import run_all

    with progress_bar(**_progress_units(config)) as progress:
        result = run_all(config, Path(out), progress=progress)
    if result.stored:
        console().print(f"[bold]{out} already holds this run, finished[/] (screen.json, selection.json, test.json for "
                        "these settings): nothing was recomputed or rewritten. The stored results:")
    _print_screen(result.screen)
    _print_selection(result.selection)
    _print_test(result.test)
    took = f"Computed in {result.seconds:.0f} s when it ran" if result.stored else f"Done in {result.seconds:.0f} s"
    console().print(f"{took}. Results in {out}/ (screen.json, selection.json, diagnostics.json, test.json).")


@click.command("replicate")
@_run_options
@_screen_options
@click.option("--p", "p", type=click.IntRange(min=1), default=None,
              help=f"Candidate pool size (default {RUN.p}).")
@click.option("--k", "k", type=click.IntRange(min=1), default=None,
              help=f"Largest subset size (default {RUN.k}).")
@click.option("--seeds", required=True, help="Split seeds: '1,2,3' or '1-5'; each seed is OUT/seed-S.")
@click.option("--alpha", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=REPLICATE.alpha,
              show_default=True,
              help="Level of the Holm-adjusted tests over seeds and of the interval of the mean gain.")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Parent directory of the seeds' runs.")
def replicate_cmd(config_file: str | None, out: str, seeds: str, alpha: float, **flags: object) -> None:
    """Screen, select and test over several split seeds (each OUT/seed-S, resumable; a Slurm array can make them):
    each seed's selection and held-out gain, and across seeds the mean gain, significant seeds and head frequency."""
    from celtk.run.config import preflight

    config = resolve_config(config_file, {k: v for k, v in _flags(**flags).items() if k != "seed"})
    if flags.get("seed") is not None:
        raise click.UsageError("--seed names one split; replicate takes --seeds (e.g. --seeds 1,2,3).")
    preflight(config)
    from celtk.run.replicate import parse_seeds, run_replicate

    with progress_bar(**_progress_units(config)) as progress:
        doc = run_replicate(config, Path(out), parse_seeds(seeds), alpha=alpha, progress=progress)
    _print_replicate(doc, Path(out))


def _print_replicate(doc: ReplicateDocument, out: Path) -> None:
    from rich.table import Table

    table = Table(title=f"{doc.model} on {doc.task}: {len(doc.seeds)} split seeds")
    for col in ("seed", "selection", "discovery gain (pts)", "held-out intact → ablated", "gain (pts)", "95% CI (pts)",
                "McNemar p", "Holm p"):
        table.add_column(col, justify="right")
    for r in doc.per_seed:
        gain, discovery_gain = r.gain, r.discovery_gain
        if r.status != "tested" or r.gain_ci is None or gain is None or discovery_gain is None:  # a tested row has all
            table.add_row(str(r.seed), f"[yellow]{r.status}[/]", "", "", "", "", "", "")
            continue
        lo, hi = r.gain_ci
        table.add_row(str(r.seed), str(r.heads), f"{100 * discovery_gain:+.1f}",
                      f"{r.intact_accuracy:.1%} → {r.ablated_accuracy:.1%}", f"{100 * gain:+.1f}",
                      f"[{100 * lo:+.1f}, {100 * hi:+.1f}]", f"{r.mcnemar_p:.3g}",
                      f"{r.holm_p:.3g}" + (" *" if r.significant else ""))
    console().print(table)
    if doc.mean_gain is not None:
        ci = (f", {100 * (1 - doc.alpha):.0f}% CI over seeds [{100 * doc.mean_gain_ci[0]:+.1f}, "
              f"{100 * doc.mean_gain_ci[1]:+.1f}]") if doc.mean_gain_ci else ""
        console().print(f"Mean held-out gain over {doc.n_tested} tested seed(s): {100 * doc.mean_gain:+.1f} pts{ci}; "
                        f"significant after Holm over seeds: {doc.n_significant} of {doc.n_tested}.")
    if doc.head_frequency:
        console().print("Heads selected: " + ", ".join(f"{h} {share:.0%}" for h, share in doc.head_frequency.items()))
    console().print(f"Results in {out}/replicate.json, each seed's run in {out}/seed-S/.")


COMMANDS = [screen_cmd, merge_cmd, select_cmd, test_cmd, run_cmd, replicate_cmd]
