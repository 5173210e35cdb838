"""The paper's tie-break on a run (``--tie-break paper``, ``RunConfig.tie_break``): on a tiny random model every head
ties (nothing changes at the floor), so the ids decide, and the paper's string order freezes L10H0 where celtk's
numeric order freezes L2H0. The setting is recorded where it is not the default (the default's files are as before),
a run resumed with the other is refused, a racing screen races under it, and ``select`` / ``Run.select`` take
either on an exhaustively screened run."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from _support import make_tiny
from click.testing import CliRunner

import celtk
from celtk.cli import main
from celtk.errors import ConfigError, RunStoreError
from celtk.heads import Head, HeadSet
from celtk.run.config import preflight
from celtk.run.select import stored_selection

LAYERS = [2, 10]  # screened layers: L2H0 before L10H0 as numbers, after it as strings
CONFIG = celtk.RunConfig(model="tiny-llama", task="arithmetic:2da", discovery=6, heldout=6, fewshot=0, batch_size=8,
                         p=1, k=1)


@pytest.fixture(scope="module")
def eleven(smol_tokenizer):
    """A tiny random Llama with 11 layers of 2 heads (layer 10 exists)."""
    return make_tiny("llama", smol_tokenizer, n_layers=11, n_heads=2)


def screened(eleven, directory, **settings):
    run = celtk.Run(directory, config=replace(CONFIG, **settings), model=eleven)
    screen = run.screen(layers=LAYERS)
    assert len({(r.gain_count, r.damage, r.accuracy) for r in screen.complete_rows()}) == 1  # every head ties
    return run, screen


def test_paper_freezes_other_heads_than_numeric_and_the_default_writes_what_it_wrote(eleven, tmp_path):
    out = tmp_path / "run"
    run, screen = screened(eleven, out)
    assert [r.head for r in screen.ranked_rows()][:2] == [Head(2, 0), Head(2, 1)]
    assert [r.head for r in screen.ranked_rows("paper")][:2] == [Head(10, 0), Head(10, 1)]
    by_numeric = run.select(force=True)  # nothing gains on random weights
    assert by_numeric.heads == HeadSet.parse("L2H0") and by_numeric.pool == [Head(2, 0)]
    # the default writes what it wrote before the setting
    assert "tie_break" not in by_numeric.config and by_numeric.strategy_options == {"p": 1}
    for name in ("config.json", "fingerprint.json"):
        assert "tie_break" not in json.loads((out / name).read_text())
    # select on a screened run takes either key: before a look, another key is a new search, recorded
    by_paper = run.select(tie_break="paper", force=True)
    assert by_paper.heads == HeadSet.parse("L10H0") and by_paper.pool == [Head(10, 0)]
    assert by_paper.config["tie_break"] == "paper" and by_paper.strategy_options == {"p": 1, "tie_break": "paper"}
    assert stored_selection(out, tie_break="paper") == by_paper and stored_selection(out) is None
    shown = CliRunner().invoke(main, ["select", str(out), "--tie-break", "paper"])  # stored: printed, nothing loaded
    assert shown.exit_code == 0 and "already there" in shown.output and "L10H0" in shown.output, shown.output
    # the run's own setting stays numeric: resuming it with the other is refused, naming the setting and values
    with pytest.raises(RunStoreError, match="tie_break: stored 'numeric', now 'paper'.*--tie-break numeric"):
        preflight(replace(CONFIG, tie_break="paper"), out)
    with pytest.raises(RunStoreError, match="tie_break"):
        celtk.Run(out, config=replace(CONFIG, tie_break="paper"), model=eleven)


def test_a_racing_screen_races_under_the_runs_key_and_refuses_another(eleven, tmp_path):
    out = tmp_path / "race"
    run, screen = screened(eleven, out, tie_break="paper", screen="racing")
    assert screen.racing is not None and screen.racing.pool == [Head(10, 0)] == screen.pool(1)
    for name in ("config.json", "fingerprint.json"):  # a race ranks heads: its key is in the fingerprint too
        assert json.loads((out / name).read_text())["tie_break"] == "paper"
    with pytest.raises(ConfigError, match="raced for its pool with tie-break 'paper'.*--tie-break paper"):
        run.select(tie_break="numeric", force=True)  # refused before a model pass
    with pytest.raises(RunStoreError, match="tie_break: stored 'paper', now 'numeric'"):
        preflight(replace(CONFIG, screen="racing"), out)
    selection = run.select(force=True)  # the run's key by default
    assert selection.heads == HeadSet.parse("L10H0") and selection.config["tie_break"] == "paper"


def test_the_cli_offers_the_tie_break_on_every_verb_that_ranks():
    for verb in ("run", "screen", "select", "replicate"):
        shown = CliRunner().invoke(main, [verb, "--help"])
        assert "--tie-break [numeric|paper]" in shown.output, (verb, shown.output)
    refused = CliRunner().invoke(main, ["run", "--tie-break", "strings", "--out", "unused"])
    assert refused.exit_code == 2 and "'strings' is not one of 'numeric', 'paper'" in refused.output
