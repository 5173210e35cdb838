"""Transfer on the planted model: the harmful head L1H2's removal helps a second task it also
hurts and leaves alone one it does not affect; McNemar and Holm in the table are right."""

import json

import numpy as np
import pytest
import torch
from conftest import make_tiny, planted_config

from celtk.ablation import ablate
from celtk.errors import ConfigError
from celtk.run import run_screen, run_select, run_test
from celtk.run.documents import TransferDocument
from celtk.run.transfer import Variant, run_transfer, variant_grid
from celtk.runstore import unbits
from celtk.stats import holm, mcnemar_exact

WORDS = ["north", "south", "water", "fire", "metal", "glass", "tiger", "lemon", "chair", "train", "queen", "ocean"]


def _next_token(model, ids):
    with torch.no_grad():
        return model.bridge(ids)[0, -1].argmax().item()


def _task(model, directory, name, keep, n=60, seed=1):
    """A JSONL task on fresh prompts whose target is ``model``'s greedy next token, keeping prompts where ``keep(ids, token)``."""
    rng = np.random.default_rng(seed)
    lines, seen = [], set()
    for _ in range(4000):
        if len(lines) == n:
            break
        prompt = " ".join(rng.choice(WORDS, size=5))
        ids = model.tokenizer(prompt, return_tensors="pt").input_ids
        token = _next_token(model, ids)
        target = model.tokenizer.decode([token])
        whole = model.tokenizer(prompt + target).input_ids
        if prompt in seen or whole[: ids.shape[1]] != ids[0].tolist() or whole[ids.shape[1]:] != [token] or not keep(ids, token):
            continue
        seen.add(prompt)
        lines.append({"prompt": prompt, "target": target})
    assert len(lines) == n, "could not draw enough prompts for the task"
    path = directory / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return f"jsonl:{path}"


@pytest.fixture(scope="module")
def selected(planted, smol_tokenizer, tmp_path_factory):
    """The planted run screened and selected, plus a task the head also hurts and one it does not affect."""
    model, task = planted
    out = tmp_path_factory.mktemp("run")
    run_screen(planted_config(task), out, model=model)
    selection = run_select(out, p=4, k=2, model=model)
    assert "L1H2" in selection.heads
    data = tmp_path_factory.mktemp("variants")
    clean = make_tiny("llama", smol_tokenizer, seed=3)
    hurt = _task(clean, data, "hurt.jsonl", lambda ids, t: True)

    def unaffected(ids, token):  # the planted model predicts it with and without the selection
        with ablate(model, ",".join(selection.heads)):
            return _next_token(model, ids) == token

    same = _task(model, data, "same.jsonl", unaffected, seed=2)
    return model, out, hurt, same


def test_transfer_to_hurt_task_not_to_unaffected_one(selected):
    model, out, hurt, same = selected
    grid = [Variant("original", "original"), Variant("hurt", "task", task=hurt), Variant("same", "task", task=same)]
    doc = run_transfer(out, grid, model, n_boot=500)
    rows = {r.variant: r for r in doc.variants}
    assert rows["original"].gain > 0 and rows["original"].mcnemar_p < 0.05
    assert rows["hurt"].gain > 0 and rows["hurt"].holm_p < 0.05 and rows["hurt"].gain_ci[0] > 0
    assert rows["same"].gain == 0 and rows["same"].mcnemar_p == 1.0 and rows["same"].fixes == rows["same"].damage == 0
    for r in doc.variants:  # the table's p-values follow from its own per-example vectors
        a, b = np.array(unbits(r.intact_correct)), np.array(unbits(r.ablated_correct))
        assert r.n == len(a) == 40
        assert r.mcnemar_p == mcnemar_exact(int((~a & b).sum()), int((a & ~b).sum()))
    assert [r.holm_p for r in doc.variants] == list(holm([r.mcnemar_p for r in doc.variants]))
    # the original row is the held-out test itself
    test = run_test(out, model=model, n_boot=500)
    assert rows["original"].intact_correct == "".join("1" if e.intact_correct else "0" for e in test.examples)
    assert rows["original"].gain == test.gain
    assert TransferDocument.load(out) == doc


def test_shot_variants_keep_the_heldout_set_and_lm_loss_is_paired(selected, tmp_path):
    model, out, _, _ = selected
    text = tmp_path / "plain.txt"
    text.write_text(" ".join(WORDS * 30))
    doc = run_transfer(out, [Variant("original", "original"), Variant("zero-shot", "zero-shot", fewshot=0)], model,
                       plain_text=text, n_boot=300)
    assert doc.variants[0].heldout_hash == doc.variants[1].heldout_hash
    assert doc.variants[0].intact_correct == doc.variants[1].intact_correct  # the planted run is zero-shot already
    loss = doc.lm_loss
    assert loss.n_tokens > 100 and loss.delta == pytest.approx(loss.ablated_nll - loss.intact_nll)
    assert loss.delta_ci[0] <= loss.delta <= loss.delta_ci[1]
    # removing the ×25 head brings the model nearer its clean self: the loss on plain text changes
    assert loss.intact_nll != loss.ablated_nll


def test_variant_grid_and_shape_check(selected, smol_tokenizer):
    grid = variant_grid("arithmetic:2da", shot_seeds=[1, 2], subtasks=["2ds", "3da"], tasks=["boolq"], chat=True)
    assert [v.name for v in grid] == ["original", "shots seed=1", "shots seed=2", "zero-shot", "arithmetic:2ds",
                                      "arithmetic:3da", "boolq", "chat"]
    model, out, _, _ = selected
    other = make_tiny("llama", smol_tokenizer, seed=3, n_layers=2)
    with pytest.raises(ConfigError, match="same shape"):
        run_transfer(out, [Variant("other", "model", model="other")], model, other_models={"other": other}, n_boot=10)
