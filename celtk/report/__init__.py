"""A self-contained HTML page and PNG figures from a run directory (no model needed):
layers × heads heatmaps of single-head gain and damage, the pool's pairwise interaction
matrix, the held-out table with CI and p, and — where the files exist — the attribute scores
of the selected heads, the stability report, transfer and the ablation kinds' dose-response curve.

Figures are written as PNG files beside ``index.html`` and embedded in it (base64), so the
page can be mailed or archived alone.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
from jaxtyping import Bool, Float

from celtk.analysis import HeadAttributesDocument
from celtk.errors import RunStoreError
from celtk.heads import Head
from celtk.report._files import check_writable, save_png
from celtk.report.ablations import kinds_section
from celtk.report.transfer import transfer_section
from celtk.store.directory import RunDirectory, check_tested_heldout
from celtk.store.documents import (
    DiagnosticsDocument,
    Document,
    ScreenDocument,
    SelectionDocument,
    StabilityDocument,
    TestDocument,
)
from celtk.store.files import atomic_write_text
from celtk.store.heldout import Look
from celtk.store.integrity import check_screen_fingerprint, check_selection_matches_screen, check_test_matches_selection

D = TypeVar("D", bound=Document)

def _grid(values: list[tuple[Head, float | int]], n_layers: int, n_heads: int) -> Float[np.ndarray, "layer head"]:
    """``[(head, value)]`` → a layer × head array (NaN where a head has no value)."""
    grid = np.full((n_layers, n_heads), np.nan)
    for head, value in values:
        grid[head.layer, head.head] = value
    return grid


def screen_grids(screen: ScreenDocument) -> tuple[Float[np.ndarray, "layer head"], Float[np.ndarray, "layer head"],
                                                   Bool[np.ndarray, "layer head"]]:
    """The heatmaps' values: single-head gain (accuracy points) and damage (examples), each
    ``[n_layers, n_heads]``, and the heads a racing screen dropped early (bool, same shape). A dropped
    head's figures are on part of the discovery set only, so its cells are NaN, never a measured value."""
    shape = (screen.n_layers, screen.n_heads)
    complete = screen.complete_rows()
    gain = _grid([(r.head, r.gain) for r in complete], *shape) * 100
    damage = _grid([(r.head, r.damage) for r in complete], *shape)
    dropped = np.isfinite(_grid([(r.head, 1) for r in screen.dropped_rows()], *shape))
    return gain, damage, dropped


def _dropped_caption(screen: ScreenDocument) -> str:
    """What the hatched cells are, on a racing screen with dropped heads; empty otherwise."""
    counts = [r.n_scored for r in screen.dropped_rows() if r.n_scored is not None]  # always set: narrows the type
    if not counts:
        return ""
    scored = f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)}–{max(counts)}"
    return (f"; hatched: {len(counts)} of {len(screen.heads)} heads the racing screen dropped early (scored on "
            f"{scored} of {screen.n} examples: no gain on the whole set)")


def _heatmap(path: Path, grid: Float[np.ndarray, "layer head"], title: str, cmap: str, label: str, mark: list[Head],
             center: bool, hatched: Bool[np.ndarray, "layer head"] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * grid.shape[1] + 2), max(3.0, 0.22 * grid.shape[0] + 1.5)))
    bound = np.nanmax(np.abs(grid)) if np.isfinite(grid).any() else 1.0
    bound = bound or 1.0
    image = ax.imshow(grid, aspect="auto", cmap=cmap, vmin=-bound if center else 0, vmax=bound, origin="upper")
    for layer, head_index in np.argwhere(np.zeros(grid.shape, bool) if hatched is None else hatched):  # not measured
        ax.add_patch(matplotlib.patches.Rectangle((head_index - 0.5, layer - 0.5), 1, 1, fill=False, hatch="///",
                                                  lw=0, ec="0.55"))
    for head in mark:
        ax.add_patch(matplotlib.patches.Rectangle((head.head - 0.5, head.layer - 0.5), 1, 1, fill=False, lw=2,
                                                  ec="black"))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(grid.shape[1]))
    step = max(1, grid.shape[0] // 15)
    ax.set_yticks(range(0, grid.shape[0], step))
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label=label)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def _matrix(path: Path, matrix: list[list[int | None]], heads: list[Head], title: str) -> None:
    labels = [str(h) for h in heads]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
    bound = np.nanmax(np.abs(values)) if np.isfinite(values).any() else 1.0
    fig, ax = plt.subplots(figsize=(0.55 * len(labels) + 2.5, 0.5 * len(labels) + 1.8))
    image = ax.imshow(values, cmap="RdBu", vmin=-(bound or 1), vmax=bound or 1)
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    for i in range(len(labels)):
        for j in range(len(labels)):
            if np.isfinite(values[i, j]):
                ax.text(j, i, f"{values[i, j]:.0f}", ha="center", va="center", fontsize=7)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="gain(pair) − gain(a) − gain(b), examples")
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(path: Path, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(caption)}" data-file="{path.name}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


_STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3}figure{display:inline-block;margin:1em 1em 1em 0;vertical-align:top}img{max-width:100%}
figcaption{font-size:.9em;color:#555}code{background:#f5f5f5;padding:0 3px}"""

_LOADED_CHECK = """<script>window.addEventListener('load',()=>{const imgs=[...document.images];
document.body.dataset.imagesLoaded=imgs.filter(i=>i.complete&&i.naturalWidth>0).length;
document.body.dataset.imagesTotal=imgs.length;});</script>"""


def _load(out: Path, kind: type[D]) -> D | None:
    """The run's ``kind`` document, or ``None`` where that stage has not run."""
    return kind.load(out) if (out / kind.FILE).exists() else None


def write_report(out: Path, target: Path | None = None) -> Path:
    """Write ``target`` (default ``OUT/report``) with ``index.html`` and the PNG figures; returns the page.
    Holds the run's lock, so no stage rewrites a document while the report reads it."""
    out = Path(out)
    if not out.is_dir():
        raise RunStoreError(f"{out} is not a run directory; give the --out of a screened run.")
    with RunDirectory(out).lock() as rd:
        rd.verify()  # an edited or truncated held-out log, or an edited test.json, is refused
        return _write_report(out, target)


def _write_report(out: Path, target: Path | None) -> Path:
    if not (out / ScreenDocument.FILE).exists():
        raise RunStoreError(f"{out} has no screen.json; the report needs at least a finished screen "
                            "(celtk.run.run_screen).")
    target = Path(target) if target else out / "report"
    check_writable(target)  # a read-only --to is refused before any figure is drawn
    screen = ScreenDocument.load(out)
    selection, diagnostics = _load(out, SelectionDocument), _load(out, DiagnosticsDocument)
    test, stability = _load(out, TestDocument), _load(out, StabilityDocument)
    _check_one_run(out, screen, selection, test)
    attributes = _load(out, HeadAttributesDocument)
    selected = list(selection.heads) if selection else []
    parts = [f"<h1>celtk report: {html.escape(out.name)}</h1>",
             f"<p>Model <code>{html.escape(screen.model_name)}</code> ({screen.n_layers} layers × "
             f"{screen.n_heads} heads, weights {screen.weight_hash}), task "
             f"<code>{html.escape(screen.task_name)}</code>, {screen.n} discovery examples, intact accuracy "
             f"{screen.intact_accuracy:.1%}.</p>"]
    if screen.config.get("synthetic"):
        parts.append(f"<p><strong>Synthetic data:</strong> the {html.escape(str(screen.config.get('preset') or ''))} "
                     "settings run on celtk's generated data, not the official rows.</p>")
    if test:
        parts.append(_test_section(test))
    parts.append("<h2>Figures</h2>" + "".join(_figures(target, screen, diagnostics, selected)))
    if selection:
        parts.append("<h2>Selection</h2>" + f"<p>Strategy <code>{selection.strategy}</code>, "
                     f"{selection.n_evaluations} interventions evaluated; discovery accuracy "
                     f"{selection.intact_discovery_accuracy:.1%} → {selection.discovery_accuracy:.1%} "
                     f"(selection-biased: {html.escape(selection.discovery_gain_note)}).</p>"
                     + ("<p><strong>Selected again after the held-out set was looked at (forced: "
                        + html.escape(", ".join(f"{r.what} (look {r.seq})" for r in selection.prior_looks or [])
                                      or "the test")
                        + "): the held-out set is no longer untouched for this selection.</strong></p>"
                        if selection.forced_after_test else "")
                     + (f"<p>Frozen with its held-out set: {selection.heldout.n} examples "
                        f"(seed {selection.heldout.seed}, hash <code>{selection.heldout.hash}</code>).</p>")
                     + _table(["heads", "accuracy", "gain (pts)", "fixes", "damage"],
                              [[str(r.heads), f"{r.accuracy:.1%}", f"{100 * r.gain:+.1f}", r.fixes, r.damage]
                               for r in selection.ranking[:10]]))
    if attributes and selected:
        names = list(attributes.scores)
        parts.append("<h2>Attribute scores of the selected heads</h2>" + _table(
            ["head", *names], [[str(h), *(f"{attributes.score(n, h):.3f}" for n in names)] for h in selected]))
    elif selected:
        parts.append("<p>Attribute scores: run <code>celtk attributes DIR</code> and rebuild the report to include "
                     "them.</p>")
    looks = RunDirectory(out).looks()
    if looks:
        parts.append(_looks_section(looks, test.look if test else None))
    if stability:
        parts.append(_stability_section(stability))
    parts.append(transfer_section(out, target, _table, _figure))
    parts.append(kinds_section(out, target, selection.heads if selection else None, _table, _figure))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>celtk report: {html.escape(out.name)}</title>"
            f"<style>{_STYLE}</style></head><body>{''.join(parts)}{_LOADED_CHECK}</body></html>")
    atomic_write_text(target / "index.html", page)
    return target / "index.html"


def _check_one_run(out: Path, screen: ScreenDocument, selection: SelectionDocument | None,
                   test: TestDocument | None) -> None:
    """Every document shown must come from the same run (a new screen beside an old test is refused)."""
    check_screen_fingerprint(out, screen)
    if selection:
        check_selection_matches_screen(out, selection, screen)
    if test:
        if not selection:
            raise RunStoreError(f"{out}/test.json has no selection.json beside it; rerun select and test.")
        check_test_matches_selection(out, test, selection)
        check_tested_heldout(out, "the report", test, selection)


def _test_section(test: TestDocument) -> str:
    lo, hi = test.gain_ci
    return "<h2>Held-out test</h2>" + _table(
        ["heads", "n", "intact", "ablated", "gain (pts)", f"{test.ci_level:.0%} CI (pts)", "rel. error reduction",
         "McNemar p", "fixes / damage"],
        [[str(test.heads), test.n, f"{test.intact_accuracy:.1%}", f"{test.ablated_accuracy:.1%}",
          f"{100 * test.gain:+.1f}", f"[{100 * lo:+.1f}, {100 * hi:+.1f}]",
          "undefined" if test.relative_error_reduction is None else f"{100 * test.relative_error_reduction:.1f}%",
          f"{test.mcnemar_p:.2g}", f"{test.fixes} / {test.damage}"]]) + (
        "" if test.shrinkage is None or test.discovery_gain is None
        else f"<p>Shrinkage: discovery gain {100 * test.discovery_gain:+.1f} pts "
        f"(selection-biased) − held-out gain {100 * test.gain:+.1f} pts = {100 * test.shrinkage:.1f} pts.</p>") + (
        "" if not test.seen_before_test else
        "<p><strong>Not a first look: " + html.escape(_seqs(test.seen_before_test)) + " had already scored this "
        "selection on this held-out set before the test (seen before test; see the looks below), so its outcomes "
        "were known when the test was run.</strong></p>")


def _seqs(seqs: list[int]) -> str:
    return ("look " if len(seqs) == 1 else "looks ") + ", ".join(map(str, seqs))


def _figures(target: Path, screen: ScreenDocument, diagnostics: DiagnosticsDocument | None,
             selected: list[Head]) -> list[str]:
    gain, damage, dropped = screen_grids(screen)
    _heatmap(target / "gain.png", gain, "Single-head gain (accuracy points; boxes: selected)", "RdBu", "gain (points)",
             selected, True, dropped)
    _heatmap(target / "damage.png", damage, "Single-head damage (examples broken)", "Reds", "examples right → wrong",
             selected, False, dropped)
    note = _dropped_caption(screen)
    figures = [_figure(target / "gain.png", f"Gain of removing each head alone on the discovery set{note}"),
               _figure(target / "damage.png", f"Damage of removing each head alone{note}")]
    if diagnostics and diagnostics.pairwise_interaction is not None and diagnostics.pool is not None:
        _matrix(target / "interactions.png", diagnostics.pairwise_interaction, diagnostics.pool,
                "Pairwise interactions in the candidate pool")
        figures.append(_figure(target / "interactions.png", "Pairwise interaction matrix of the pool (examples)"))
    return figures


def _looks_section(looks: list[Look], result: int | None) -> str:
    """Every use of the held-out set, from ``heldout_log.jsonl``: the first test is the result; a look before it that
    scored the tested selection is marked seen before test."""
    return ("<h2>Looks at the held-out set</h2><p>Every use of the held-out examples, as the hash-chained "
            "<code>heldout_log.jsonl</code> records it. The first test is the result; the others are exploratory. "
            "A look marked <em>seen before test</em> scored the tested selection on the same held-out set before "
            "the test did.</p>"
            + _table(["#", "what", "when", "n", "head sets", "frozen selection scored", "role"],
                     [[r.seq, r.what, r.when, "" if r.n is None else r.n, len(r.heads),
                       "yes" if r.frozen else "no", r.role(result)] for r in looks]))


def _stability_section(stability: StabilityDocument) -> str:
    return ("<h2>Stability</h2>" + f"<p>{stability.n_resamples} {stability.resampling} resamples; "
            f"mean pairwise Jaccard {stability.mean_pairwise_jaccard:.2f}. Held-out figures of selections other "
            "than the frozen one are exploratory: they were compared on the held-out set after the fact.</p>" + _table(
                ["heads", "frequency", "held-out gain (pts)", "95% CI"],
                [[str(r.heads) + (" (exploratory)" if r.exploratory else ""), f"{r.frequency:.0%}",
                  f"{100 * r.heldout_gain:+.1f}",
                  f"[{100 * r.heldout_gain_ci[0]:+.1f}, {100 * r.heldout_gain_ci[1]:+.1f}]"]
                 for r in stability.selections[:10]]))
