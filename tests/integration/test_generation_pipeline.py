"""Every stage on a generation-graded task: a tiny Llama whose planted head breaks free-form
answers is found by ``run_all`` with ``grading="generate"``, and select (every strategy), test,
stability, merge and report run on that run directory."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from _support import forget_documents
from click.testing import CliRunner

from celtk.ablation import ablate
from celtk.errors import ConfigError
from celtk.evaluation.generation import generate_greedy
from celtk.heads import Head, HeadSet
from celtk.run import run_all, run_screen, run_select, run_stability, run_test
from celtk.run.screen import merge_shards

PLANTED = "L1H2"
MAX_NEW = 3


def _free_form_task(model, directory, n: int = 90) -> str:
    """``jsonl:PATH`` of prompts whose targets are the planted-free model's greedy answers (the
    planted model with its planted head ablated), so ablating that head restores every answer."""
    words = ["apple", "river", "stone", "cloud", "music", "table", "green", "seven", "light", "paper", "horse", "dream"]
    rng = np.random.default_rng(1)
    prompts = list(dict.fromkeys(" ".join(rng.choice(words, size=5)) for _ in range(4 * n)))
    with ablate(model, HeadSet.parse(PLANTED)):
        answers = generate_greedy(model, prompts, MAX_NEW, ["\n"])
    lines = [{"id": f"q{i}", "prompt": p, "target": a.strip()}
             for i, (p, a) in enumerate(zip(prompts, answers, strict=True)) if a.strip()]
    assert len(lines) >= n
    path = directory / "free.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines[:n]))
    return f"jsonl:{path}"


@pytest.fixture(scope="module")
def planted_generate(smol_tokenizer, tmp_path_factory):
    from _support import make_tiny

    bad = make_tiny("llama", smol_tokenizer, seed=3)
    o = bad.bridge.blocks[1].attn.o.original_component.weight
    with torch.no_grad():
        o[:, 2 * bad.d_head:3 * bad.d_head] *= 25.0
    return bad, _free_form_task(bad, tmp_path_factory.mktemp("free"))


def _config(task, **kw):
    from _support import planted_config

    return planted_config(task, grading="generate", max_new_tokens=MAX_NEW, **kw)


@pytest.fixture(scope="module")
def generate_run(planted_generate, tmp_path_factory):
    model, task = planted_generate
    out = tmp_path_factory.mktemp("run")
    return out, run_all(_config(task), out, model=model)


def test_run_all_selects_planted_head_with_heldout_gain(generate_run):
    out, result = generate_run
    assert result.screen.intact_accuracy < 1.0
    assert PLANTED in result.selection.heads
    test = result.test
    assert test.ablated_accuracy > test.intact_accuracy
    assert test.gain_ci[0] > 0 and test.mcnemar_p < 0.05
    # every held-out example records both generations; the ablated ones are the targets themselves
    targets = {json.loads(line).get("id"): json.loads(line)["target"]
               for line in open(result.screen.task.name.split(":", 1)[1].split("?")[0])}
    for example in test.examples:
        assert example.intact_generation is not None and example.ablated_generation is not None
        assert example.intact_correct == (example.intact_generation.strip() == targets[example.id])
        assert example.ablated_correct == (example.ablated_generation.strip() == targets[example.id])
    saved = json.loads((out / "test.json").read_text())
    assert "ablated_generation" in saved["examples"][0]


def test_screen_records_every_heads_generations(generate_run, planted_generate):
    out, result = generate_run
    model, _ = planted_generate
    texts = {}
    for path in (out / "generations").glob("L*.json"):
        texts.update(json.loads(path.read_text()))
    assert set(texts) == {str(r.head) for r in result.screen.heads}
    intact = json.loads((out / "generations" / "intact.json").read_text())["intact"]
    assert list(intact) == result.screen.discovery_ids
    assert texts[PLANTED] != intact  # the planted head changes what the model writes
    row = next(r for r in result.screen.heads if str(r.head) == PLANTED)
    assert row.accuracy == 1.0  # its ablation restores every discovery answer


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_search_strategies_on_generate_run(generate_run, planted_generate, strategy, tmp_path):
    screened, _ = generate_run
    model, _ = planted_generate
    out = tmp_path / "run"  # the screened run before its selection and test: each strategy gets its one held-out test
    shutil.copytree(screened, out)
    forget_documents(out, "selection.json", "diagnostics.json", "test.json", "heldout_log.jsonl", "heldout_log.head")
    selection = run_select(out, p=4, k=2, strategy=strategy, width=2, model=model)
    assert PLANTED in selection.heads
    assert selection.discovery_accuracy > selection.intact_discovery_accuracy
    test = run_test(out, model=model, n_boot=200)  # the held-out test of this strategy's selection
    assert test.heads == selection.heads and test.strategy == strategy
    assert test.ablated_accuracy > test.intact_accuracy and test.fixes > test.damage


def test_stability_and_report_on_generate_run(generate_run, planted_generate):
    from celtk.report import write_report

    out, _ = generate_run
    model, _ = planted_generate
    doc = run_stability(out, resamples=3, p=4, k=2, model=model, n_boot=200)
    assert doc.head_frequency[Head.parse(PLANTED)] == 1.0
    page = write_report(out)
    assert PLANTED in page.read_text()


def test_shards_merge_on_generate_task(planted_generate, tmp_path):
    model, task = planted_generate
    for i in range(2):
        run_screen(_config(task), tmp_path, shard=(i, 2), model=model)
    merged = merge_shards(tmp_path)
    one = run_screen(_config(task), tmp_path / "one", model=model)
    assert [(r.head, r.correct) for r in merged.heads] == [(r.head, r.correct) for r in one.heads]


def test_gradient_screener_refuses_generate_run_naming_alternatives(generate_run, planted_generate):
    from celtk.run import run_altscreen

    out, _ = generate_run
    model, _ = planted_generate
    with pytest.raises(ConfigError, match="lasso.*exhaustive screen"):
        run_altscreen(out, method="gradient", p=4, model=model)


def test_grading_settings_reach_the_task_or_are_refused(tmp_path):
    from celtk.cli import main
    from celtk.run.config import RunConfig
    from celtk.run.session import task_for

    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "a", "target": "b"}) + "\n")
    task = task_for(RunConfig(task=f"jsonl:{path}", grading="generate", stop=["."], max_new_tokens=5))
    assert task.kind == "generate" and task.stop_strings() == ["."] and task.max_new_tokens() == 5
    assert task_for(RunConfig(task=f"jsonl:{path}")).kind == "target"
    runner = CliRunner()
    refused = runner.invoke(main, ["screen", "--task", "arithmetic:2da", "--grading", "generate", "--out",
                                   str(tmp_path / "o")])
    assert refused.exit_code == 1 and "--grading generate applies to jsonl:PATH" in refused.output
    refused = runner.invoke(main, ["screen", "--task", f"jsonl:{path}", "--stop", ".", "--out", str(tmp_path / "o")])
    assert refused.exit_code == 1 and "(--grading generate)" in refused.output
