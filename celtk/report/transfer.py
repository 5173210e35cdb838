"""The report's "Does the selection hold?" section: the transfer grid (``transfer.json``) as a
table and a forest plot of held-out gains with CIs, and the null calibrations where they exist."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from celtk.report._files import FigureHtml, Table, save_png
from celtk.store.documents import CalibrationDocument, TransferDocument


def _forest(path: Path, doc: TransferDocument) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in doc.variants if r.gain is not None and r.gain_ci is not None]
    fig, ax = plt.subplots(figsize=(6.5, 0.4 * len(rows) + 1.5))
    for y, r in enumerate(rows):
        assert r.gain is not None and r.gain_ci is not None  # kept above
        lo, hi = r.gain_ci
        colour = "tab:green" if r.holm_p is not None and r.holm_p < 0.05 and r.gain > 0 else (
            "tab:red" if r.holm_p is not None and r.holm_p < 0.05 else "tab:gray")
        ax.plot([100 * lo, 100 * hi], [y, y], color=colour, lw=2)
        ax.plot([100 * r.gain], [y], "o", color=colour)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)), [r.variant for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("held-out gain, accuracy points (95% CI; colour: Holm p < 0.05)")
    ax.set_title(f"Transfer of {doc.heads}")
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def transfer_section(out: Path, target: Path, table: Table, figure: FigureHtml) -> str:
    """HTML for ``transfer.json`` and ``calibration-*.json`` in ``out`` ('' when neither exists);
    ``table(header, rows)`` and ``figure(path, caption)`` are the report's own helpers."""
    parts = []
    if (out / TransferDocument.FILE).exists():
        doc = TransferDocument.load(out)
        _forest(target / "transfer.png", doc)
        parts.append(f"<p>Held-out examples only. The discovery gain ({100 * doc.discovery_gain:+.1f} pts) is "
                     "selection-biased; these rows are not.</p>")
        parts.append(table(["variant", "task", "shots", "n", "intact", "ablated", "gain (pts)", "95% CI", "McNemar p",
                            "Holm p"],
                           [[r.variant, r.task, r.fewshot, r.n, _pct(r.intact_accuracy), _pct(r.ablated_accuracy),
                             _pts(r.gain), "undefined" if r.gain_ci is None else
                             f"[{100 * r.gain_ci[0]:+.1f}, {100 * r.gain_ci[1]:+.1f}]", _p(r.mcnemar_p), _p(r.holm_p)]
                            for r in doc.variants]))
        if doc.lm_loss:
            lm = doc.lm_loss
            parts.append(f"<p>Language-modelling loss on <code>{html.escape(lm.source)}</code> ({lm.n_tokens} tokens): "
                         f"{lm.intact_nll:.4f} → {lm.ablated_nll:.4f} nats/token (Δ {lm.delta:+.4f}, "
                         f"{lm.ci_level:.0%} CI [{lm.delta_ci[0]:+.4f}, {lm.delta_ci[1]:+.4f}]).</p>")
        parts.append(figure(target / "transfer.png", "Held-out gain of the selection under each variant"))
    for path in sorted(out.glob("calibration-*.json")):
        cal = CalibrationDocument.load(out, path.name)
        disc = np.array(cal.null_discovery_gains)
        parts.append(f"<p>Null <code>{cal.null}</code> ({html.escape(cal.validity)}), {cal.repeats} draws: best "
                     f"discovery gain median {100 * np.median(disc):+.1f} pts (95th percentile "
                     f"{100 * np.quantile(disc, 0.95):+.1f}), its held-out gain mean "
                     f"{100 * np.mean(cal.null_heldout_gains):+.1f} pts; observed discovery gain "
                     f"{100 * cal.observed_discovery_gain:+.1f} pts, "
                     + (f"p = {cal.p_value:.3g}." if cal.p_value is not None
                        else html.escape(cal.p_value_note or "no p-value."))
                     + "</p>")
    return "<h2>Does the selection hold?</h2>" + "".join(parts) if parts else ""


def _pct(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.1%}"


def _pts(value: float | None) -> str:
    return "undefined" if value is None else f"{100 * value:+.1f}"


def _p(value: float | None) -> str:
    return "undefined" if value is None else f"{value:.2g}"
