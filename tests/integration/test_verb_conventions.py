"""A flag that cannot apply to what a verb was asked to do is refused, saying why, not ignored: ``transfer
--heldout N`` sizes the held-out sets that variants of other tasks draw, so with only variants of the run's own task
(which score its frozen held-out set) it is refused."""

from __future__ import annotations

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
