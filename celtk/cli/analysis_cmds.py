"""`celtk attributes`, `celtk compare`, `celtk report`, `celtk looks`: explain and present a run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from celtk.cli._common import console, quiet_libraries
from celtk.run.options import ATTRIBUTES, COMPARE

if TYPE_CHECKING:  # annotations only: the log is read by the command that shows it
    from celtk.store.heldout import Look


@click.command("attributes")
@click.argument("out", type=click.Path(file_okay=False, exists=True))
@click.option("--length", type=click.IntRange(min=1, max=4096), default=ATTRIBUTES.length, show_default=True,
              help="Random tokens per copy (sequence = 2 copies; at most 4,096).")
@click.option("--seed", type=click.IntRange(min=0), default=ATTRIBUTES.seed, show_default=True)
def attributes_cmd(out: str, length: int, seed: int) -> None:
    """Previous-token, duplicate-token and induction scores of every head (OUT/head_attributes.json)."""
    from rich.table import Table

    from celtk.run.analyses import run_attributes

    quiet_libraries()
    doc = run_attributes(Path(out), length=length, seed=seed)
    table = Table(title="Attribute scores of the selected heads (mean attention weight)")
    table.add_column("head")
    for name in doc.scores:
        table.add_column(name.replace("_", " "), justify="right")
    for head, scores in doc.selected.items():
        table.add_row(str(head), *(f"{v:.3f}" for v in scores.values()))
    console().print(table)
    for name, grid in doc.scores.items():
        flat = sorted(((v, f"L{l}H{h}") for l, row in enumerate(grid) for h, v in enumerate(row)), reverse=True)[:5]
        console().print(f"top {name.replace('_', ' ')} heads: " + ", ".join(f"{h} ({v:.2f})" for v, h in flat))


@click.command("compare")
@click.argument("out", type=click.Path(file_okay=False, exists=True))
@click.option("--circuit", required=True, help="Circuit JSON file, or a packaged circuit (see `celtk circuits`).")
@click.option("--top", type=click.IntRange(min=1), default=COMPARE.top, show_default=True,
              help="Screen top-N compared, and critical/enhancing list length.")
@click.option("--any-model", is_flag=True, help="Compare with a circuit found on another model of the same shape.")
def compare_cmd(out: str, circuit: str, top: int, any_model: bool) -> None:
    """Overlap of the run's heads with a circuit, beside chance (OUT/compare-CIRCUIT.json)."""
    from rich.table import Table

    from celtk.run.analyses import run_compare

    doc = run_compare(Path(out), circuit, top=top, any_model=any_model)
    table = Table(title=f"{doc.circuit} ({doc.n_circuit_heads} of {doc.population} heads) vs this run")
    for col in ("heads compared", "n", "overlap", "expected by chance", "P(≥ overlap)", "shared"):
        table.add_column(col, justify="right")
    for label, o in (("selection", doc.selection), (f"screen top{doc.top}", doc.screen_top)):
        table.add_row(label, str(o.n), str(o.overlap), f"{o.expected_by_chance:.2f}",
                      f"{o.p_at_least:.2g}", ", ".join(f"{s.head} ({s.role})" for s in o.shared) or "—")
    console().print(table)
    if doc.racing:
        console().print(f"Racing screen: {doc.racing.note}.")
        return
    mean_rank = "—" if doc.mean_rank_of_circuit_heads is None else f"{doc.mean_rank_of_circuit_heads:.0f}"
    console().print(f"Mean screen rank of circuit heads: {mean_rank} "
                    f"(chance {doc.mean_rank_by_chance:.0f}; 1 = removal helps most).")
    ce = doc.critical_vs_enhancing
    if ce is None:  # only a racing screen has none
        return
    console().print(f"Task-critical heads (removal hurts most): {', '.join(str(r.head) for r in ce.critical) or '—'}\n"
                    f"Enhancing heads (removal helps most): {', '.join(str(r.head) for r in ce.enhancing) or '—'}\n"
                    f"Critical layers {ce.critical_layers}; enhancing layers {ce.enhancing_layers}; "
                    f"overlap {', '.join(map(str, ce.overlap)) or 'none'}.")


@click.command("circuits")
def circuits_cmd() -> None:
    """List the packaged circuit files."""
    from celtk.circuits import load_circuit, packaged_circuits

    for name in packaged_circuits():
        c = load_circuit(name)
        console().print(f"[bold]{name}[/]: {c.name}, {len(c.roles)} heads on {c.model} "
                        f"({c.n_layers} × {c.n_heads}). {c.source}")


@click.command("report")
@click.argument("out", type=click.Path(file_okay=False, exists=True))
@click.option("--to", "target", type=click.Path(file_okay=False), default=None,
              help="Report directory (default OUT/report).")
def report_cmd(out: str, target: str | None) -> None:
    """Write a self-contained HTML page and PNG figures from a run directory."""
    from celtk.report import write_report

    page = write_report(Path(out), Path(target) if target else None)
    console().print(f"Report: {page} (figures beside it as PNG).", soft_wrap=True)


@click.command("looks")
@click.argument("out", type=click.Path(file_okay=False, exists=True))
def looks_cmd(out: str) -> None:
    """Every look at OUT's held-out set, from its hash-chained log (checked against celtk's ledger): what, when, on
    how many examples, whether it scored the frozen selection, and its role (the result, exploratory, seen before
    test)."""
    from celtk.store.directory import RunDirectory

    rd = RunDirectory(Path(out))
    with rd.lock():
        looks, result = rd.verified_looks()  # an edited, truncated or re-chained log (or test.json) is refused
    if not looks:
        console().print(f"No look at {out}'s held-out set yet.")
        return
    print_looks(looks, result)


def print_looks(looks: list[Look], result: int | None) -> None:
    """The looks as a table (``celtk looks``, and ``celtk test`` after more than one look); ``result``: the test
    look that is the run's result (``test.json``'s ``look``)."""
    from rich.table import Table

    table = Table(title="Every look at the held-out set (heldout_log.jsonl)")
    for col in ("#", "what", "when", "n", "head sets", "frozen selection", "role"):
        table.add_column(col)
    for look in looks:
        table.add_row(str(look.seq), look.what, look.when, "" if look.n is None else str(look.n), str(len(look.heads)),
                      "yes" if look.frozen else "no", look.role(result))
    console().print(table)
    seen = [look for look in looks if look.seen_by]
    for test in seen:
        console().print(f"[bold red]Test look {test.seq} is not a first look: look(s) "
                        f"{', '.join(map(str, test.seen_by))} had already scored its selection on its held-out set "
                        "(seen before test).[/]")


COMMANDS = [attributes_cmd, compare_cmd, circuits_cmd, report_cmd, looks_cmd]
