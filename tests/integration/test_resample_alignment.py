"""Resample ablation on prompts of different lengths: each example reads its reference unmoved where their prompts
share tokens (the few-shot prefix) and aligned on the last prompt token after that, clamped into the reference's
own part; every engine (the hook path, the cached screener's fused and bridge replays walking the prefix tree, the
shared-prefix held-out passes) applies that rule; where prompt lengths are equal it is the left rule bit for bit;
and with shots redrawn per reference, resample replaces the shot positions too."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from _support import make_tiny, not_none, planted_config, z_alone

from celtk.ablation import ablate, hook_z_hooks
from celtk.ablation_kinds import LAST_TOKEN_RULE, LEFT_RULE, common_prefix
from celtk.errors import ConfigError, TaskError
from celtk.evaluation import evaluate
from celtk.evaluation.prompts import prepare
from celtk.evaluation.results import EvalConfig
from celtk.evaluation.scoring import ablation_for, make_batches, redrawn_shots, reference_sequences, score_hidden
from celtk.evaluation.shared_prefix import prefix_to_share, score_pass
from celtk.heads import HeadSet
from celtk.run import run_ablation_kinds, run_screen, run_select, run_test
from celtk.screening.cached import CachedScreener
from celtk.screening.fused import fused_layers
from celtk.screening.plain import screen_plain
from celtk.store.directory import RunDirectory
from celtk.tasks import get_task, make_splits

SETS = ("L1H2", "L2H3", "L0H1,L1H0,L2H3")


def _lp(result):
    return np.array([e.logprob for e in result.examples])


def _mixed(model, fewshot=2, chat=False):
    """Arithmetic over every subtask: two- to five-digit operands, so prompts differ in length by several tokens."""
    task = get_task("arithmetic")
    splits = make_splits(task, 8, 10, fewshot=fewshot, seed=2)
    return task, splits, prepare(model, task, splits.heldout, splits.shots, chat)


def _z_after(model, layer, heads, ablation, batch, **rows):
    """hook_z of ``layer`` as the output projection reads it (a recorder added after celtk's hook)."""
    seen = {}

    def record(z, hook):
        seen["z"] = z.detach().clone()
        return z

    with torch.no_grad(), ablate(model, heads, ablation, **rows), hook_z_hooks(model, {layer: record}):
        model.arch.decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    return seen["z"]


def _reference_prompt(model, task, example, shots, chat=False):
    """A reference's prompt and teacher-forced sequence (prompt + answer, its last token unread), built by hand."""
    request = prepare(model, task, [example], shots, chat).requests[0]
    return list(request.context), list(request.context + request.continuation)[:-1]


def test_each_row_reads_its_reference_unmoved_in_the_shared_prefix_and_aligned_on_the_last_prompt_token(tiny_llama):
    task, splits, prepared = _mixed(tiny_llama)
    ablation = ablation_for(tiny_llama, "resample", task, splits.discovery, splits.shots, seed=7)
    refs = [_reference_prompt(tiny_llama, task, e, splits.shots) for e in splits.discovery]
    assert [seq for _, seq in refs] == reference_sequences(tiny_llama, task, splits.discovery, splits.shots)
    batch = make_batches(prepared.requests, 10, tiny_llama.tokenizer.pad_token_id)[0]
    contexts = [prepared.requests[r].context for r in batch.request_ids]
    drawn = ablation.assign([e.content_hash for e in splits.heldout])
    rows = drawn[[prepared.requests[r].example for r in batch.request_ids]]
    z = _z_after(tiny_llama, 1, HeadSet.parse("L1H2"), ablation, batch, references=rows, contexts=contexts)
    intact = _z_after(tiny_llama, 1, HeadSet(), None, batch)
    boundary = ablation_for(tiny_llama, "zero", task, splits.discovery, splits.shots, positions="prefix")
    bounds = boundary.boundaries(contexts).tolist()
    seen = {"longer": 0, "shorter": 0, "clamped": 0, "past_end": 0, "not_left": 0}
    for b, r in enumerate(rows.tolist()):
        prompt, sequence = refs[r]
        own, n_own = contexts[b], len(contexts[b])
        n_target, n_ref, n_prompt = int(batch.attention_mask[b].sum()), len(sequence), len(prompt)
        shared = min(common_prefix([own, prompt]), n_own - 1, n_prompt - 1)
        assert shared >= bounds[b]  # the whole few-shot prefix reads unmoved
        at = []
        for p in range(n_target):
            if p < shared:
                at.append(p)
            else:
                aligned = p + n_prompt - n_own
                seen["clamped"] += aligned < shared
                seen["past_end"] += aligned > n_ref - 1
                at.append(min(max(aligned, shared), n_ref - 1))
        assert at[n_own - 1] == n_prompt - 1  # the last prompt token reads the reference's last prompt token
        values = z_alone(tiny_llama, 1, sequence)
        torch.testing.assert_close(z[b, :n_target, 2], values[at, 2], rtol=1e-5, atol=1e-5)
        left = values[[min(p, n_ref - 1) for p in range(n_target)], 2]
        seen["not_left"] += not torch.allclose(z[b, :n_target, 2], left, atol=1e-4)
        torch.testing.assert_close(z[b, :n_target][:, [0, 1, 3]], intact[b, :n_target][:, [0, 1, 3]], rtol=0, atol=0)
        seen["longer"] += n_prompt > n_own
        seen["shorter"] += n_prompt < n_own
    # both directions of the shift, the clamp at both ends, and rows the left rule would have read elsewhere
    assert all(count > 0 for count in seen.values()), seen


def test_resample_on_the_hook_path_needs_each_rows_prompt(tiny_llama):
    task, splits, _ = _mixed(tiny_llama)
    ablation = ablation_for(tiny_llama, "resample", task, splits.discovery, splits.shots, seed=1)
    with pytest.raises(ConfigError, match="aligns each row's own positions on its last prompt token: pass contexts="):
        with ablate(tiny_llama, "L1H2", ablation, references=torch.tensor([0, 1])):
            pass
    with pytest.raises(ConfigError, match="the rows' alignments are needed"):
        ablation.spec(1, torch.ones(1, 4, dtype=torch.bool), torch.tensor([0]), 0, 5)


@pytest.fixture(scope="module", params=("llama", "gpt2"))
def fused_or_bridge(request, smol_tokenizer):
    return make_tiny(request.param, smol_tokenizer)


@pytest.mark.parametrize("reference_shots", ["fixed", "redraw"])
def test_every_engine_equals_the_hook_path_on_prompts_of_different_lengths(fused_or_bridge, reference_shots):
    """The cached screener (fused and bridge replays, prefix tree, with and without the shared prefix) and the
    shared-prefix held-out passes give the plain hook path's scores under aligned resample, with the examples' own
    shots and with shots redrawn per reference (where the prefix shared is cut to the chat template's opening)."""
    model = fused_or_bridge
    chat = reference_shots == "redraw"  # a chat opening every reference shares: the prefix left to share
    task, splits, prepared = _mixed(model, chat=chat)
    assert len({len(r.context) for r in prepared.requests}) > 2
    sets = [HeadSet.parse(s) for s in SETS]
    for positions in ("all", "example") if reference_shots == "fixed" else ("all",):
        ablation = ablation_for(model, "resample", task, splits.discovery, splits.shots, chat, seed=3,
                                positions=positions, reference_shots=reference_shots,
                                exclude=[e.content_hash for e in splits.heldout])
        assert ablation.describe()["alignment"] == LAST_TOKEN_RULE
        intact_p, plain = screen_plain(model, prepared, sets, batch_size=4, ablation=ablation)
        assert all(np.abs(_lp(plain[s]) - _lp(intact_p)).max() > 1e-4 for s in sets)  # the ablations bite
        runs = [("fused", True), ("fused", False), ("bridge", True)] if fused_layers(model) is not None \
            else [("bridge", True), ("bridge", False)]
        for replay, share in runs:
            screener = CachedScreener(model, prepared, batch_size=4, rows_per_pass=8, share_prefix=share,
                                      ablation=ablation, replay=replay)
            assert (screener.prefix_len > 0) == share
            if reference_shots == "redraw" and share:  # the opening, and no further than what it shares
                assert screener.prefix_len <= ablation.reference.common < 40  # type: ignore[union-attr]
            intact_c, cached = screener.run([*sets, HeadSet()])
            np.testing.assert_allclose(_lp(intact_c), _lp(intact_p), atol=1e-5)
            assert np.array_equal(cached[HeadSet()].correct, intact_c.correct)
            for s in sets:
                assert np.array_equal(cached[s].correct, plain[s].correct), (positions, replay, share, s)
                np.testing.assert_allclose(_lp(cached[s]), _lp(plain[s]), atol=1e-5,
                                           err_msg=f"{positions} {replay} {share} {s}")
        for s in sets:
            assert prefix_to_share(model, prepared, s, ablation) > 0
            shared = score_pass(model, prepared, 4, s, ablation)
            whole = score_pass(model, prepared, 4, s, ablation, share_prefix=False)
            assert np.array_equal(shared.correct, plain[s].correct) and np.array_equal(whole.correct, shared.correct)
            np.testing.assert_allclose(_lp(shared), _lp(plain[s]), atol=1e-5)
            np.testing.assert_allclose(_lp(whole), _lp(plain[s]), atol=1e-5)


def test_multiple_choice_passages_of_different_lengths_score_alike_on_every_path(tiny_llama):
    """BoolQ (fixture): passages of different lengths, one shot; the screener and the shared-prefix passes equal the
    hook path."""
    task = get_task("boolq", data_path="tests/fixtures/boolq")
    splits = make_splits(task, 8, 6, fewshot=1, seed=0)
    prepared = prepare(tiny_llama, task, splits.heldout, splits.shots)
    assert len({len(r.context) for r in prepared.requests}) > 2
    ablation = ablation_for(tiny_llama, "resample", task, splits.discovery, splits.shots, seed=0)
    sets = [HeadSet.parse(s) for s in SETS]
    intact_p, plain = screen_plain(tiny_llama, prepared, sets, batch_size=4, ablation=ablation)
    assert np.abs(_lp(plain[sets[0]]) - _lp(intact_p)).max() > 1e-4
    _, cached = CachedScreener(tiny_llama, prepared, batch_size=4, rows_per_pass=8, ablation=ablation).run(sets)
    for s in sets:
        shared = score_pass(tiny_llama, prepared, 4, s, ablation)
        for result in (cached[s], shared):
            assert np.array_equal(result.correct, plain[s].correct)
            np.testing.assert_allclose(_lp(result), _lp(plain[s]), atol=1e-5)


def _left_rule(model, ablation, prepared, heads):
    """Per-example log-probabilities under resample as the left rule reads the references (position ``p`` of a
    row reads its reference's ``min(p, n − 1)``), written here as its own hooks."""
    drawn = ablation.assign([e.content_hash for e in prepared.examples])
    lp = np.zeros(len(prepared.requests))
    for batch in make_batches(prepared.requests, 4, model.tokenizer.pad_token_id):
        refs = drawn[[prepared.requests[r].example for r in batch.request_ids]]

        def hook(layer, hs):
            def replace(z, hook):
                value = ablation.reference.gather(layer, refs, 0, z.shape[1]).to(z.dtype)
                out = z.clone()
                out[:, :, hs] = value[:, :, hs]
                return out
            return replace

        with torch.no_grad(), hook_z_hooks(model, {layer: hook(layer, hs) for layer, hs in heads.by_layer().items()}):
            hidden = model.arch.decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                        use_cache=False).last_hidden_state
            blp, _ = score_hidden(model, hidden, batch)
        lp[batch.request_ids] = blp.numpy()
    return lp


WORDS = ["apple", "river", "stone", "cloud", "music", "table", "green", "seven", "light", "paper", "horse", "dream"]


def _one_length_task(directory):
    """Prompts of six one-token words (every prompt one length), answers of one or two words (references of
    different lengths), and a few-shot pool."""
    rng = np.random.default_rng(1)
    lines = [{"prompt": "Words: " + " ".join(rng.choice(WORDS, size=6)) + "\nAnswer:",
              "target": " " + " ".join(rng.choice(WORDS, size=1 + i % 2)),
              **({"split": "fewshot"} if i < 6 else {})} for i in range(40)]
    path = directory / "words.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return get_task(f"jsonl:{path}")


def test_prompts_of_one_length_read_exactly_what_the_left_rule_reads(tiny_llama, tmp_path):
    task = _one_length_task(tmp_path)
    splits = make_splits(task, 8, 10, fewshot=2, seed=4)
    prepared = prepare(tiny_llama, task, splits.heldout, splits.shots)
    ablation = ablation_for(tiny_llama, "resample", task, splits.discovery, splits.shots, seed=7)
    drawn = ablation.assign([e.content_hash for e in splits.heldout])
    aligns = ablation.alignment(drawn[[r.example for r in prepared.requests]], [r.context for r in prepared.requests])
    assert len({len(r.context) for r in prepared.requests}) == 1 and not aligns[:, 1].any()
    assert ablation.describe()["alignment"] == LEFT_RULE  # the record the left rule always had
    heads = HeadSet.parse("L0H1,L1H2,L2H0")
    left = _left_rule(tiny_llama, ablation, prepared, heads)
    config = EvalConfig(batch_size=4)
    hooked = _lp(evaluate(tiny_llama, task, splits.heldout, splits.shots, heads, config, ablation=ablation))
    assert np.array_equal(hooked, left)
    assert np.abs(left - _lp(evaluate(tiny_llama, task, splits.heldout, splits.shots, config=config))).max() > 1e-3


def test_shots_redrawn_per_reference_replace_the_shot_positions_and_fixed_shots_do_not(tiny_llama):
    task, splits, prepared = _mixed(tiny_llama)
    heads, config = HeadSet.parse("L0H1,L1H2,L2H0"), EvalConfig(batch_size=4)
    heldout = [e.content_hash for e in splits.heldout]
    intact = _lp(evaluate(tiny_llama, task, splits.heldout, splits.shots, config=config))
    fixed, redraw = (ablation_for(tiny_llama, "resample", task, splits.discovery, splits.shots, seed=5,
                                  positions="prefix", reference_shots=shots, exclude=heldout)
                     for shots in ("fixed", "redraw"))
    # at the shot positions fixed shots write each example's own z; redrawn ones another prompt's
    np.testing.assert_allclose(_lp(evaluate(tiny_llama, task, splits.heldout, splits.shots, heads, config,
                                            ablation=fixed)), intact, atol=1e-5)
    assert np.abs(_lp(evaluate(tiny_llama, task, splits.heldout, splits.shots, heads, config, ablation=redraw))
                  - intact).max() > 1e-3
    batch = make_batches(prepared.requests, 10, tiny_llama.tokenizer.pad_token_id)[0]
    contexts = [prepared.requests[r].context for r in batch.request_ids]
    bounds = fixed.boundaries(contexts)
    rows = redraw.assign(heldout)[[prepared.requests[r].example for r in batch.request_ids]]
    before = _z_after(tiny_llama, 0, HeadSet(), None, batch)
    for ablation, moved in ((fixed, False), (redraw, True)):
        z = _z_after(tiny_llama, 0, HeadSet.parse("L0H1"), ablation, batch, references=rows, contexts=contexts,
                     boundaries=bounds)
        prefix = int(bounds.min())
        assert torch.allclose(z[:, :prefix, 1], before[:, :prefix, 1], atol=1e-5) != moved
    assert fixed.describe().get("reference_shots") is None and "reference_shots" in redraw.describe()


def test_redrawn_shots_are_seeded_per_reference_and_never_the_reference_or_a_heldout_example(tiny_llama):
    task, splits, _ = _mixed(tiny_llama, fewshot=3)
    pool = {e.content_hash for e in task.load_pools().fewshot}
    heldout = [e.content_hash for e in splits.heldout]
    drawn = redrawn_shots(task, splits.discovery, 3, seed=4, exclude=heldout)
    assert drawn == redrawn_shots(task, splits.discovery, 3, seed=4, exclude=heldout)
    assert drawn[2:5] == redrawn_shots(task, splits.discovery[2:5], 3, seed=4, exclude=heldout)  # per reference
    assert drawn != redrawn_shots(task, splits.discovery, 3, seed=5, exclude=heldout)
    assert len({tuple(e.id for e in shots) for shots in drawn}) == len(drawn)  # each reference its own shots
    for example, shots in zip(splits.discovery, drawn, strict=True):
        hashes = [e.content_hash for e in shots]
        assert len(set(hashes)) == 3 and set(hashes) <= pool and example.content_hash not in hashes
        assert not set(hashes) & set(heldout)
    boolq = get_task("boolq", data_path="tests/fixtures/boolq")
    few = make_splits(boolq, 8, 6, fewshot=1, seed=0)
    with pytest.raises(TaskError, match="Redrawing 4 shots per reference needs 4 few-shot examples"):
        redrawn_shots(boolq, few.discovery, 4, seed=0)
    with pytest.raises(ConfigError, match="scale:0.5 has none. Use reference_shots='fixed'"):
        ablation_for(tiny_llama, "scale:0.5", task, splits.discovery, splits.shots, reference_shots="redraw")
    with pytest.raises(ConfigError, match="Unknown reference shots 'redrawn'; choose fixed .* or redraw"):
        ablation_for(tiny_llama, "mean", task, splits.discovery, splits.shots, reference_shots="redrawn")


def test_ablations_with_redrawn_reference_shots_record_them_and_replace_the_shots(planted, tmp_path):
    """`celtk ablations --reference-shots redraw` on a tested run with shots: the look and the document record the
    redrawn shots, resample at the prefix now changes outcomes' log-probabilities, and the run's own zero kind and
    the intact model still reproduce the test."""
    model, planted_task = planted
    lines = open(planted_task.removeprefix("jsonl:")).read()
    shots = "".join(json.dumps({"prompt": " ".join(np.random.default_rng(i).choice(WORDS, size=6)),
                                "target": " " + WORDS[i], "split": "fewshot"}) + "\n" for i in range(6))
    (tmp_path / "shots.jsonl").write_text(lines + shots)
    run = tmp_path / "run"
    config = replace(planted_config(f"jsonl:{tmp_path / 'shots.jsonl'}"), fewshot=2)
    run_screen(config, run, model=model)
    run_select(run, p=4, k=2, model=model, force=True)  # shots may leave the model at the floor: freeze anyway
    test = run_test(run, model=model, n_boot=100)
    fixed, redrawn = (run_ablation_kinds(run, model=model, kinds=["zero", "mean", "resample"], alphas=[],
                                         positions=["all", "prefix"], draws=1, n_boot=100, reference_shots=shots)
                      for shots in ("fixed", "redraw"))
    assert "reference_shots" not in fixed.reference and "redrawn per reference" in redrawn.reference["reference_shots"]
    assert RunDirectory(run).looks()[-1].extra["reference_shots"] == "redraw"
    assert "reference_shots" not in RunDirectory(run).looks()[-2].extra
    rows = {r.label: r for r in redrawn.kinds}
    before = {r.label: r for r in fixed.kinds}
    assert rows["zero"].gain == before["zero"].gain == test.gain  # zero needs no reference: unchanged
    assert before["resample @ prefix"].mean_delta_logprob == pytest.approx(0, abs=1e-5)  # the example's own z
    assert abs(not_none(rows["resample @ prefix"].mean_delta_logprob)) > 1e-4  # another prompt's shots
    assert rows["mean"].mean_delta_logprob != before["mean"].mean_delta_logprob  # measured on other sequences
