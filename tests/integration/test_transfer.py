"""Transfer on the planted model: the harmful head L1H2's removal helps a second task it also
hurts and leaves alone one it does not affect; McNemar and Holm in the table are right."""

import json
from contextlib import nullcontext

import numpy as np
import pytest
import torch
from conftest import make_tiny, planted_config

from celtk.ablation import ablate
from celtk.errors import ConfigError, RunStoreError
from celtk.run import run_screen, run_select, run_test
from celtk.run.documents import TransferDocument
from celtk.run.frozen import read_log
from celtk.run.transfer import Variant, run_transfer, variant_grid
from celtk.runstore import unbits
from celtk.stats import holm, mcnemar_exact

CHOICES = (" yes", " no")  # one token each
WORDS = ["north", "south", "water", "fire", "metal", "glass", "tiger", "lemon", "chair", "train", "queen", "ocean"]


def _last_logits(model, ids, heads=None):
    """Next-token logits after each prompt (token ids), one batched forward per length (optionally ablated).

    Returns:
        float [n_prompts, vocab].
    """
    out = [None] * len(ids)
    for length in {len(i) for i in ids}:
        rows = [j for j, i in enumerate(ids) if len(i) == length]
        with torch.no_grad(), (ablate(model, heads) if heads else nullcontext()):
            logits = model.bridge(torch.tensor([ids[j] for j in rows]))[:, -1]
        for j, row in zip(rows, logits):
            out[j] = row
    return torch.stack(out)


def _task(tokenizer, path, prompts, ids, tokens, keep, n=40):
    """A JSONL task of the first ``n`` prompts with ``keep[j]`` whose target, the token ``tokens[j]``,
    tokenises back onto the prompt (so teacher forcing scores exactly that token)."""
    lines = []
    for prompt, i, token, ok in zip(prompts, ids, tokens, keep):
        target = tokenizer.decode([token])
        if ok and tokenizer(prompt + target).input_ids == i + [token]:
            lines.append({"prompt": prompt, "target": target})
    assert len(lines) >= n, f"only {len(lines)} prompts qualify for {path.name}"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines[:n]))
    return f"jsonl:{path}"


@pytest.fixture(scope="module")
def selected(planted, smol_tokenizer, tmp_path_factory):
    """The planted run screened and selected, plus a task the head also hurts and one it does not affect."""
    model, task = planted
    out = tmp_path_factory.mktemp("run")
    run_screen(planted_config(task), out, model=model)
    selection = run_select(out, p=4, k=2, model=model)
    assert "L1H2" in selection.heads
    rng = np.random.default_rng(1)
    prompts = list(dict.fromkeys(" ".join(rng.choice(WORDS, size=5)) for _ in range(400)))  # other words than the run's
    ids = [model.tokenizer(p).input_ids for p in prompts]
    data = tmp_path_factory.mktemp("variants")
    # hurt: the clean model's own next tokens, which the ×25 head spoils
    clean = _last_logits(make_tiny("llama", smol_tokenizer, seed=3), ids).argmax(-1).tolist()
    hurt = _task(model.tokenizer, data / "hurt.jsonl", prompts, ids, clean, [True] * len(prompts))
    # same: a yes/no task labelled with the choice the planted model prefers with and without the selection
    # (its next tokens themselves nearly always change), kept where both prefer it by a clear margin
    choice = [model.tokenizer(c).input_ids[0] for c in CHOICES]
    intact = _last_logits(model, ids)[:, choice]
    ablated = _last_logits(model, ids, ",".join(selection.heads))[:, choice]
    margin_i, margin_a = intact[:, 0] - intact[:, 1], ablated[:, 0] - ablated[:, 1]
    # jsonl multiple-choice lines are scored after a " " delimiter (lm-eval's), so the choices are written without it
    lines = [{"prompt": p, "choices": [c[1:] for c in CHOICES], "label": int(mi < 0)}
             for p, i, mi, ma in zip(prompts, ids, margin_i.tolist(), margin_a.tolist())
             if mi * ma > 0 and min(abs(mi), abs(ma)) > 1e-2
             and all(model.tokenizer(p + c).input_ids == i + [t] for c, t in zip(CHOICES, choice))]
    assert len(lines) >= 40, f"only {len(lines)} prompts qualify for the unaffected task"
    (data / "same.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines[:40]))
    same = f"jsonl:{data / 'same.jsonl'}"
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
    p1, p2 = sorted([rows["original"].mcnemar_p, rows["hurt"].mcnemar_p])  # Holm by hand: 3·p(1), max(., 2·p(2)), 1
    assert sorted([rows["original"].holm_p, rows["hurt"].holm_p]) == pytest.approx([min(1, 3 * p1), min(1, max(3 * p1, 2 * p2))])
    assert rows["same"].holm_p == 1.0
    # transfer reads the held-out set: logged per variant, and a later unforced select is refused
    assert [(e["what"], e["variant"], e["n"]) for e in read_log(out)] == [("transfer", v, 40) for v in rows]
    with pytest.raises(RunStoreError, match="already been tested"):
        run_select(out, p=4, k=2, model=model)
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
