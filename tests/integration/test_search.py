"""Beyond Algorithm 1 on tiny real networks: a planted two-head interaction that Algorithm 1
misses and greedy / beam search find; the gradient screener equals finite differences; the LASSO
screener and the stability report find a planted harmful head."""

import json
import os
from typing import Any

import pytest
import torch
from _support import planted_config, self_consistent_task

from celtk.evaluation.prompts import prepare
from celtk.heads import Head, HeadSet
from celtk.run import RunConfig, run_altscreen, run_screen, run_select, run_stability, run_test
from celtk.screening.rankers import gate_loss, gradient_scores
from celtk.tasks import get_task, make_splits

A, B = "L1H2", "L1H3"


def _pair_model(tokenizer, c: float, r: float):
    """Heads A = L1H2 and B = L1H3 (one key/value group) read the same queries and write along
    one direction with weights c and −r·c. The task's targets come from the model with both
    removed, so: removing A alone leaves −r·c (a little better than (1−r)·c for r < 1/2), removing
    B alone leaves c (worse), removing both restores the targets exactly."""
    from _support import make_tiny

    model = make_tiny("llama", tokenizer, seed=3)
    attn = model.bridge.blocks[1].attn
    o, q, d = attn.o.original_component.weight, attn.q.original_component.weight, model.d_head
    with torch.no_grad():
        direction = o[:, 2 * d:3 * d].clone()
        q[3 * d:4 * d] = q[2 * d:3 * d]
        o[:, 2 * d:3 * d] = c * direction
        o[:, 3 * d:4 * d] = -r * c * direction
    return model


@pytest.fixture(scope="module")
def interaction(smol_tokenizer, tmp_path_factory):
    clean = _pair_model(smol_tokenizer, 0.0, 0.0)
    task = self_consistent_task(clean, tmp_path_factory.mktemp("pairtask"))
    model = _pair_model(smol_tokenizer, 3.0, 0.3)
    out = tmp_path_factory.mktemp("pair")
    run_screen(RunConfig(model="tiny-pair", task=task, discovery=40, heldout=40, fewshot=0, batch_size=8), out,
               model=model)
    return model, out


def _copy(src, dst):
    import shutil

    return shutil.copytree(src, dst)


def test_planted_interaction_missed_by_algorithm1_found_by_greedy_and_beam(interaction, tmp_path):
    model, out = interaction
    screen = {r["head"]: r for r in json.loads((out / "screen.json").read_text())["heads"]}
    assert screen[A]["gain_count"] > 0 and screen[B]["gain_count"] < 0  # A helps a little alone, B hurts alone
    alg1 = run_select(_copy(out, tmp_path / "a1"), p=4, k=2, model=model)
    assert alg1.pool is not None and Head.parse(B) not in alg1.heads and Head.parse(B) not in alg1.pool
    found = {}
    strategies: tuple[tuple[str, dict[str, Any]], ...] = (("greedy", {}), ("beam", {"width": 2}))
    for name, opts in strategies:
        run = _copy(out, tmp_path / name)
        doc = run_select(run, p=4, k=2, strategy=name, model=model, **opts)
        assert doc.heads == HeadSet.parse(f"{A},{B}"), name
        assert doc.discovery_accuracy == 1.0 > alg1.discovery_accuracy
        found[name] = doc
        os.environ["CELTK_LEDGER"] = str(tmp_path / f"{name}-ledger.jsonl")  # two selections of one held-out set
        test = run_test(run, model=model, n_boot=300)
        assert test.strategy == name and test.gain > 0.5 and test.mcnemar_p < 1e-6
    n = 12
    assert found["greedy"].n_evaluations == n + (n - 1)
    assert found["beam"].n_evaluations == n + 2 * (n - 1) - 1
    assert alg1.n_evaluations == n + 6


def test_greedy_resumes_from_its_parts(interaction, tmp_path):
    model, out = interaction
    run = _copy(out, tmp_path / "g")
    first = run_select(run, p=4, k=2, strategy="greedy", model=model)
    parts = sorted((run / "select_parts" / "sets").glob("*.json"))
    assert parts
    parts[0].unlink()
    assert run_select(run, p=4, k=2, strategy="greedy", model=model) == first


def test_gradient_screener_equals_finite_differences(tiny_model):
    task = get_task("arithmetic")
    splits = make_splits(task, 6, 0, fewshot=1, seed=0)
    prepared = prepare(tiny_model, task, splits.discovery, splits.shots)
    result = gradient_scores(tiny_model, prepared, batch_size=4)
    eps = 1e-3
    for head in (Head(0, 1), Head(2, 3)):
        gates = torch.ones(tiny_model.n_layers, tiny_model.n_heads, dtype=torch.float64)
        up, down = gates.clone(), gates.clone()
        up[head.layer, head.head] += eps
        down[head.layer, head.head] -= eps
        with torch.no_grad():
            fd = ((gate_loss(tiny_model, prepared, up.float()) - gate_loss(tiny_model, prepared, down.float()))
                  / (2 * eps))
        assert result.scores[head] == pytest.approx(float(fd), rel=2e-2, abs=2e-4)
    with torch.no_grad():  # the gates at 1 are the intact model; at 0 the head is ablated
        zero = torch.ones(tiny_model.n_layers, tiny_model.n_heads)
        zero[0, 1] = 0
        from celtk.ablation import ablate
        from celtk.evaluation.scoring import decoder_hidden
        from celtk.screening.rankers import _example_loss, task_loss_terms

        with ablate(tiny_model, "L0H1"):
            lp = task_loss_terms(tiny_model, prepared,
                                 lambda b: decoder_hidden(tiny_model, b.input_ids, b.attention_mask), 4)
        assert float(gate_loss(tiny_model, prepared, zero)) == pytest.approx(float(_example_loss(prepared, lp)),
                                                                             abs=1e-5)


@pytest.fixture(scope="module")
def planted_run(planted, tmp_path_factory):
    model, task = planted
    out = tmp_path_factory.mktemp("planted")
    run_screen(planted_config(task), out, model=model)
    return model, out


def test_altscreens_rank_the_planted_head_first(planted_run):
    model, out = planted_run
    exhaustive_best = json.loads((out / "screen.json").read_text())["heads"]
    grad = run_altscreen(out, method="gradient", p=4, model=model)
    assert next(iter(grad.scores)) == "L1H2"
    lasso = run_altscreen(out, method="lasso", p=4, masks=60, rate=0.15, seed=0, model=model)
    assert next(iter(lasso.scores)) == "L1H2" and lasso.scores["L1H2"] > 0
    assert lasso.comparison["n_evaluations"] == 60 and lasso.comparison["overlap"] >= 1
    assert (out / "altscreen-lasso.json").is_file() and len(exhaustive_best) == 12


def knockout_ranker(inputs, *, masks=200, rate=0.05, seed=0, **_):
    """A ranker written outside celtk (one function, no celtk edit): each head's accuracy knocked out alone,
    scored through the run's memo under its ablation kind. It must agree with the exhaustive screen exactly."""
    from celtk.screening.rankers import RankerResult

    sets = [HeadSet.of([h]) for h in inputs.heads]
    outcomes = inputs.evaluate(sets)
    return RankerResult("knockout", {h: float(outcomes[s].mean()) for h, s in zip(inputs.heads, sets, strict=True)},
                        len(sets), 0.0, {"ablation": inputs.ablation, "n_discovery": len(inputs.discovery().examples)})


def test_a_ranker_is_one_function_plus_one_registry_line(planted_run):
    """Adding a ranker is one module plus one line in RANKERS: registered from this test module, run_altscreen
    runs it with the run's inputs and compares it with the screen like the built-in ones."""
    from celtk.errors import ConfigError
    from celtk.screening.registry import RANKERS

    model, out = planted_run
    RANKERS.register("knockout", knockout_ranker)
    try:
        doc = run_altscreen(out, method="knockout", p=4, model=model)
        with pytest.raises(ConfigError, match="already registered"):
            RANKERS.register("knockout", knockout_ranker)
    finally:
        RANKERS.unregister("knockout")
    assert doc.method == "knockout" and doc.details == {"ablation": "zero", "n_discovery": 40}
    assert doc.comparison["screener_pool"] == doc.comparison["exhaustive_pool"] and doc.comparison["overlap"] == 4
    assert doc.comparison["spearman"] == pytest.approx(1.0) and next(iter(doc.scores)) == "L1H2"
    assert json.loads((out / "altscreen-knockout.json").read_text())["method"] == "knockout"
    assert "knockout" not in RANKERS


def test_stability_on_planted_head(planted_run):
    model, out = planted_run
    doc = run_stability(out, resamples=6, method="bootstrap", p=4, k=2, model=model, n_boot=200)
    assert doc.head_frequency[Head(1, 2)] == 1.0
    assert 0 < doc.mean_pairwise_jaccard <= 1
    assert len(doc.per_resample) == 6 and doc.n_distinct_selections == len({tuple(s) for s in doc.per_resample})
    assert all(r.heldout_gain > 0 for r in doc.selections if "L1H2" in r.heads)
    assert json.loads((out / "stability.json").read_text()) == doc.to_json()
    sub = run_stability(out, resamples=4, method="subsample", fraction=0.5, p=4, k=2, model=model, n_boot=200)
    assert sub.resampling == "subsample" and sub.head_frequency[Head(1, 2)] == 1.0


def test_cli_verbs_beyond_the_paper(planted, tmp_path):
    """The CLI's select --strategy, altscreen, stability, attributes, compare-refusal and report
    on a model saved to a directory, in process (their tables print without error)."""
    from click.testing import CliRunner

    from celtk.ablation import export_ablated
    from celtk.cli import main

    model, task = planted
    model_dir = export_ablated(model, HeadSet(()), tmp_path / "model")
    out = str(tmp_path / "run")
    runner = CliRunner()

    def ok(*args):
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    ok("screen", "--model", str(model_dir), "--task", task, "--discovery", "24", "--heldout", "24", "--fewshot", "0",
       "--batch-size", "8", "--out", out)
    assert "greedy search" in ok("select", out, "--strategy", "greedy", "--k", "2")
    assert "beam search" in ok("select", out, "--strategy", "beam", "--width", "2", "--k", "2")
    assert "gradient screener" in ok("altscreen", out, "--method", "gradient", "--p", "3")
    assert "lasso screener" in ok("altscreen", out, "--method", "lasso", "--p", "3", "--masks", "20", "--rate", "0.2")
    assert "distinct selections" in ok("stability", out, "--resamples", "3", "--p", "3", "--k", "2")
    assert "Attribute scores" in ok("attributes", out, "--length", "10")
    refused = runner.invoke(main, ["compare", out, "--circuit", "ioi-gpt2-small"])
    assert refused.exit_code == 1 and "3 × 4" in refused.output
    assert json.loads((tmp_path / "run" / "selection.json").read_text())["strategy"] == "beam"
    ok("test", out)
    assert str(tmp_path / "run" / "report" / "index.html") in ok("report", out)
    # once the held-out set has been used, choosing again needs --force, which is recorded
    refused = runner.invoke(main, ["select", out, "--strategy", "greedy", "--k", "2"])
    assert refused.exit_code == 1 and "--force" in refused.output
    ok("select", out, "--strategy", "greedy", "--k", "2", "--force")
    assert json.loads((tmp_path / "run" / "selection.json").read_text())["forced_after_test"]


def test_cli_stages_equal_one_library_call_each(planted, tmp_path):
    """`celtk screen`, `select` and `test` write exactly what `run_screen`, `run_select` and
    `run_test` return; greedy takes k = 12 (all heads, no pool) where Algorithm 1 refuses it."""
    import shutil

    from click.testing import CliRunner

    from celtk.ablation import export_ablated
    from celtk.cli import main
    from celtk.run import RunConfig, ScreenDocument, SelectionDocument, TestDocument

    model, task = planted
    model_dir = str(export_ablated(model, HeadSet(()), tmp_path / "model"))
    cli, lib = tmp_path / "cli", tmp_path / "lib"
    runner = CliRunner()

    def ok(*args):
        result = runner.invoke(main, [str(a) for a in args])
        assert result.exit_code == 0, result.output
        return result.output

    ok("screen", "--model", model_dir, "--task", task, "--discovery", 24, "--heldout", 24, "--fewshot", 0,
       "--batch-size", 8, "--out", cli)
    config = RunConfig(model=model_dir, task=task, discovery=24, heldout=24, fewshot=0, batch_size=8)
    assert ScreenDocument.load(cli) == run_screen(config, lib)
    assert (cli / "screen.json").read_bytes() == (lib / "screen.json").read_bytes()
    shutil.rmtree(lib)
    shutil.copytree(cli, lib)
    ok("select", cli, "--strategy", "greedy", "--k", 12)
    greedy = run_select(lib, strategy="greedy", k=12)
    assert SelectionDocument.load(cli) == greedy and greedy.strategy == "greedy" and "L1H2" in greedy.heads
    ok("test", cli)
    os.environ["CELTK_LEDGER"] = str(tmp_path / "lib-ledger.jsonl")  # the same held-out set, tested again in lib
    assert TestDocument.load(cli) == run_test(lib)
    refused = runner.invoke(main, ["select", str(cli), "--k", "12"])
    assert refused.exit_code == 1 and "k = 12 exceeds p = 10; Algorithm 1 draws subsets from the pool" in refused.output
    assert "Traceback" not in refused.output
