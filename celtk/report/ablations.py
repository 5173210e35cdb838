"""The report's "Does it survive other ablation kinds?" section (``ablation-kinds.json``): the per-kind
table and the dose-response curve (held-out gain against the scale α of the heads' output), with the
zero, mean and resample gains beside it."""

from __future__ import annotations

from pathlib import Path

from celtk.errors import RunStoreError
from celtk.heads import HeadSet
from celtk.report._files import FigureHtml, Table, save_png
from celtk.store.documents import AblationKindsDocument


def _curve(path: Path, doc: AblationKindsDocument) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scaled = sorted((r for r in doc.kinds if r.alpha is not None and r.gain is not None), key=lambda r: r.alpha or 0.0)
    named = [r for r in doc.kinds if r.alpha is None and r.gain is not None]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    if scaled:
        alphas = [r.alpha for r in scaled]
        gains = [100 * (r.gain or 0.0) for r in scaled]
        lows = [100 * (r.gain_ci or [0.0, 0.0])[0] for r in scaled]
        highs = [100 * (r.gain_ci or [0.0, 0.0])[1] for r in scaled]
        left.fill_between(alphas, lows, highs, color="tab:blue", alpha=0.2, lw=0)
        left.plot(alphas, gains, "o-", color="tab:blue")
    left.axhline(0, color="black", lw=0.8)
    left.invert_xaxis()  # from the intact model (α = 1) towards removal (α = 0) and past it
    left.set_xlabel("α: the heads' z scaled by α (1 = intact, 0 = zeroed)")
    left.set_ylabel("held-out gain, accuracy points")
    left.set_title("Dose-response (95% CI)")
    for y, r in enumerate(named):
        lo, hi = r.gain_ci or [r.gain or 0.0, r.gain or 0.0]
        right.plot([100 * lo, 100 * hi], [y, y], color="tab:blue", lw=2)
        right.plot([100 * (r.gain or 0.0)], [y], "o", color="tab:blue")
    right.axvline(0, color="black", lw=0.8)
    right.set_yticks(range(len(named)), [r.kind for r in named])
    right.invert_yaxis()
    right.set_xlabel("held-out gain, points (95% CI)")
    right.set_title("By ablation kind")
    fig.suptitle(f"{doc.heads} on {doc.n} held-out examples")
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)


def kinds_section(out: Path, target: Path, selected: HeadSet | None, table: Table, figure: FigureHtml) -> str:
    """HTML for ``ablation-kinds.json`` in ``out`` ('' when absent); refuses one made for another selection.
    ``table(header, rows)`` and ``figure(path, caption)`` are the report's own helpers."""
    if not (out / AblationKindsDocument.FILE).exists():
        return ""
    doc = AblationKindsDocument.load(out)
    if selected is not None and doc.heads != selected:
        raise RunStoreError(f"{out}/ablation-kinds.json scored {doc.heads}, not this run's selection "
                            f"{selected}; rerun `celtk ablations {out}`.")
    _curve(target / "ablation_kinds.png", doc)
    rows = [[r.label if r.draws == 1 else f"{r.label} ({r.draws} draws)",
             f"{r.ablated_accuracy:.1%}" if r.ablated_accuracy is not None else "undefined",
             _pts(r.gain),
             "undefined" if r.gain_ci is None else f"[{100 * r.gain_ci[0]:+.1f}, {100 * r.gain_ci[1]:+.1f}]",
             "undefined" if (r.mcnemar_p if r.draws == 1 else r.paired_p) is None
             else f"{r.mcnemar_p if r.draws == 1 else r.paired_p:.2g}", f"{r.fixes:g} / {r.damage:g}",
             "" if r.mean_delta_logprob is None else f"{r.mean_delta_logprob:+.3f}"] for r in doc.kinds]
    note = "".join(f"<p>{kind}: {why}.</p>" for kind, why in doc.omitted.items())
    return ("<h2>Does it survive other ablation kinds?</h2>"
            f"<p>Held-out looks of the frozen selection (after its test, {100 * doc.test_gain:+.1f} pts under "
            f"<code>{doc.run_ablation}</code>), intact accuracy {doc.intact_accuracy:.1%} on {doc.n} examples. Mean "
            f"and resample values come from the {doc.reference.get('n', 0)} discovery examples.</p>"
            + table(["kind", "ablated", "gain (pts)", "95% CI", "p (McNemar; over draws sign-flip)",
                     "fixes / damage", "Δ log-prob"], rows)
            + note
            + figure(target / "ablation_kinds.png", "Held-out gain against the scale of the heads' output, and under "
                                                     "zero, mean and resample ablation"))


def _pts(value: float | None) -> str:
    return "undefined" if value is None else f"{100 * value:+.1f}"
