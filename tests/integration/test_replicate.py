"""The pipeline over split seeds on the planted tiny model: each seed is a run of its own, equal to `celtk run`
with that seed; the summary holds each seed's test and what holds across seeds; a rerun loads nothing and
rewrites nothing."""

import json

import numpy as np
import pytest
from _support import planted_config
from click.testing import CliRunner

from celtk.ablation import export_ablated
from celtk.cli import main
from celtk.errors import ConfigError
from celtk.heads import Head, HeadSet
from celtk.run import Run, run_all
from celtk.run.replicate import ReplicateRow, parse_seeds, run_replicate, summarise
from celtk.stats import holm


def test_seeds_are_runs_of_their_own_and_the_summary_follows_from_them(planted, tmp_path, monkeypatch,
                                                                      _own_ledger):
    model, task = planted
    config = planted_config(task)
    doc = run_replicate(config, tmp_path / "rep", [0, 2], model=model)
    # the same split in another directory tests the same held-out set again: only under a ledger of its own
    monkeypatch.setenv("CELTK_LEDGER", str(tmp_path / "another-ledger.jsonl"))
    alone = run_all(planted_config(task, seed=2), tmp_path / "alone", model=model)
    monkeypatch.setenv("CELTK_LEDGER", str(_own_ledger))
    assert (tmp_path / "rep" / "seed-2" / "test.json").read_bytes() == (tmp_path / "alone" / "test.json").read_bytes()
    rows = {r.seed: r for r in doc.per_seed}
    assert rows[2].heads == alone.test.heads and rows[2].gain == alone.test.gain
    assert doc.n_tested == 2 and doc.mean_gain == pytest.approx(np.mean([r.gain for r in doc.per_seed]))
    assert [r.holm_p for r in doc.per_seed] == pytest.approx(list(holm([r.mcnemar_p for r in doc.per_seed])))
    assert doc.head_frequency[Head(1, 2)] == 1.0  # the planted harmful head, found on every split
    saved = (tmp_path / "rep" / "replicate.json").stat().st_mtime_ns

    import celtk.run.replicate

    monkeypatch.setattr(celtk.run.replicate, "load_model", lambda *a, **k: pytest.fail("loaded a model"))
    again = run_replicate(config, tmp_path / "rep", [0, 2])  # no model given: everything is stored
    assert again == doc and (tmp_path / "rep" / "replicate.json").stat().st_mtime_ns == saved
    # the notebook handle on one seed's run replicates its settings: the same seeds are the same runs, stored
    handle = Run(tmp_path / "rep" / "seed-0")
    assert handle.replicate("0,2", out=tmp_path / "rep") == doc
    assert (tmp_path / "rep" / "replicate.json").stat().st_mtime_ns == saved


def test_the_cli_prints_the_table(planted, tmp_path):
    model, task = planted
    model_dir = export_ablated(model, HeadSet(()), tmp_path / "model")
    args = ["replicate", "--model", str(model_dir), "--task", task, "--discovery", "24", "--heldout", "24",
            "--fewshot", "0", "--batch-size", "8", "--p", "4", "--k", "2", "--seeds", "0-1", "--out",
            str(tmp_path / "rep")]
    shown = CliRunner().invoke(main, args, env={"COLUMNS": "240"})
    assert shown.exit_code == 0, shown.output
    assert "2 split seeds" in shown.output and "Mean held-out gain over 2 tested seed(s)" in shown.output
    assert json.loads((tmp_path / "rep" / "replicate.json").read_text())["seeds"] == [0, 1]
    refused = CliRunner().invoke(main, [*args[:-2], "--seed", "3", "--out", str(tmp_path / "rep")])
    assert refused.exit_code == 2 and "replicate takes --seeds" in refused.output


def test_a_seed_without_gain_is_a_row_not_a_test_and_the_interval_needs_two_seeds():
    from celtk.run import RunConfig

    tested = ReplicateRow(seed=1, run="seed-1", status="tested", heads=HeadSet.parse("L0H1"), discovery_gain=0.1,
                          intact_accuracy=0.5, ablated_accuracy=0.6, gain=0.1, gain_ci=[0.0, 0.2], mcnemar_p=0.01)
    none = ReplicateRow(seed=2, run="seed-2", status="no gain", intact_discovery_accuracy=0.01)
    doc = summarise(RunConfig(), [1, 2], [tested, none], 0.05)
    assert doc.n_tested == 1 and doc.mean_gain == 0.1 and doc.mean_gain_ci is None and doc.n_significant == 1
    assert doc.head_frequency == {Head(0, 1): 1.0} and doc.per_seed[1].holm_p is None


def test_frequencies_are_written_most_often_first_then_by_name_as_written():
    """Ties in the head and set frequencies are ordered by the names as the file writes them (L10H0 before L2H0), and
    the file reads back to the same document."""
    from celtk.run import RunConfig
    from celtk.run.replicate import ReplicateDocument

    def row(seed: int, heads: str) -> ReplicateRow:
        return ReplicateRow(seed=seed, run=f"seed-{seed}", status="tested", heads=HeadSet.parse(heads),
                            discovery_gain=0.1, intact_accuracy=0.5, ablated_accuracy=0.6, gain=0.1,
                            gain_ci=[0.0, 0.2], mcnemar_p=0.01)

    doc = summarise(RunConfig(), [1, 2, 3], [row(1, "L2H0,L10H0"), row(2, "L2H0"), row(3, "L10H0,L3H1")], 0.05)
    data = doc.to_json()
    assert list(data["head_frequency"]) == ["L10H0", "L2H0", "L3H1"]  # 2, 2, 1 of 3 seeds
    assert list(data["set_frequency"]) == ["L2H0", "L2H0,L10H0", "L3H1,L10H0"]  # each once: by name as written
    assert doc.head_frequency[Head(2, 0)] == pytest.approx(2 / 3)
    assert ReplicateDocument.from_json(json.loads(json.dumps(data))) == doc


@pytest.mark.parametrize(("text", "seeds"), [("1,2,3", [1, 2, 3]), ("4-6", [4, 5, 6]), ("0, 7-8", [0, 7, 8])])
def test_seeds_parse(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "1,1", "-1", "3-1x"])
def test_bad_seeds_are_refused(text):
    with pytest.raises(ConfigError, match="Seeds"):
        parse_seeds(text)
