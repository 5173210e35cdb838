"""A flag that cannot apply to what a verb was asked to do is refused, saying why, not ignored: ``transfer
--heldout N`` sizes the held-out sets that variants of other tasks draw, so with only variants of the run's own task
(which score its frozen held-out set) it is refused. A default that cannot hold on a small task adapts: ``eval
--reference`` takes what the discovery split holds (at most 100), and a value beyond it is refused naming the flag."""

from __future__ import annotations

import json

import pytest
from _support import make_tiny
from click.testing import CliRunner

import celtk
from celtk.cli import main


@pytest.fixture(scope="module")
def selected(smol_tokenizer, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "run"
    config = celtk.RunConfig(model="tiny-llama", task="arithmetic:2da", discovery=4, heldout=4, fewshot=0, batch_size=8,
                             p=1, k=1)
    run = celtk.Run(out, config=config, model=make_tiny("llama", smol_tokenizer, n_layers=1, n_heads=2))
    run.screen()
    run.select(force=True)  # nothing gains on random weights
    return out


def test_transfer_refuses_a_heldout_size_no_variant_can_use(selected):
    refused = CliRunner().invoke(main, ["transfer", str(selected), "--heldout", "3"])
    assert refused.exit_code == 2, refused.output
    assert ("--heldout 3 sets how many held-out examples a variant of another task draws" in refused.output
            and "original, shots seed=1" in refused.output and "frozen with the selection" in refused.output)
    # with a variant of another task it applies: the refusal is the run's own (no test yet), not --heldout's
    other = CliRunner().invoke(main, ["transfer", str(selected), "--heldout", "3", "--tasks", "arithmetic:2ds"])
    assert other.exit_code != 0 and "--heldout" not in other.output and "celtk test" in other.output, other.output


def test_mean_ablation_measures_on_what_a_small_task_holds_and_names_reference(smol_tokenizer, tmp_path):
    from celtk.errors import ConfigError
    from celtk.run.eval import run_eval

    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"Item {i}:", "target": f" {i}"}) + "\n" for i in range(12)))
    task = f"jsonl:{path}"
    model = make_tiny("llama", smol_tokenizer, n_layers=1, n_heads=2)
    # the default takes what the discovery split holds (12 here, under the usual 100) instead of failing
    document = run_eval(None, model=model, task=task, heads="L0H0", limit=2, ablation="mean", batch_size=4,
                        fewshot=0)  # the task has no few-shot pool
    assert "the first 12 discovery examples" in json.dumps(document.to_json())
    with pytest.raises(ConfigError, match=r"--reference 50 \(reference\) asks for more discovery examples than .* "
                                          r"holds \(12\).*--reference 12 or fewer"):
        run_eval(None, model=model, task=task, heads="L0H0", limit=2, ablation="mean", reference=50, fewshot=0)
    shown = CliRunner().invoke(main, ["eval", "--task", task, "--fewshot", "0", "--ablation", "mean", "--reference",
                                      "50", "--out", str(tmp_path / "eval")])  # refused before any model loads
    assert shown.exit_code == 1 and "--reference 50" in shown.output + shown.stderr, shown.output
