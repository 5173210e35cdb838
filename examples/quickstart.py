"""Quickstart: evaluate the packaged SmolLM2-135M intact and with one head ablated.

Run with:  .venv/bin/python examples/quickstart.py
Only the public API is used.
"""

import celtk


def main(n: int = 40) -> dict:
    model = celtk.load_model("smollm2-135m")
    task = celtk.get_task("arithmetic:2da")
    splits = celtk.make_splits(task, n, n, seed=1, fewshot=3)  # disjoint sets, three fixed shots
    heads = celtk.HeadSet.parse("L14H3")

    intact = celtk.evaluate(model, task, splits.heldout, splits.shots)
    ablated = celtk.evaluate(model, task, splits.heldout, splits.shots, heads=heads)
    cmp = celtk.compare_paired(intact.correct, ablated.correct, n_boot=2000)
    summary = {"heads": str(heads), "intact": cmp.intact_accuracy, "ablated": cmp.ablated_accuracy,
               "gain": cmp.gain, "mcnemar_p": cmp.mcnemar_p, "gain_ci": cmp.gain_ci}
    print(summary)
    return summary


if __name__ == "__main__":
    main()
