"""Ablation kinds beyond zeroing (celtk.ablation_kinds): mean, resample and scale:α through the cached
screener equal the plain hook path for every head of every tiny architecture (fused and bridge replays,
with and without the shared prefix); the hook really writes what each kind promises (the per-head mean over every
reference position; α·z; the reference's z, aligned on the last prompt token, is
tests/integration/test_resample_alignment.py's); exported checkpoints equal the hooks
where the architecture allows and are refused where it does not; and planted heads answer the question
the kinds ask."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from _support import MORE_ARCHS, TINY_ARCHS, anti_answer_model, make_tiny, not_none, z_alone

from celtk.ablation import ablate, export_ablated, hook_z_hooks
from celtk.ablation_kinds import Ablation, AblationKind
from celtk.errors import ConfigError
from celtk.evaluation import evaluate
from celtk.evaluation.prompts import prepare
from celtk.evaluation.results import EvalConfig
from celtk.evaluation.scoring import ablation_for, make_batches, reference_sequences
from celtk.heads import HeadSet, all_heads
from celtk.screening.cached import CachedScreener
from celtk.screening.fused import fused_layers
from celtk.screening.plain import screen_plain
from celtk.stats import compare_paired
from celtk.tasks import get_task, make_splits

ARCHS = (*TINY_ARCHS, "gemma3", *MORE_ARCHS)
KINDS = ("mean", "resample", "scale:0.5", "scale:-1.0")
PROMPT = "Question: What is 98 plus 45?\nAnswer: 143"


@pytest.fixture(scope="module", params=ARCHS)
def arch_model(request, smol_tokenizer):
    return make_tiny(request.param, smol_tokenizer)


def _arithmetic(model, fewshot=2):
    task = get_task("arithmetic")
    splits = make_splits(task, 8, 10, fewshot=fewshot, seed=2)  # prompts longer than Mistral's and Gemma's windows
    return task, splits, prepare(model, task, splits.heldout, splits.shots)


def _lp(result):
    return np.array([e.logprob for e in result.examples])


@pytest.mark.parametrize("kind", KINDS)
def test_cached_screener_equals_plain_for_every_kind_and_head(arch_model, kind):
    task, splits, prepared = _arithmetic(arch_model)
    ablation = ablation_for(arch_model, kind, task, splits.discovery, splits.shots, seed=3)
    sets = [HeadSet((h,)) for h in all_heads(arch_model.n_layers, arch_model.n_heads)] + [HeadSet.parse("L0H1,L2H3")]
    intact_p, plain = screen_plain(arch_model, prepared, sets, batch_size=4, ablation=ablation)
    assert all(np.abs(_lp(plain[s]) - _lp(intact_p)).max() > 1e-3 for s in sets)  # every ablation bites
    replay = "fused" if fused_layers(arch_model) is not None else "bridge"  # fused == bridge per layer: test_fused.py
    for share in (False, True):
        screener = CachedScreener(arch_model, prepared, batch_size=4, rows_per_pass=12, share_prefix=share,
                                  ablation=ablation)
        assert (screener.prefix_len > 0) == share and screener.replay == replay
        intact_c, cached = screener.run([*sets, HeadSet()])
        np.testing.assert_allclose(_lp(intact_c), _lp(intact_p), atol=1e-5)
        assert np.array_equal(cached[HeadSet()].correct, intact_c.correct)  # the null ablation under this kind
        for s in sets:
            assert np.array_equal(cached[s].correct, plain[s].correct), (share, s)
            np.testing.assert_allclose(_lp(cached[s]), _lp(plain[s]), atol=1e-5, err_msg=f"{replay} {share} {s}")


def _z_after(model, layer, heads, ablation, batch):
    """hook_z of ``layer`` as the output projection reads it, under ``ablate`` (a recorder added after celtk's hook)."""
    seen = {}

    def record(z, hook):
        seen["z"] = z.detach().clone()
        return z

    with torch.no_grad(), ablate(model, heads, ablation), hook_z_hooks(model, {layer: record}):
        model.arch.decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    return seen["z"]


def test_resample_draws_are_seeded_by_content_never_the_example_itself(tiny_llama):
    task, splits, _ = _arithmetic(tiny_llama)
    ablation = ablation_for(tiny_llama, "resample", task, splits.discovery, splits.shots, seed=1)
    hashes = [e.content_hash for e in splits.discovery]
    drawn = ablation.assign(hashes).tolist()
    assert all(d != i for i, d in enumerate(drawn))  # screening the reference set itself: never its own z
    assert ablation.assign(hashes[::-1]).tolist() == drawn[::-1]  # per example, not per position in a batch
    assert ablation.assign(hashes[2:5]).tolist() == drawn[2:5]  # a racing chunk draws as the whole set
    other = Ablation(ablation.kind, reference=ablation.reference, reference_hashes=ablation.reference_hashes, seed=2)
    assert other.assign(hashes).tolist() != drawn
    with pytest.raises(ConfigError, match="no reference example other than the example itself"):
        Ablation(ablation.kind, reference=ablation.reference, reference_hashes=(hashes[0],)).assign(hashes[:1])
    with pytest.raises(ConfigError, match="pass references="):
        with ablate(tiny_llama, "L1H2", ablation):
            pass


def test_mean_is_each_heads_z_averaged_over_every_reference_position(tiny_llama):
    task, splits, prepared = _arithmetic(tiny_llama)
    ablation = ablation_for(tiny_llama, "mean", task, splits.discovery, splits.shots)
    refs = reference_sequences(tiny_llama, task, splits.discovery, splits.shots)
    assert ablation.reference_positions == sum(len(r) for r in refs)
    assert ablation.means is not None
    for layer in (0, 2):
        stacked = torch.cat([z_alone(tiny_llama, layer, r) for r in refs]).double()
        torch.testing.assert_close(ablation.means[layer].double(), stacked.mean(0), rtol=1e-5, atol=1e-6)
    batch = make_batches(prepared.requests, 5, tiny_llama.tokenizer.pad_token_id)[0]
    z = _z_after(tiny_llama, 2, HeadSet.parse("L2H1,L2H3"), ablation, batch)
    real = batch.attention_mask.bool()
    for h in (1, 3):
        assert torch.equal(z[real][:, h], ablation.means[2, h].expand(int(real.sum()), -1))


def test_scale_one_is_the_intact_model_and_scale_zero_is_zeroing(tiny_llama):
    task, splits, _ = _arithmetic(tiny_llama)
    heads, config = HeadSet.parse("L0H1,L2H2"), EvalConfig(batch_size=4)
    intact = evaluate(tiny_llama, task, splits.heldout, splits.shots, config=config)
    zero = evaluate(tiny_llama, task, splits.heldout, splits.shots, heads, config)
    assert np.array_equal(_lp(evaluate(tiny_llama, task, splits.heldout, splits.shots, heads, config,
                                       ablation="scale:1.0")),
                          _lp(intact))
    assert np.array_equal(_lp(evaluate(tiny_llama, task, splits.heldout, splits.shots, heads, config,
                                       ablation="scale:0.0")),
                          _lp(zero))
    assert not np.allclose(_lp(zero), _lp(intact))


def test_mean_and_resample_need_their_values(tiny_llama):
    with pytest.raises(ConfigError, match="Mean ablation needs each head's mean z.*ablation_for"):
        with ablate(tiny_llama, "L1H2", "mean"):
            pass
    with pytest.raises(ConfigError, match="Resample ablation needs the reference examples' z"):
        Ablation(AblationKind.parse("resample"))


# an output bias, or attention_bias to give one
EXPORTABLE = ("llama", "qwen3", "smollm3", "gemma3", "gpt2", "gpt_neox")


@pytest.mark.parametrize("arch", EXPORTABLE)
def test_exported_mean_and_scale_checkpoints_equal_the_hooks(arch, smol_tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    model = make_tiny(arch, smol_tokenizer)
    task, splits, _ = _arithmetic(model)
    heads = HeadSet.parse("L0H1,L1H0,L2H3")
    tokens = model.tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        intact = model.bridge(tokens)
    for kind in ("mean", "scale:0.5", "scale:-1.0"):
        ablation = ablation_for(model, kind, task, splits.discovery, splits.shots)
        with torch.no_grad(), ablate(model, heads, ablation):
            hooked = model.bridge(tokens)
        assert (hooked - intact).abs().max() > 1e-3
        out = export_ablated(model, heads, tmp_path / kind.replace(":", "_"), ablation)
        reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():
            assert (reloaded(tokens).logits - hooked).abs().max().item() <= 1e-5, kind
        note = json.loads((out / "celtk_ablation.json").read_text())
        assert note["ablation"]["kind"] == str(AblationKind.parse(kind)) and note["ablated_heads"] == heads.names()
        if kind == "mean":
            assert "bias" in note["method"]


@pytest.mark.parametrize("arch", ["mistral", "qwen2"])
def test_mean_export_is_refused_without_an_output_bias_and_resample_always(arch, smol_tokenizer, tmp_path):
    model = make_tiny(arch, smol_tokenizer)
    task, splits, _ = _arithmetic(model)
    mean = ablation_for(model, "mean", task, splits.discovery, splits.shots)
    with pytest.raises(ConfigError, match=f"{model.architecture}'s has none and no setting.*Export zero or scale"):
        export_ablated(model, "L1H2", tmp_path / "mean", mean)
    resample = ablation_for(model, "resample", task, splits.discovery, splits.shots)
    with pytest.raises(ConfigError, match="Resample ablation cannot be exported"):
        export_ablated(model, "L1H2", tmp_path / "resample", resample)
    assert not (tmp_path / "mean").exists() and not (tmp_path / "resample").exists()
    export_ablated(model, "L1H2", tmp_path / "scale", "scale:0.5")  # scaling needs no bias


# ---------------------------------------------------------------------------------------------
# Planted heads: what each kind says about them


def test_a_head_planted_against_each_examples_answer_gains_under_every_kind_with_a_monotone_dose(smol_tokenizer,
                                                                                                 tmp_path):
    model, task, head = anti_answer_model(smol_tokenizer, tmp_path)
    splits = make_splits(task, 60, 100, seed=0, fewshot=0)
    intact = evaluate(model, task, splits.heldout)
    gains = {}
    for kind in ("zero", "mean", "resample", "scale:1.0", "scale:0.75", "scale:0.5", "scale:0.25", "scale:0.0"):
        ablation = ablation_for(model, kind, task, splits.discovery, seed=0)
        result = evaluate(model, task, splits.heldout, heads=head, ablation=ablation)
        gains[kind] = compare_paired(intact.correct, result.correct, n_boot=200)
    assert intact.accuracy < 0.3
    gain = {kind: not_none(c.gain) for kind, c in gains.items()}  # defined: each comparison has examples
    for kind in ("zero", "mean", "resample"):  # a gain under all three kinds
        assert gain[kind] > 0.1 and not_none(gains[kind].mcnemar_p) < 0.01, (kind, gains[kind])
    assert gain["zero"] > gain["mean"] > gain["resample"]  # what each kind keeps of the head
    dose = [gain[f"scale:{a}"] for a in ("1.0", "0.75", "0.5", "0.25", "0.0")]
    # neighbouring doses: zipped with the list shifted by one, which is one shorter
    # monotone: more removed, more gained
    assert dose[0] == 0 and all(a < b for a, b in zip(dose, dose[1:], strict=False)), dose
    assert dose[-1] == gain["zero"]


def test_a_head_that_harms_by_the_size_of_its_output_is_undone_by_zeroing_only(planted):
    """The shared planted head (L1H2's output ×25) harms through the magnitude of its output, which mean and
    resample ablation keep: only zeroing (and scaling down) recovers the task. The kinds disagree, which is
    why the question is worth asking of a real selection."""
    model, name = planted
    task = get_task(name)
    splits = make_splits(task, 40, 40, seed=0, fewshot=0)
    intact = evaluate(model, task, splits.heldout)
    head = HeadSet.parse("L1H2")
    compared = {kind: compare_paired(intact.correct,
                                     evaluate(model, task, splits.heldout, heads=head,
                                              ablation=ablation_for(model, kind, task, splits.discovery)).correct,
                                     n_boot=200)
                for kind in ("zero", "mean", "resample", "scale:0.25")}
    gain = {kind: not_none(c.gain) for kind, c in compared.items()}  # defined: each comparison has examples
    assert gain["zero"] > 0.2 and not_none(compared["zero"].mcnemar_p) < 0.01
    assert gain["mean"] <= 0 and gain["resample"] <= 0
    assert 0 < gain["scale:0.25"] < gain["zero"]


def test_probe_effect_and_next_token_changes_take_a_kind(tiny_llama):
    from celtk import probe

    task, splits, _ = _arithmetic(tiny_llama)
    zero = probe.effect(tiny_llama, task, splits.heldout, splits.shots, "L1H2,L2H0", n_boot=100)
    assert probe.effect(tiny_llama, task, splits.heldout, splits.shots, "L1H2,L2H0", n_boot=100,
                        ablation="scale:0.0").examples == zero.examples
    mean = ablation_for(tiny_llama, "mean", task, splits.discovery, splits.shots)
    meaned = probe.effect(tiny_llama, task, splits.heldout, splits.shots, "L1H2,L2H0", n_boot=100, ablation=mean)
    assert [e.ablated_logprob for e in meaned.examples] != [e.ablated_logprob for e in zero.examples]
    changes = probe.next_token_changes(tiny_llama, PROMPT, "L1H2", ablation="scale:1.0")
    assert all(c.delta == 0 for c in changes)  # α = 1 is the intact model


# ---------------------------------------------------------------------------------------------
# Positions: every kind at all positions, the shared few-shot prefix only, or the example's own only


POSITIONED = ("zero", "mean", "resample", "scale:0.5")


@pytest.fixture(scope="module", params=("llama", "gpt2"))
def fused_or_bridge(request, smol_tokenizer):
    return make_tiny(request.param, smol_tokenizer)


@pytest.mark.parametrize("positions", ["prefix", "example"])
def test_cached_screener_equals_plain_at_prefix_and_example_positions(fused_or_bridge, positions):
    """Every kind at prefix and example positions: the cached screener (shared prefix or not; the fused replay and
    the bridge, walking the prefix tree) gives the plain hook path's scores."""
    model = fused_or_bridge
    task, splits, prepared = _arithmetic(model)
    sets = [HeadSet.parse(s) for s in ("L1H2", "L2H3", "L0H1,L1H0,L2H3")]
    runs = [("fused", True), ("fused", False), ("bridge", True)] if fused_layers(model) is not None \
        else [("bridge", True), ("bridge", False)]
    for kind in POSITIONED:
        ablation = ablation_for(model, kind, task, splits.discovery, splits.shots, seed=3, positions=positions)
        intact_p, plain = screen_plain(model, prepared, sets, batch_size=4, ablation=ablation)
        # every ablation bites, but a last-layer head's prefix positions feed nothing scored, and resample at the
        # prefix writes what every reference shares there (see below)
        if positions == "example":
            assert all(np.abs(_lp(plain[s]) - _lp(intact_p)).max() > 1e-4 for s in sets), kind
        else:
            assert np.array_equal(_lp(plain[HeadSet.parse("L2H3")]), _lp(intact_p))
            if kind != "resample":
                assert np.abs(_lp(plain[sets[0]]) - _lp(intact_p)).max() > 1e-4, kind
        for replay, share in runs:
            screener = CachedScreener(model, prepared, batch_size=4, rows_per_pass=8, share_prefix=share,
                                      ablation=ablation, replay=replay)
            assert (screener.prefix_len > 0) == share
            intact_c, cached = screener.run([*sets, HeadSet()])
            np.testing.assert_allclose(_lp(intact_c), _lp(intact_p), atol=1e-5)
            assert np.array_equal(cached[HeadSet()].correct, intact_c.correct)
            for s in sets:
                assert np.array_equal(cached[s].correct, plain[s].correct), (kind, replay, share, s)
                np.testing.assert_allclose(_lp(cached[s]), _lp(plain[s]), atol=1e-5,
                                           err_msg=f"{kind} {replay} {share} {s}")


def test_positions_replace_z_only_before_or_from_each_rows_boundary(tiny_llama):
    task, splits, prepared = _arithmetic(tiny_llama)
    heads = HeadSet.parse("L1H2")
    batch = make_batches(prepared.requests, 10, tiny_llama.tokenizer.pad_token_id)[0]
    intact = _z_after(tiny_llama, 1, HeadSet(), None, batch)
    prefix = ablation_for(tiny_llama, "zero", task, splits.discovery, splits.shots, positions="prefix")
    example = ablation_for(tiny_llama, "zero", task, splits.discovery, splits.shots, positions="example")
    bounds = prefix.boundaries([prepared.requests[r].context for r in batch.request_ids])
    # the boundary is the shots' text: the same for every example (fixed shots), inside every context
    contexts = [prepared.requests[r].context for r in batch.request_ids]
    assert len(set(bounds.tolist())) == 1 and 0 < int(bounds[0]) < min(len(c) for c in contexts)
    assert int(bounds[0]) >= len(prefix.prefix) - 2  # at most the delimiter's last tokens merge with the example
    cut = int(bounds[0])
    for ablation, zeroed, kept in ((prefix, slice(0, cut), slice(cut, None)),
                                   (example, slice(cut, None), slice(0, cut))):
        seen = {}

        def record(z, hook):
            seen["z"] = z.detach().clone()
            return z

        with torch.no_grad(), ablate(tiny_llama, heads, ablation, boundaries=bounds), \
                hook_z_hooks(tiny_llama, {1: record}):
            tiny_llama.arch.decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
        z = seen["z"]
        assert torch.all(z[:, zeroed, 2] == 0)
        if ablation is prefix:  # later positions read ablated earlier ones only from the next layer on
            assert torch.equal(z[:, kept, 2], intact[:, kept, 2])
        else:
            assert torch.equal(z[:, kept], intact[:, kept])  # nothing before the boundary changes
        assert torch.equal(z[:, :, [0, 1, 3]], intact[:, :, [0, 1, 3]])


def test_resample_at_the_prefix_is_the_intact_model_and_at_the_example_is_resample_everywhere(tiny_llama):
    """Under fixed shots every reference shares the prefix, which each example reads unmoved: resampling there
    writes the example's own z, so the kind replaces only the example's positions, which is what the split shows."""
    task, splits, _ = _arithmetic(tiny_llama)
    heads, config = HeadSet.parse("L0H1,L1H2,L2H0"), EvalConfig(batch_size=4)

    def lp(positions):
        ablation = ablation_for(tiny_llama, "resample", task, splits.discovery, splits.shots, seed=5,
                                positions=positions)
        return _lp(evaluate(tiny_llama, task, splits.heldout, splits.shots, heads, config, ablation=ablation))

    intact = _lp(evaluate(tiny_llama, task, splits.heldout, splits.shots, config=config))
    np.testing.assert_allclose(lp("prefix"), intact, atol=1e-5)
    np.testing.assert_allclose(lp("example"), lp("all"), atol=1e-5)
    assert np.abs(lp("all") - intact).max() > 1e-3
    zero = {p: _lp(evaluate(tiny_llama, task, splits.heldout, splits.shots, heads, config,
                            ablation=ablation_for(tiny_llama, "zero", task, splits.discovery, splits.shots,
                                                  positions=p)))
            for p in ("all", "prefix", "example")}
    assert np.array_equal(zero["all"], _lp(evaluate(tiny_llama, task, splits.heldout, splits.shots, heads, config)))
    assert np.abs(zero["prefix"] - intact).max() > 1e-3 and np.abs(zero["prefix"] - zero["all"]).max() > 1e-3
    assert np.abs(zero["example"] - zero["all"]).max() > 1e-3


def test_all_positions_keep_the_record_and_other_positions_are_refused_where_undefined(tiny_llama, tmp_path):
    task, splits, _ = _arithmetic(tiny_llama)
    everywhere = ablation_for(tiny_llama, "mean", task, splits.discovery, splits.shots)
    assert everywhere.positions == "all" and "positions" not in everywhere.describe()
    zero = ablation_for(tiny_llama, "zero", task, splits.discovery, splits.shots, positions="all")
    assert zero.everywhere and zero.prefix == () and zero.describe() == {"kind": "zero"}
    prefix = ablation_for(tiny_llama, "scale:0.5", task, splits.discovery, splits.shots, positions="prefix")
    assert prefix.describe() == {"kind": "scale:0.5", "positions": "prefix", "prefix_tokens": len(prefix.prefix)}
    with pytest.raises(ConfigError, match="Unknown positions 'shots'; choose all .*prefix .*example"):
        ablation_for(tiny_llama, "zero", task, splits.discovery, splits.shots, positions="shots")
    with pytest.raises(ConfigError, match="at prefix positions replaces z only before each row's prefix boundary"):
        with ablate(tiny_llama, "L1H2", prefix):
            pass
    with pytest.raises(ConfigError, match="at prefix positions cannot be exported"):
        export_ablated(tiny_llama, "L1H2", tmp_path / "scaled", prefix)
    assert not (tmp_path / "scaled").exists()
