"""Run every stage on the tests' planted tiny Llama (head L1H2 scaled ×25) into OUT, so two commits' results can
be compared with ``benchmarks/compare_runs.py``: a restructure must leave every document's values unchanged.

    python benchmarks/stage_parity.py OUT            # on this checkout (about 3 minutes on 2 cores)
    python benchmarks/compare_runs.py OLD/alg1 NEW/alg1 --allow-added schema_version   # and greedy, racing, eval

Directories written: ``alg1`` (screen, select by Algorithm 1, altscreen, test, transfer, calibrate with both
nulls, stability, ablation kinds, attributes, report), ``greedy`` (greedy select and test), ``racing`` (a racing
screen, select and test) and ``eval`` (heads scored on ``alg1``'s held-out set, a logged look).

The task file is written beside OUT (``OUT/../parity-task/self.jsonl``, shared by the directories compared, since its
path is part of every document) from the clean model's own greedy tokens, so it is the same on any commit that builds
the model the same way.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="an empty or new directory")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    from celtk.report import write_report
    from celtk.run import (
        run_ablation_kinds,
        run_altscreen,
        run_attributes,
        run_calibration,
        run_eval,
        run_screen,
        run_select,
        run_stability,
        run_test,
        run_transfer,
    )
    from tests._support import load_smol_tokenizer, planted_config, planted_model

    (out.parent / "parity-task").mkdir(exist_ok=True)
    model, task = planted_model(load_smol_tokenizer(), out.parent / "parity-task")

    # three runs of one held-out set under one model: each keeps its own ledger (celtk.store.ledger), or the
    # second first test of that held-out set would be refused as a copy of the first
    def own_ledger(directory: Path) -> Path:
        os.environ["CELTK_LEDGER"] = str(out / f"{directory.name}.ledger.jsonl")
        return directory

    alg1 = own_ledger(out / "alg1")
    run_screen(planted_config(task), alg1, model=model)
    run_select(alg1, p=4, k=2, model=model)
    run_altscreen(alg1, method="gradient", p=4, masks=20, model=model)
    run_test(alg1, model=model, n_boot=200)
    run_transfer(alg1, model=model, n_boot=200)
    run_calibration(alg1, null="permutation", repeats=50, model=model)
    run_calibration(alg1, null="random-heads", repeats=3, model=model)
    run_stability(alg1, resamples=4, p=4, k=2, model=model, n_boot=200)
    run_ablation_kinds(alg1, model=model, n_boot=200)
    run_attributes(alg1, model=model, length=12, batch=2)
    write_report(alg1)

    greedy = own_ledger(out / "greedy")
    run_screen(planted_config(task), greedy, model=model)
    run_select(greedy, strategy="greedy", k=2, model=model)
    run_test(greedy, model=model, n_boot=200)

    racing = own_ledger(out / "racing")
    run_screen(planted_config(task, screen="racing"), racing, model=model)
    run_select(racing, p=4, k=2, model=model)
    run_test(racing, model=model, n_boot=200)

    own_ledger(alg1)
    run_eval(out / "eval", model=model, run=alg1, heads="L1H2", split="heldout", batch_size=8)
    print(f"wrote {', '.join(d.name for d in (alg1, greedy, racing, out / 'eval'))} under {out}")


if __name__ == "__main__":
    main()
