"""`celtk altscreen` and `celtk stability`: beyond the paper's Algorithm 1."""

from __future__ import annotations

from pathlib import Path

import click

from celtk.cli._common import FiniteFloatRange, console, progress_bar, quiet_libraries
from celtk.run.options import ALTSCREEN, RUN, STABILITY
from celtk.screening.registry import RANKERS
from celtk.search.registry import STRATEGIES


@click.command("altscreen")
@click.argument("out", type=click.Path(file_okay=False, exists=True))
@click.option("--method", type=click.Choice(RANKERS.names()), default=ALTSCREEN.method, show_default=True,
              help="gradient: per-head gate gradient (one backward pass). lasso: random multi-head knockouts + L1 "
                   "regression.")
@click.option("--p", "p", type=click.IntRange(min=1), default=ALTSCREEN.p, show_default=True,
              help="Pool size compared with the exhaustive screen's.")
@click.option("--masks", type=click.IntRange(min=1, max=1_000_000), default=ALTSCREEN.masks, show_default=True,
              help="Random knockout masks (lasso; each is one forward pass, at most 1,000,000 like the subset search).")
@click.option("--rate", type=FiniteFloatRange(0, 1, min_open=True), default=ALTSCREEN.rate, show_default=True,
              help="Chance each head is knocked out in a mask (lasso).")
@click.option("--seed", type=click.IntRange(min=0), default=ALTSCREEN.seed, show_default=True,
              help="Mask seed (lasso).")
def altscreen_cmd(out: str, method: str, p: int, masks: int, rate: float, seed: int) -> None:
    """Rank heads with a cheaper screener and compare its pool with the exhaustive screen
    (OUT/altscreen-METHOD.json)."""
    from rich.table import Table

    from celtk.run.altscreen import run_altscreen

    quiet_libraries()
    with progress_bar() as progress:
        doc = run_altscreen(Path(out), method=method, p=p, masks=masks, rate=rate, seed=seed, progress=progress)
    c = doc.comparison
    table = Table(title=f"{method} screener vs the exhaustive screen (top {p})")
    for col in ("overlap", "chance overlap", "Jaccard", "Spearman", "evaluations", "exhaustive evaluations", "seconds"):
        table.add_column(col, justify="right")
    rho = "n/a" if c["spearman"] is None else f"{c['spearman']:.3f}"
    table.add_row(f"{c['overlap']}/{p}", f"{c['chance_overlap']:.2f}", f"{c['jaccard']:.2f}", rho,
                  str(c["n_evaluations"]), str(doc.exhaustive_evaluations), f"{doc.seconds:.0f}")
    console().print(table)
    console().print(f"exhaustive pool: {', '.join(c['exhaustive_pool'])}\n"
                    f"{method} pool:    {', '.join(c['screener_pool'])}")


@click.command("stability")
@click.argument("out", type=click.Path(file_okay=False, exists=True))
@click.option("--resamples", type=click.IntRange(min=1, max=10_000), default=STABILITY.resamples, show_default=True,
              help="Resamples of the discovery set (each reruns the search; at most 10,000).")
@click.option("--method", type=click.Choice(["bootstrap", "subsample"]), default=STABILITY.method, show_default=True)
@click.option("--fraction", type=FiniteFloatRange(0, 1, min_open=True), default=STABILITY.fraction, show_default=True,
              help="Subsample size as a fraction (subsample).")
@click.option("--strategy", type=click.Choice(STRATEGIES.names()), default=STABILITY.strategy, show_default=True)
@click.option("--p", "p", type=click.IntRange(min=1), default=None,
              help=f"Candidate pool size (default: the run's p, {RUN.p} unless it was set).")
@click.option("--k", "k", type=click.IntRange(min=1), default=None,
              help=f"Largest subset size (default: the run's k, {RUN.k} unless it was set).")
@click.option("--width", type=click.IntRange(min=1), default=STABILITY.width, show_default=True,
              help="Beam width (beam only).")
@click.option("--seed", type=click.IntRange(min=0), default=STABILITY.seed, show_default=True, help="Resampling seed.")
def stability_cmd(out: str, resamples: int, method: str, fraction: float, strategy: str, p: int | None,
                  k: int | None, width: int, seed: int) -> None:
    """How stable is the selection across resamples of the discovery set? (OUT/stability.json)"""
    from rich.table import Table

    from celtk.run.select import search_settings
    from celtk.run.stability import run_stability

    p, k, _ = search_settings(Path(out), p, k)  # the run's, where not given, as select takes them

    quiet_libraries()
    with progress_bar() as progress:
        doc = run_stability(Path(out), resamples=resamples, method=method, fraction=fraction, seed=seed,
                            strategy=strategy, p=p, k=k, width=width, progress=progress)
    console().print(f"{strategy} on {resamples} {method} resamples: {doc.n_distinct_selections} distinct selections, "
                    f"mean pairwise Jaccard {doc.mean_pairwise_jaccard:.2f}; the full-data selection "
                    f"{doc.reference_selection} was chosen in {doc.reference_frequency:.0%} of them.")
    heads = Table(title="How often each head is selected")
    heads.add_column("head")
    heads.add_column("frequency", justify="right")
    for head, freq in list(doc.head_frequency.items())[:15]:
        heads.add_row(str(head), f"{freq:.0%}")
    console().print(heads)
    table = Table(title=f"Distinct selections on {doc.n_heldout} held-out examples "
                        f"(intact {doc.heldout_intact_accuracy:.1%}); held-out figures marked 'exploratory' "
                        "compare selections chosen after the fact and are not tests")
    for col in ("heads", "frequency", "discovery gain", "held-out gain", "95% CI", "McNemar p"):
        table.add_column(col, justify="right")
    for row in doc.selections[:15]:
        lo, hi = row.heldout_gain_ci
        table.add_row(str(row.heads) + (" *" if row.is_reference else "")
                      + (" (exploratory)" if row.exploratory else ""),
                      f"{row.frequency:.0%}",
                      f"{100 * row.discovery_gain:+.1f}", f"{100 * row.heldout_gain:+.1f}",
                      f"[{100 * lo:+.1f}, {100 * hi:+.1f}]", f"{row.heldout_mcnemar_p:.2g}")
    console().print(table)
    g = doc.heldout_gain_over_resamples
    console().print(f"Held-out gain over resamples (points): median {100 * g['median']:+.1f}, "
                    f"5–95 % [{100 * g['q05']:+.1f}, {100 * g['q95']:+.1f}]. (* = the full-data selection)")


COMMANDS = [altscreen_cmd, stability_cmd]
