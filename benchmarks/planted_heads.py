"""What each ablation kind says about the tests' two planted heads: the figures docs/selection-holds.md quotes.

Builds the planted tiny Llamas from ``tests/_support.py`` (the builders the tests use) and scores them as the tests
``test_a_head_planted_against_each_examples_answer_gains_under_every_kind_with_a_monotone_dose`` and
``test_a_head_that_harms_by_the_size_of_its_output_is_undone_by_zeroing_only``
(``tests/integration/test_ablation_kinds.py``) do:

* the head planted against each example's own answer (L2H2): 100 held-out examples (split seed 0, 60 discovery
  examples as the mean and resample reference, resample's draw seed 0), under zero, mean, resample and scale:α for
  α = 1, 0.75, 0.5, 0.25, 0;
* the shared planted head (L1H2's output ×25, the planted run's model): 40 held-out examples (split seed 0, 40
  discovery examples as the reference), under zero, mean, resample and scale:0.25.

Each row is the paired comparison with the intact model on the same examples: accuracies, gain, fixes, damage and
the exact McNemar p-value. Prints the JSON and the sentence the page quotes; writes ``docs/planted-heads.json`` and
the sentence between the markers in ``docs/selection-holds.md`` unless ``--dry-run``:

    nice .venv/bin/python benchmarks/planted_heads.py              # about 10 s on one core, after the imports
    nice .venv/bin/python benchmarks/planted_heads.py --dry-run    # print only

Deterministic (tiny models on the CPU, fixed seeds). ``tests/integration/test_docs_figures.py`` reruns it in CI and
fails when the fresh figures, the committed JSON or the page's sentence differ.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # tests._support; a PYTHONPATH checkout's celtk comes first

DATA = ROOT / "docs" / "planted-heads.json"
PAGE = ROOT / "docs" / "selection-holds.md"
START = "<!-- planted-heads figures: written by `benchmarks/planted_heads.py`; do not edit by hand -->"
END = "<!-- end of the planted-heads figures -->"
ANTI_KINDS = ("zero", "mean", "resample", "scale:1.0", "scale:0.75", "scale:0.5", "scale:0.25", "scale:0.0")
SHARED_KINDS = ("zero", "mean", "resample", "scale:0.25")
WIDTH = 112  # the page's line length


def _row(comparison) -> dict:
    """One kind's comparison with the intact model, as the JSON keeps it (rates rounded to 1e-6, p to 4 digits)."""
    return {"ablated_accuracy": round(comparison.ablated_accuracy, 6), "gain": round(comparison.gain, 6),
            "fixes": comparison.fixes, "damage": comparison.damage,
            "mcnemar_p": float(f"{comparison.mcnemar_p:.4g}")}


def _score(model, task, head, kinds, discovery: int, heldout: int) -> dict:
    from celtk.evaluation import evaluate
    from celtk.evaluation.scoring import ablation_for
    from celtk.stats import compare_paired
    from celtk.tasks import make_splits

    splits = make_splits(task, discovery, heldout, seed=0, fewshot=0)
    intact = evaluate(model, task, splits.heldout)
    rows = {}
    for kind in kinds:
        ablation = ablation_for(model, kind, task, splits.discovery, seed=0)
        ablated = evaluate(model, task, splits.heldout, heads=head, ablation=ablation)
        rows[kind] = _row(compare_paired(intact.correct, ablated.correct, n_boot=1))
    return {"head": head.names()[0], "discovery": discovery, "heldout": len(splits.heldout),
            "intact_accuracy": round(intact.accuracy, 6), "kinds": rows}


def measure(tokenizer=None) -> dict:
    """Both planted models' figures (what :func:`main` writes to the JSON); ``tokenizer``: the SmolLM2 tokenizer
    the tiny models share, loaded when not given."""
    import torch

    from celtk.heads import HeadSet
    from celtk.tasks import get_task
    from tests._support import anti_answer_model, load_smol_tokenizer, planted_model

    torch.manual_seed(0)
    tokenizer = tokenizer or load_smol_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        model, task, head = anti_answer_model(tokenizer, Path(tmp))
        anti = _score(model, task, head, ANTI_KINDS, 60, 100)
        model, name = planted_model(tokenizer, Path(tmp))
        shared = _score(model, get_task(name), HeadSet.parse("L1H2"), SHARED_KINDS, 40, 40)
    return {"anti_answer": anti, "shared": shared}


def percent(rate: float) -> str:
    """A rate in percent to one decimal, without a trailing .0: 19, 32.5, 0."""
    return f"{round(100 * rate, 1):.1f}".removesuffix(".0")


def points(gain: float) -> str:
    """A gain in signed percentage points as the page writes it: +81, +32.5, +0, −0.3."""
    text = percent(gain)
    return f"−{text[1:]}" if text.startswith("-") else f"+{text}"


def sentence(data: dict) -> str:
    """The page's sentence, every figure from ``data``."""
    anti, shared = data["anti_answer"], data["shared"]
    a, s = anti["kinds"], shared["kinds"]
    worst_p = max(a[kind]["mcnemar_p"] for kind in ("zero", "mean", "resample"))
    dose = ", ".join(points(a[f"scale:{alpha}"]["gain"]) for alpha in ("0.75", "0.5", "0.25", "0.0"))
    undone = "+0" if max(s["mean"]["gain"], s["resample"]["gain"]) == 0 else (
        f"{points(s['mean']['gain'])} and {points(s['resample']['gain'])}")
    return (f"Two planted heads in the tests show why the question is worth asking: a head planted to undo each "
            f"example's own answer (a tiny Llama's {anti['head']} attends to its own position and writes −10× its "
            f"input's projection on the candidate answers' unembeddings; {anti['heldout']} held-out examples, intact "
            f"{percent(anti['intact_accuracy'])} %) gains under every kind, zero {points(a['zero']['gain'])}, mean "
            f"{points(a['mean']['gain'])}, resample {points(a['resample']['gain'])} points (p ≤ {worst_p:.2g}), and "
            f"along a monotone dose ({dose} at α = 0.75 … 0), while the shared planted head ({shared['head']}'s "
            f"output ×25; {shared['heldout']} held-out examples, intact {percent(shared['intact_accuracy'])} %), which "
            f"harms by the size of its output, is undone by zeroing ({points(s['zero']['gain'])}) but not by mean or "
            f"resample ablation ({undone}), which keep that size.")


def wrapped(data: dict) -> str:
    """The page's sentence, wrapped as the page's prose is."""
    return textwrap.fill(sentence(data), WIDTH, break_long_words=False, break_on_hyphens=False)


def block(data: dict) -> str:
    """The page's sentence between its markers."""
    return f"{START}\n{wrapped(data)}\n{END}"


def write_page(data: dict, page: Path = PAGE) -> None:
    from page_markers import write_between

    write_between(page, START, END, wrapped(data), "planted-heads figures")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the figures, write nothing")
    args = parser.parse_args()
    data = measure()
    print(json.dumps(data, indent=1))
    print(sentence(data))
    if not args.dry_run:
        DATA.write_text(json.dumps(data, indent=1) + "\n")
        write_page(data)
        print(f"wrote {DATA} and the sentence in {PAGE}")


if __name__ == "__main__":
    main()
