"""Ablation kinds in run directories: the kind is recorded in the fingerprint and never mixed, zero runs'
files stay as they were, a mean run screens, selects and tests under mean, and `celtk ablations` asks a
tested run whether its gain survives each kind and a scale sweep (logged as held-out looks first)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from _support import not_none, planted_config

from celtk.errors import RunStoreError
from celtk.evaluation import evaluate
from celtk.evaluation.scoring import ablation_for
from celtk.heads import Head, HeadSet
from celtk.run import AblationKindsDocument, run_ablation_kinds, run_screen, run_select, run_test
from celtk.run.ablations import sign_flip_p
from celtk.stats import mcnemar_exact
from celtk.store.directory import RunDirectory
from celtk.store.documents import Correctness
from celtk.tasks import get_task, make_splits


def test_ablations_of_a_tested_run_log_first_reproduce_the_test_and_draw_the_curve(planted, tmp_path, monkeypatch):
    model, task = planted
    run_screen(planted_config(task), tmp_path, model=model)
    for name in ("fingerprint.json", "config.json"):  # a zero run's files carry no ablation setting, as before
        assert not {"ablation", "positions"} & set(json.loads((tmp_path / name).read_text()))
    assert "ablation" not in json.loads((tmp_path / "screen.json").read_text())["config"]
    run_select(tmp_path, p=4, k=2, model=model)
    with pytest.raises(RunStoreError,
                       match="celtk ablations reads the frozen selection's held-out outcomes.*celtk test"):
        run_ablation_kinds(tmp_path, model=model)
    assert RunDirectory(tmp_path).looks() == []  # the refusal looked at nothing
    test = run_test(tmp_path, model=model, n_boot=200)

    def broken(self, document, name=None):  # a stage writes its documents through its run directory
        raise OSError("disk full")

    monkeypatch.setattr(RunDirectory, "save", broken)
    with pytest.raises(OSError):
        run_ablation_kinds(tmp_path, model=model, n_boot=200)
    look = RunDirectory(tmp_path).looks()[-1]
    assert look.what == "ablation-kinds" and not look.complete  # logged before anything was scored or written
    assert not (tmp_path / AblationKindsDocument.FILE).exists()
    monkeypatch.undo()

    steps: list[tuple[str, int, int]] = []
    doc = run_ablation_kinds(tmp_path, model=model, n_boot=200, positions=["all"], draws=1,
                             progress=lambda *step: steps.append(step))
    assert [r.kind for r in doc.kinds] == ["zero", "mean", "resample", "scale:1.0", "scale:0.75", "scale:0.5",
                                           "scale:0.25", "scale:0.0", "scale:-0.5"]
    # one progress step per held-out pass as it finishes: the intact pass, then each of the nine kinds
    assert steps == [("ablation passes", done, 10) for done in range(11)]
    assert all(r.positions == "all" and r.draws == 1 and r.draw_correct is None for r in doc.kinds)
    rows = {r.kind: r for r in doc.kinds}
    assert doc.intact_correct == Correctness.of(e.intact_correct for e in test.examples)
    assert doc.heldout_hash == test.heldout_hash
    assert rows["zero"].ablated_correct == Correctness.of(e.ablated_correct for e in test.examples)
    assert rows["zero"].gain == test.gain and rows["zero"].mcnemar_p == test.mcnemar_p
    assert rows["scale:0.0"].ablated_correct == rows["zero"].ablated_correct
    assert rows["scale:1.0"].ablated_correct == doc.intact_correct and rows["scale:1.0"].gain == 0
    intact = doc.intact_correct.outcomes()
    for r in doc.kinds:  # every row's statistics follow from its own per-example vector
        ablated = r.ablated_correct.outcomes()
        fixes, damage = int((ablated & ~intact).sum()), int((intact & ~ablated).sum())
        assert (r.fixes, r.damage) == (fixes, damage) and r.mcnemar_p == mcnemar_exact(fixes, damage)
        assert r.gain == pytest.approx((fixes - damage) / doc.n)
    dose = [not_none(rows[f"scale:{a}"].gain) for a in ("1.0", "0.75", "0.5", "0.25", "0.0")]
    # neighbouring doses: zipped with the list shifted by one, which is one shorter
    assert all(a <= b for a, b in zip(dose, dose[1:], strict=False)) and dose[-1] > 0.2
    zero, mean, resample = (not_none(rows[kind].gain) for kind in ("zero", "mean", "resample"))
    assert mean < zero and resample < zero  # the ×25 plant: see
    assert doc.reference["set"] == "discovery" and doc.reference["n"] == 40  # test_ablation_kinds.py
    look = RunDirectory(tmp_path).looks()[-1]
    assert look.what == "ablation-kinds" and look.heads == [test.heads] and look.n == doc.n and look.frozen
    assert look.extra["kinds"] == [r.kind for r in doc.kinds] and look.heldout_hash == test.heldout_hash
    assert look.complete and look.result == AblationKindsDocument.FILE and look.exploratory

    from celtk.report import write_report

    page = write_report(tmp_path).read_text()
    assert "Does it survive other ablation kinds?" in page and 'data-file="ablation_kinds.png"' in page
    assert (tmp_path / "report" / "ablation_kinds.png").stat().st_size > 1000


def test_a_mean_run_screens_selects_and_tests_under_mean_and_is_never_mixed_with_zero(planted, tmp_path):
    model, task = planted
    zero_dir, mean_dir = tmp_path / "zero", tmp_path / "mean"
    zero = run_screen(planted_config(task), zero_dir, model=model)
    mean = run_screen(planted_config(task, ablation="mean"), mean_dir, model=model)
    assert json.loads((mean_dir / "fingerprint.json").read_text())["ablation"] == "mean"
    assert json.loads((mean_dir / "config.json").read_text())["ablation"] == "mean" == mean.config["ablation"]
    with pytest.raises(RunStoreError, match="ablation"):
        run_screen(planted_config(task), mean_dir, model=model)
    with pytest.raises(RunStoreError, match="ablation"):
        run_screen(planted_config(task, ablation="resample"), zero_dir, model=model)
    assert zero.intact_correct == mean.intact_correct  # one baseline; only the ablated passes differ
    config = planted_config(task)
    splits = make_splits(get_task(task), config.discovery, config.heldout, seed=config.seed, fewshot=0)
    reference = ablation_for(model, "mean", get_task(task), splits.discovery, splits.shots, seed=config.seed)
    row = {r.head: r for r in mean.heads}[Head(1, 2)]
    assert row.correct == Correctness.of(evaluate(model, get_task(task), splits.discovery, heads=HeadSet.parse("L1H2"),
                                        ablation=reference).correct)  # the screen's mean is the discovery set's
    assert row.gain < {r.head: r for r in zero.heads}[Head(1, 2)].gain
    from celtk.errors import ConfigError
    from celtk.run import run_altscreen

    with pytest.raises(ConfigError, match="gradient screener predicts zeroing.*under mean ablation"):
        run_altscreen(mean_dir, method="gradient", p=4, model=model)
    selection = run_select(mean_dir, p=4, k=2, model=model)
    test = run_test(mean_dir, model=model, n_boot=200)
    heads = selection.heads
    plain = evaluate(model, get_task(task), splits.heldout, heads=heads, ablation=reference)
    # tested under mean
    assert Correctness.of(e.ablated_correct for e in test.examples) == Correctness.of(plain.correct)
    from celtk.run import run_eval

    looked = run_eval(None, model=model, heads=heads, split="heldout", run=mean_dir, ablation="mean")  # a logged look
    assert looked.correct().tolist() == [e.ablated_correct for e in test.examples]
    assert looked.config["ablation"]["reference"] == "the run's discovery set"
    doc = run_ablation_kinds(mean_dir, model=model, kinds=["mean", "zero"], alphas=[0.5], positions=["all"],
                             n_boot=100)
    assert doc.run_ablation == "mean" and [r.kind for r in doc.kinds] == ["mean", "zero", "scale:0.5"]
    assert {r.kind: r for r in doc.kinds}["mean"].gain == test.gain


def test_cli_ablations_and_screen_under_a_kind(planted, tmp_path):
    from click.testing import CliRunner

    from celtk.ablation import export_ablated
    from celtk.cli import main

    model, task = planted
    model_dir = str(export_ablated(model, HeadSet(()), tmp_path / "model"))
    out = str(tmp_path / "run")
    runner = CliRunner()

    def ok(*args):
        result = runner.invoke(main, [str(a) for a in args], env={"COLUMNS": "240"})  # wide enough for the table
        assert result.exit_code == 0, result.output
        return result.output

    base = ["--model", model_dir, "--task", task, "--discovery", 24, "--heldout", 24, "--fewshot", 0, "--batch-size", 8]
    refused = runner.invoke(main, ["screen", *map(str, base), "--ablation", "scale:half", "--out", out])
    assert refused.exit_code == 1 and "Error: Ablation kind 'scale:half'" in refused.output
    assert "Traceback" not in refused.output
    ok("screen", *base, "--ablation", "scale:0.50", "--out", out)
    assert json.loads((tmp_path / "run" / "fingerprint.json").read_text())["ablation"] == "scale:0.5"
    ok("select", out, "--p", 4, "--k", 2, "--force")  # at the floor under scale:0.5 nothing gains: freeze anyway
    refused = runner.invoke(main, ["ablations", out])
    assert refused.exit_code == 1 and "celtk test" in refused.output
    ok("test", out)
    shown = ok("ablations", out, "--kinds", "zero,mean", "--alphas", "1,0", "--n-boot", 100)
    assert "under each ablation kind" in shown and "scale:0.0" in shown and "scale:0.5" in shown
    assert "positions" in shown and "example" in shown and "prefix" in shown
    doc = json.loads((tmp_path / "run" / "ablation-kinds.json").read_text())
    assert [(r["kind"], r["positions"]) for r in doc["kinds"]] == [
        ("zero", "all"), ("zero", "prefix"), ("zero", "example"), ("mean", "all"), ("mean", "prefix"),
        ("mean", "example"), ("scale:1.0", "all"), ("scale:0.0", "all")]
    refused = runner.invoke(main, ["ablations", out, "--positions", "shots"])
    assert refused.exit_code == 1 and "Unknown positions 'shots'" in refused.output


def test_eval_under_a_kind_measures_on_discovery_examples_and_refuses_overlap(planted, tmp_path):
    from celtk.errors import ConfigError
    from celtk.run import run_eval

    model, task = planted
    zero = run_eval(tmp_path / "zero", model=model, task=task, heads="L1H2", split="heldout", limit=12,
                    exploratory=True, fewshot=0)  # the planted task's shots (it has no few-shot pool)
    assert "ablation" not in zero.config  # zero evaluations keep the document they always had
    doc = run_eval(tmp_path / "mean", model=model, task=task, heads="L1H2", split="heldout", limit=12,
                   exploratory=True, ablation="mean", reference=10, fewshot=0)
    assert doc.config["ablation"]["kind"] == "mean" and doc.config["ablation"]["n_reference"] == 10
    splits = make_splits(get_task(task), 10, 12, seed=0)
    mean = ablation_for(model, "mean", get_task(task), splits.discovery, splits.shots)
    expected = evaluate(model, get_task(task), splits.heldout, heads=HeadSet.parse("L1H2"), ablation=mean)
    assert [e.logprob for e in doc.examples] == [e.logprob for e in expected.examples]
    assert [e.logprob for e in doc.examples] != [e.logprob for e in zero.examples]
    with pytest.raises(ConfigError, match="split 'all' evaluates too"):
        run_eval(None, model=model, task=task, heads="L1H2", split="all", ablation="resample")


def test_positions_are_recorded_never_mixed_and_the_ablations_grid_says_what_it_replaced_where(planted, tmp_path):
    """A run ablating at the example's own positions screens and tests exactly as the plain path does there; a
    resume at other positions is refused; `celtk ablations` scores each kind at all, prefix and example
    positions, resample over several draws averaged per example (an exact sign-flip test of the mean verdicts)."""
    model, planted_task = planted
    lines = open(planted_task.removeprefix("jsonl:")).read()  # the planted task with a shot pool: a prefix to split
    shots = "".join(json.dumps({"prompt": p, "target": t, "split": "fewshot"}) + "\n"
                    for p, t in (("paper horse dream light green seven", " apple"),
                                 ("stone cloud music table river apple", " paper")))
    (tmp_path / "shots.jsonl").write_text(lines + shots)
    task = f"jsonl:{tmp_path / 'shots.jsonl'}"
    tmp_path = tmp_path / "run"
    config = replace(planted_config(task, positions="example"), fewshot=2)
    screen = run_screen(config, tmp_path, model=model)
    assert json.loads((tmp_path / "fingerprint.json").read_text())["positions"] == "example"
    assert json.loads((tmp_path / "config.json").read_text())["positions"] == "example"
    with pytest.raises(RunStoreError, match="positions"):
        run_screen(replace(config, positions="prefix"), tmp_path, model=model)
    the_task = get_task(task)
    splits = make_splits(the_task, config.discovery, config.heldout, seed=config.seed, fewshot=2)
    where = ablation_for(model, "zero", the_task, splits.discovery, splits.shots, positions="example")
    row = {r.head: r for r in screen.heads}[Head(1, 2)]
    assert row.correct == Correctness.of(evaluate(model, the_task, splits.discovery, splits.shots,
                                                  heads=HeadSet.parse("L1H2"), ablation=where).correct)
    selection = run_select(tmp_path, p=4, k=2, model=model, force=True)
    test = run_test(tmp_path, model=model, n_boot=100)
    plain = evaluate(model, the_task, splits.heldout, splits.shots, heads=selection.heads, ablation=where)
    assert Correctness.of(e.ablated_correct for e in test.examples) == Correctness.of(plain.correct)

    doc = run_ablation_kinds(tmp_path, model=model, kinds=["zero", "resample"], alphas=[0.0], draws=3, n_boot=100)
    assert [r.label for r in doc.kinds] == ["zero", "zero @ prefix", "zero @ example", "resample",
                                            "resample @ prefix", "resample @ example", "scale:0.0 @ example"]
    rows = {r.label: r for r in doc.kinds}
    assert rows["zero @ example"].gain == test.gain  # the run's own kind at its own positions reproduces the test
    assert rows["scale:0.0 @ example"].ablated_correct == rows["zero @ example"].ablated_correct
    intact = doc.intact_correct.outcomes()
    assert rows["resample @ prefix"].gain == 0  # every reference shares the shots: resample there is the identity
    for r in doc.kinds:
        if r.kind != "resample":
            assert r.draws == 1 and r.draw_correct is None and r.paired_p is None
            ablated = r.ablated_correct.outcomes()
            fixes, damage = int((ablated & ~intact).sum()), int((intact & ~ablated).sum())
            assert (r.fixes, r.damage) == (fixes, damage) and r.mcnemar_p == mcnemar_exact(fixes, damage)
            continue
        verdicts = np.array([c.outcomes() for c in not_none(r.draw_correct)])
        assert r.draws == 3 and len(verdicts) == 3 and r.draw_correct is not None
        assert r.draw_correct[0] == r.ablated_correct and r.mcnemar_p is None and "mcnemar_p" in r.undefined
        mean = verdicts.mean(axis=0)
        assert r.gain == pytest.approx(mean.mean() - intact.mean())
        assert r.fixes == pytest.approx(mean[~intact].sum()) and r.damage == pytest.approx((1 - mean[intact]).sum())
        assert r.paired_p == pytest.approx(sign_flip_p(verdicts.sum(axis=0) - 3 * intact))
        assert r.draw_gains == pytest.approx([v.mean() - intact.mean() for v in verdicts])
    assert doc.reference["draws"] == 3 and "prefix" in doc.reference
    look = RunDirectory(tmp_path).looks()[-1]
    assert look.extra["kinds"] == [r.label for r in doc.kinds] and look.extra["draws"] == 3


def test_the_sign_flip_test_is_mcnemars_with_one_draw_and_exact_with_fractions():
    import itertools

    for fixes, damage in ((3, 10), (0, 5), (7, 7), (20, 31), (0, 0)):
        units = np.array([1] * fixes + [-1] * damage + [0] * 9)
        assert sign_flip_p(units) == pytest.approx(mcnemar_exact(fixes, damage), rel=1e-12)
    units = np.array([3, -1, 2, 5, -2, 0, 4, -5, 1])
    nonzero = units[units != 0]
    extreme = sum(abs(np.dot(signs, nonzero)) >= abs(units.sum())
                  for signs in itertools.product([1, -1], repeat=len(nonzero)))
    assert sign_flip_p(units) == pytest.approx(extreme / 2 ** len(nonzero), rel=1e-12)
