"""Transfer on the planted model: the harmful head L1H2's removal helps a second task it also
hurts and leaves alone one it does not affect; McNemar and Holm in the table are right; the grid
holds distinct comparisons only, and reads the held-out set only after the test."""

import json
from contextlib import nullcontext

import numpy as np
import pytest
import torch
from _support import make_tiny, not_none, planted_config

from celtk.ablation import ablate
from celtk.errors import ConfigError, RunStoreError
from celtk.run import run_screen, run_select, run_test
from celtk.run.transfer import Variant, run_transfer, variant_grid
from celtk.stats import holm, mcnemar_exact
from celtk.store.documents import SelectionDocument, TransferDocument
from celtk.store.heldout import HeldoutLog

CHOICES = (" yes", " no")  # one token each
WORDS = ["north", "south", "water", "fire", "metal", "glass", "tiger", "lemon", "chair", "train", "queen", "ocean"]


def _last_logits(model, ids, heads=None):
    """Next-token logits after each prompt (token ids), one batched forward per length (optionally ablated).

    Returns:
        float [n_prompts, vocab].
    """
    out: list[torch.Tensor | None] = [None] * len(ids)
    for length in {len(i) for i in ids}:
        rows = [j for j, i in enumerate(ids) if len(i) == length]
        with torch.no_grad(), (ablate(model, heads) if heads else nullcontext()):
            logits = model.bridge(torch.tensor([ids[j] for j in rows]))[:, -1]
        for j, row in zip(rows, logits, strict=True):
            out[j] = row
    return torch.stack([not_none(row) for row in out])


def _task(tokenizer, path, prompts, ids, tokens, keep, n=40):
    """A JSONL task of the first ``n`` prompts with ``keep[j]`` whose target, the token ``tokens[j]``,
    tokenises back onto the prompt (so teacher forcing scores exactly that token)."""
    lines = []
    for prompt, i, token, ok in zip(prompts, ids, tokens, keep, strict=True):
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
    with pytest.raises(RunStoreError, match="first look must be its test: run `celtk test"):
        run_transfer(out, None, model, n_boot=10)
    run_test(out, model=model, n_boot=500)
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
    ablated = _last_logits(model, ids, str(selection.heads))[:, choice]
    margin_i, margin_a = intact[:, 0] - intact[:, 1], ablated[:, 0] - ablated[:, 1]
    # jsonl multiple-choice lines are scored after a " " delimiter (lm-eval's), so the choices are written without it
    lines = [{"prompt": p, "choices": [c[1:] for c in CHOICES], "label": int(mi < 0)}
             for p, i, mi, ma in zip(prompts, ids, margin_i.tolist(), margin_a.tolist(), strict=True)
             if mi * ma > 0 and min(abs(mi), abs(ma)) > 1e-2
             and all(model.tokenizer(p + c).input_ids == i + [t] for c, t in zip(CHOICES, choice, strict=True))]
    assert len(lines) >= 40, f"only {len(lines)} prompts qualify for the unaffected task"
    (data / "same.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines[:40]))
    same = f"jsonl:{data / 'same.jsonl'}"
    return model, out, hurt, same


def test_transfer_to_hurt_task_not_to_unaffected_one(selected):
    model, out, hurt, same = selected
    grid = [Variant("original", "original"), Variant("hurt", "task", task=hurt), Variant("same", "task", task=same)]
    seen: list[tuple[str, int, int]] = []
    doc = run_transfer(out, grid, model, n_boot=500, progress=lambda *step: seen.append(step))
    rows = {r.variant: r for r in doc.variants}
    # progress within the passes: each scored variant's batches, the two variants an equal share each
    work = [done for stage, done, total in seen if stage == "transfer work"]
    assert work == sorted(work) and work[0] == 0 and 500 in work and work[-1] == 1000 and len(work) > 6, work
    assert [(d, t) for s, d, t in seen if s == "transfer"] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    assert not_none(rows["original"].gain) > 0 and not_none(rows["original"].mcnemar_p) < 0.05
    assert (not_none(rows["hurt"].gain) > 0 and not_none(rows["hurt"].holm_p) < 0.05
            and not_none(rows["hurt"].gain_ci)[0] > 0)
    assert rows["same"].gain == 0 and rows["same"].mcnemar_p == 1.0 and rows["same"].fixes == rows["same"].damage == 0
    for r in doc.variants:  # the table's p-values follow from its own per-example vectors
        a, b = r.intact_correct.outcomes(), r.ablated_correct.outcomes()
        assert r.n == len(a) == 40
        assert r.mcnemar_p == mcnemar_exact(int((~a & b).sum()), int((a & ~b).sum()))
    assert [r.holm_p for r in doc.variants] == list(holm([r.mcnemar_p for r in doc.variants]))
    # Holm by hand: 3·p(1), max(., 2·p(2)), 1
    p1, p2 = sorted([not_none(rows["original"].mcnemar_p), not_none(rows["hurt"].mcnemar_p)])
    assert sorted([not_none(rows["original"].holm_p), not_none(rows["hurt"].holm_p)]) == pytest.approx(
        [min(1, 3 * p1), min(1, max(3 * p1, 2 * p2))])
    assert rows["same"].holm_p == 1.0
    # each scored variant is a look, logged before it is scored; the original row is the test's own comparison,
    # read from test.json, not a second look at the frozen selection
    looks = [look for look in HeldoutLog(out).looks() if look.what == "transfer"]
    assert [(look.extra["variant"], look.n, look.result) for look in looks][-2:] == [("hurt", 40, "transfer.json"),
                                                                                  ("same", 40, "transfer.json")]
    test = json.loads((out / "test.json").read_text())
    assert rows["original"].from_test and rows["original"].gain == test["gain"]
    assert rows["original"].intact_correct.outcomes().tolist() == [e["intact_correct"] for e in test["examples"]]
    assert rows["original"].mcnemar_p == test["mcnemar_p"] and rows["original"].gain_ci == test["gain_ci"]
    assert {r.data for r in doc.variants} == {"file"}  # jsonl tasks: read from their files
    assert run_select(out, p=4, k=2, model=model) == SelectionDocument.load(out)  # the frozen one, as stored
    with pytest.raises(RunStoreError, match="already been looked at"):
        run_select(out, p=3, k=2, model=model)  # another search after the looks
    assert TransferDocument.load(out) == doc


def test_zero_shot_grid_has_no_duplicate_rows_and_lm_loss_is_paired(selected, tmp_path):
    """The planted run is zero-shot: the default grid's shot seeds have no shots to redraw and its
    zero-shot variant is the original comparison again, so only the original is a row (Holm over one),
    and nothing but that row's test was looked at; shot seeds named on such a run are refused."""
    model, out, _, _ = selected
    text = tmp_path / "plain.txt"
    text.write_text(" ".join(WORDS * 30))
    before = len(HeldoutLog(out).looks())
    seen: list[tuple[str, int, int]] = []
    doc = run_transfer(out, variant_grid("jsonl:x"), model, plain_text=text, n_boot=300,
                       progress=lambda *step: seen.append(step))
    loss_steps = [(done, total) for stage, done, total in seen if stage == "plain-text loss"]
    assert loss_steps == [(d, loss_steps[0][1]) for d in range(1, loss_steps[0][1] + 1)]  # each window, both passes
    assert [r.variant for r in doc.variants] == ["original"] and doc.variants[0].holm_p == doc.variants[0].mcnemar_p
    assert [(d.variant, d.same_as) for d in doc.dropped] == [(f"shots seed={s}", None) for s in range(1, 6)] + [
        ("zero-shot", "original")]
    assert "no shots" in doc.dropped[0].reason and "same model, prompts and held-out examples" in doc.dropped[-1].reason
    assert len(HeldoutLog(out).looks()) == before  # no variant was scored, so no look
    with pytest.raises(ConfigError, match="no shots.*Leave out shot seeds"):
        run_transfer(out, variant_grid("jsonl:x", shot_seeds=[2]), model, n_boot=10)
    loss = doc.lm_loss
    assert loss is not None
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
        run_transfer(out, [Variant("original", "original"), Variant("other", "model", model="other")], model,
                     other_models={"other": other}, n_boot=10)
    with pytest.raises(ConfigError, match="distinct non-negative"):
        variant_grid("arithmetic:2da", shot_seeds=[2, 2])


class _WithBos:
    """The SmolLM2 tokenizer, made to begin every text with BOS (id 1) as Llama's and Gemma's do."""

    bos_token_id = 1

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, text, add_special_tokens=True, **kw):
        from types import SimpleNamespace

        ids = self.inner(text, add_special_tokens=False).input_ids
        return SimpleNamespace(input_ids=([1] if add_special_tokens else []) + ids)


def test_plain_text_windows_begin_with_bos_where_the_tokenizer_adds_one(tiny_llama):
    from dataclasses import replace

    from celtk.run.transfer import bos_id, window_nll

    text = " ".join(WORDS * 4)
    plain = tiny_llama.tokenizer(text, add_special_tokens=False).input_ids
    assert bos_id(tiny_llama.tokenizer) is None  # SmolLM2's tokenizer adds no BOS: a window's first token is context
    sums, counts = window_nll(tiny_llama, text, window=16)
    assert counts.sum() == len(plain) - len(counts)
    model = replace(tiny_llama, tokenizer=_WithBos(tiny_llama.tokenizer))
    assert bos_id(model.tokenizer) == 1
    sums, counts = window_nll(model, text, window=16)
    assert counts.sum() == len(plain)  # every token predicted, each window from BOS
    second = torch.tensor([[1] + plain[16:32]])
    with torch.no_grad():
        logp = torch.log_softmax(tiny_llama.bridge(second)[0, :-1].float(), -1)
    assert sums[1] == pytest.approx(float(-logp.gather(1, second[0, 1:, None]).sum()), rel=1e-5)


def test_a_heldout_size_no_variant_draws_is_refused_by_the_library_as_by_the_cli(selected):
    """``heldout`` sizes what variants of other tasks draw; with only variants of the run's own task (which score the
    frozen held-out set) it cannot apply: run_transfer and Run.transfer refuse it before any work, as the CLI does."""
    from celtk.run import Run
    from celtk.run.transfer import check_heldout_size

    model, out, hurt, _ = selected
    before = HeldoutLog(out).looks()
    for call in (lambda: run_transfer(out, None, model, heldout=3, n_boot=10),
                 lambda: run_transfer(out, variant_grid("jsonl:x", zero_shot=True, chat=True), model, heldout=3),
                 lambda: Run(out, model=model).transfer(heldout=3, n_boot=10)):
        with pytest.raises(ConfigError, match=r"heldout=3 sets how many held-out examples a variant of another task "
                                              r"draws .* scores the run's own held-out set, frozen with the selection "
                                              r"at its size: it cannot apply\. Drop heldout"):
            call()
    assert HeldoutLog(out).looks() == before  # refused before any look
    check_heldout_size([Variant("original", "original"), Variant("hurt", "task", task=hurt)], 3)  # another task
    check_heldout_size(variant_grid("jsonl:x"), None)
    with pytest.raises(ConfigError, match=r"^--heldout 3 sets .* \(--tasks, --subtasks\).* Drop --heldout"):
        check_heldout_size(variant_grid("jsonl:x"), 3, flags=True)  # the CLI's words
