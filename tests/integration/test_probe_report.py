"""Probing, circuit comparison on a model of GPT-2 small's shape, and the HTML report rendered
in headless Chromium."""

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch
from _support import not_none, self_consistent_task

from celtk import probe
from celtk.analysis import CompareDocument, HeadAttributesDocument
from celtk.errors import HeadError
from celtk.evaluation import evaluate
from celtk.heads import Head, HeadSet
from celtk.report import write_report
from celtk.run import RunConfig, run_screen, run_select, run_test
from celtk.run.analyses import run_attributes, run_compare
from celtk.store.files import dumps
from celtk.tasks import get_task, make_splits


def test_effect_lists_fixes_and_breaks(planted):
    model, task_name = planted
    task = get_task(task_name)
    splits = make_splits(task, 0, 30)
    eff = probe.effect(model, task, splits.heldout, heads="L1H2", n_boot=200)
    intact = evaluate(model, task, splits.heldout)
    ablated = evaluate(model, task, splits.heldout, heads=HeadSet.parse("L1H2"))
    assert [e.intact_correct for e in eff.examples] == intact.correct.tolist()
    assert [e.ablated_correct for e in eff.examples] == ablated.correct.tolist()
    assert eff.fixes == [e.id for e, a, i in zip(splits.heldout, ablated.correct, intact.correct, strict=True)
                         if a and not i]
    assert eff.breaks == [e.id for e, a, i in zip(splits.heldout, ablated.correct, intact.correct, strict=True)
                          if i and not a]
    assert eff.fixes and not_none(eff.summary.gain) > 0
    assert isinstance(ablated.examples[0].logprob, float) and isinstance(intact.examples[0].logprob, float)
    assert eff.examples[0].delta_logprob == pytest.approx(ablated.examples[0].logprob - intact.examples[0].logprob)


def test_attention_pattern_is_causal_and_normalised(tiny_model):
    att = probe.attention(tiny_model, "The cat sat on the mat because it was warm", "L1H2")
    n = len(att.tokens)
    assert att.pattern.shape == (n, n)
    np.testing.assert_allclose(att.pattern.sum(-1), 1.0, atol=1e-5)
    assert np.allclose(np.triu(att.pattern, 1), 0.0)
    assert att.top_keys(query=-1, n=3)[0][2] == pytest.approx(att.pattern[-1].max())


def test_head_outputs_and_direct_logit_attribution_add_up(tiny_model):
    prompt = "Question: What is 12 plus 30?\nAnswer:"
    outs, resid, attn = probe.head_outputs(tiny_model, prompt)
    bias = [tiny_model.bridge.blocks[l].attn.o.original_component.bias for l in range(tiny_model.n_layers)]
    total = outs.sum(1) + torch.stack([b if b is not None else torch.zeros_like(outs[0, 0]) for b in bias])
    torch.testing.assert_close(total, attn, atol=1e-4, rtol=1e-4)  # the per-head split is the attention output
    target = " 42"
    dla = probe.direct_logit_attribution(tiny_model, prompt, target)
    assert (len(dla) == tiny_model.n_layers * tiny_model.n_heads
            and list(dla.values()) == sorted(dla.values(), reverse=True))
    target_id = tiny_model.tokenizer(target, add_special_tokens=False).input_ids[0]
    with torch.no_grad():
        logits = tiny_model.bridge(tiny_model.tokenizer(prompt, return_tensors="pt").input_ids)[0, -1]
        direction = probe._final_norm_factor(tiny_model, resid) * tiny_model.hf_model.lm_head.weight[target_id]
    # frozen-scale norm is exact here
    assert float(resid @ direction) == pytest.approx(float(logits[target_id]), abs=1e-3)
    assert sum(dla.values()) == pytest.approx(float(outs.sum((0, 1)) @ direction), abs=1e-3)


def test_a_lone_surrogate_is_refused_by_name_before_the_tokenizer(tiny_model):
    from celtk.errors import TaskError

    for call in (lambda: probe.tokens(tiny_model, "a \ud800"), lambda: probe.attention(tiny_model, "a \ud800", "L0H0"),
                 lambda: probe.direct_logit_attribution(tiny_model, "a \ud800", " b"),
                 lambda: probe.direct_logit_attribution(tiny_model, "a", " \ud800")):
        with pytest.raises(TaskError, match=re.escape(r"holds a lone surrogate '\ud800' at character")):
            call()


def test_next_token_changes(tiny_model):
    prompt = "one two three four"
    none = probe.next_token_changes(tiny_model, prompt, HeadSet(), n=5)
    assert all(c.delta == 0 for c in none)
    changes = probe.next_token_changes(tiny_model, prompt, "L0H1,L2H3", n=5)
    deltas = [abs(c.delta) for c in changes]
    assert deltas == sorted(deltas, reverse=True) and deltas[0] > 0


@pytest.fixture(scope="module")
def gpt2_shaped_run(smol_tokenizer, tmp_path_factory):
    """A tiny Llama with GPT-2 small's 12 layers × 12 heads, screened, selected and tested."""
    from _support import make_tiny

    model = make_tiny("llama", smol_tokenizer, seed=5, n_layers=12, n_heads=12)
    task = self_consistent_task(model, tmp_path_factory.mktemp("t"), n=40)
    out = tmp_path_factory.mktemp("gpt2shape")
    run_screen(RunConfig(model="tiny-12x12", task=task, discovery=20, heldout=20, fewshot=0, batch_size=20), out,
               model=model)
    run_select(out, p=4, k=2, model=model, force=True)  # at the ceiling (its own answers) nothing gains
    run_test(out, model=model, n_boot=200)
    return model, out


def test_compare_with_ioi_circuit_on_same_shape(gpt2_shaped_run):
    model, out = gpt2_shaped_run
    with pytest.raises(HeadError, match="found on 'gpt2 \\(GPT-2 small\\)'; this run's model is 'tiny-llama'"):
        run_compare(out, "ioi-gpt2-small", top=10)  # the same shape, another model
    report = run_compare(out, "ioi-gpt2-small", top=10, any_model=True)
    selection = json.loads((out / "selection.json").read_text())["heads"]
    from celtk.circuits import load_circuit

    ioi = {str(h) for h in load_circuit("ioi-gpt2-small").heads}
    assert report.selection.overlap == len(set(selection) & ioi) and list(map(str, report.run_selection)) == selection
    screen = json.loads((out / "screen.json").read_text())["heads"]
    assert len(screen) == 144 and report.population == 144
    assert set(map(str, report.circuit_head_ranks)) == ioi and all(r is not None and 1 <= r <= 144
                                                         for r in report.circuit_head_ranks.values())
    assert report.top == 10 and report.screen_top.n == 10 and report.critical_vs_enhancing is not None
    # the file is the document: screen_top written as screen_top10, and read back to the same record
    text = (out / "compare-ioi-gpt2-small.json").read_text()
    assert "screen_top10" in json.loads(text) and text == dumps(report.to_json())
    assert CompareDocument.from_json(json.loads(text)) == report
    # the command names the heads as the file writes them
    from click.testing import CliRunner

    from celtk.cli import main

    shown = CliRunner().invoke(main, ["compare", str(out), "--circuit", "ioi-gpt2-small", "--any-model"],
                               env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    ce = not_none(report.critical_vs_enhancing)
    assert f"Task-critical heads (removal hurts most): {', '.join(str(r.head) for r in ce.critical)}" in shown.output
    assert f"Enhancing heads (removal helps most): {', '.join(str(r.head) for r in ce.enhancing)}" in shown.output
    assert f"overlap {', '.join(map(str, ce.overlap)) or 'none'}." in shown.output
    assert "Head(" not in shown.output and "['" not in shown.output


def test_attributes_document_round_trips(gpt2_shaped_run, tmp_path):
    """head_attributes.json is the returned document; reading it gives the same record, with its scores
    per head of the selection, and the report shows them."""
    model, out = gpt2_shaped_run
    doc = run_attributes(out, model=model, length=12, batch=2, seed=3)
    assert (HeadAttributesDocument.load(out) == doc
            and (out / "head_attributes.json").read_text() == dumps(doc.to_json()))
    assert (doc.n_layers, doc.n_heads, doc.probe.length, doc.probe.seed) == (12, 12, 12, 3)
    selection = json.loads((out / "selection.json").read_text())["heads"]
    assert list(map(str, doc.selected)) == selection
    for name in ("previous_token", "duplicate_token", "induction"):
        grid = doc.scores[name]
        assert len(grid) == 12 and all(len(row) == 12 and all(0 <= v <= 1 for v in row) for row in grid)
        for head in map(Head.parse, selection):
            assert doc.selected[head][name] == doc.score(name, head) == grid[head.layer][head.head]
    page = write_report(out, tmp_path / "report").read_text()
    names = list(doc.scores)
    row = "".join(f"<td>{v}</td>"
                  for v in [selection[0], *(f"{doc.score(n, Head.parse(selection[0])):.3f}" for n in names)])
    assert "".join(f"<th>{h}</th>" for h in ["head", *names]) in page and f"<tr>{row}</tr>" in page


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if os.environ.get("CELTK_REQUIRE_CHROMIUM") == "1":
        pytest.fail("Chromium is required here (CELTK_REQUIRE_CHROMIUM=1) but not installed: apt-get install chromium")
    pytest.skip("headless Chromium not installed (Debian: apt-get install chromium)")


def test_report_renders_in_headless_chromium(gpt2_shaped_run, tmp_path):
    model, out = gpt2_shaped_run
    run_attributes(out, model=model, length=20, batch=2)
    page = write_report(out, tmp_path / "report")
    for name in ("gain.png", "damage.png", "interactions.png"):
        data = (tmp_path / "report" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    text = page.read_text()
    assert "Held-out test" in text and "Attribute scores of the selected heads" in text and "induction" in text
    chromium = _chromium()
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    dom = done.stdout
    assert 'data-images-total="3"' in dom, done.stderr[-1000:]
    assert 'data-images-loaded="3"' in dom  # every embedded PNG decoded in the browser
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1200,2400", page.as_uri()], capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 20_000
