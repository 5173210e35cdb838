"""Architectures through TransformerLens: GPT-2, GPT-NeoX (Pythia), Mistral and Qwen3 tiny models
are screened exactly (cached == plain for every head), their hook ablation equals the exported
weight zeroing, unsupported models are refused, a user's own bridge is accepted, and a layer
that ignores the prefix cache is caught."""

import dataclasses

import numpy as np
import pytest
import torch
from _support import MORE_ARCHS, make_tiny, tiny_hf_model

from celtk.ablation import ablate, export_ablated, zero_output_columns
from celtk.errors import ArchitectureError, KVCacheIgnoredError
from celtk.evaluation.prompts import prepare
from celtk.heads import HeadSet, all_heads
from celtk.models import Model, wrap_hf_model
from celtk.screening.cached import CachedScreener
from celtk.screening.plain import screen_plain
from celtk.tasks import get_task, make_splits

PROMPT = "Question: What is 98 plus 45?\nAnswer: 143"


@pytest.fixture(scope="module", params=MORE_ARCHS)
def arch_model(request, smol_tokenizer):
    return make_tiny(request.param, smol_tokenizer)


def _logprobs(result):
    return np.array([e.logprob for e in result.examples])


def test_cached_screener_equals_plain_for_every_head(arch_model):
    task = get_task("arithmetic")
    splits = make_splits(task, 10, 0, fewshot=2, seed=2)  # prompts longer than Mistral's 16-token window
    prepared = prepare(arch_model, task, splits.discovery, splits.shots)
    sets = [HeadSet((h,)) for h in all_heads(arch_model.n_layers, arch_model.n_heads)] + [HeadSet.parse("L0H1,L2H3")]
    intact_p, plain = screen_plain(arch_model, prepared, sets, batch_size=5)
    assert all(np.abs(_logprobs(plain[s]) - _logprobs(intact_p)).max() > 1e-3 for s in sets)  # every ablation bites
    for share in (False, True):
        screener = CachedScreener(arch_model, prepared, batch_size=5, rows_per_pass=15, share_prefix=share)
        assert (screener.prefix_len > 0) == share
        intact_c, cached = screener.run(sets)
        np.testing.assert_allclose(_logprobs(intact_c), _logprobs(intact_p), atol=1e-5)
        for s in sets:
            assert np.array_equal(cached[s].correct, plain[s].correct), s
            np.testing.assert_allclose(_logprobs(cached[s]), _logprobs(plain[s]), atol=1e-5)


def test_hook_equals_exported_weight_zeroing(arch_model, tmp_path):
    from transformers import AutoModelForCausalLM

    heads = HeadSet.parse("L0H1,L1H0,L2H3")
    tokens = arch_model.tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        intact = arch_model.bridge(tokens)
        with ablate(arch_model, heads):
            hooked = arch_model.bridge(tokens)
    assert (hooked - intact).abs().max() > 1e-3
    state = zero_output_columns(arch_model, arch_model.hf_state_dict(), heads)
    weight = state[arch_model.arch.output_weights[1]]
    inputs = weight[:arch_model.d_head] if arch_model.arch.output_transposed else weight[:, :arch_model.d_head]
    assert torch.all(inputs == 0) and weight.abs().sum() > 0  # head 0 of layer 1: its rows (Conv1D) or columns
    out = export_ablated(arch_model, heads, tmp_path / "export")
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        assert (reloaded(tokens).logits - hooked).abs().max().item() <= 1e-5


def test_gpt2_conv1d_is_zeroed_by_rows(smol_tokenizer):
    model = make_tiny("gpt2", smol_tokenizer)
    assert model.arch.output_transposed and model.arch.output_weights[2] == "transformer.h.2.attn.c_proj.weight"
    before = model.hf_state_dict()["transformer.h.2.attn.c_proj.weight"]  # [head_index·d_head, d_model]
    after = zero_output_columns(model, model.hf_state_dict(),
                                HeadSet.parse("L2H1"))["transformer.h.2.attn.c_proj.weight"]
    d = model.d_head
    assert torch.all(after[d:2 * d] == 0) and torch.all(before[d:2 * d] != 0)
    assert torch.equal(after[:d], before[:d]) and torch.equal(after[2 * d:], before[2 * d:])


def test_unsupported_architectures_are_refused_naming_the_supported(smol_tokenizer):
    import transformers as tf

    not_in_transformer_lens = tf.AutoModelForCausalLM.from_config(tf.BioGptConfig(
        vocab_size=len(smol_tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64))
    with pytest.raises(ArchitectureError,
                       match="BioGptForCausalLM.*TransformerLens has no adapter.*tested: .*GPT2LMHeadModel"):
        wrap_hf_model(not_in_transformer_lens, smol_tokenizer, name="tiny-biogpt")
    no_attention = tf.AutoModelForCausalLM.from_config(tf.MambaConfig(
        vocab_size=len(smol_tokenizer), hidden_size=32, num_hidden_layers=1, state_size=4))
    with pytest.raises(ArchitectureError, match="MambaForCausalLM.*tested: .*LlamaForCausalLM"):
        wrap_hf_model(no_attention, smol_tokenizer, name="tiny-mamba")


def test_from_bridge_accepts_a_users_transformer_bridge(smol_tokenizer):
    from transformer_lens.model_bridge import TransformerBridge

    hf = tiny_hf_model("gpt_neox", len(smol_tokenizer))
    hf.config.architectures = [type(hf).__name__]
    bridge = TransformerBridge.boot_transformers("my-pythia", hf_model=hf, tokenizer=smol_tokenizer, device="cpu")
    model = Model.from_bridge(bridge, name="my-pythia")
    assert (model.name, model.architecture, model.n_layers, model.n_heads, model.d_head) == \
        ("my-pythia", "GPTNeoXForCausalLM", 3, 4, 16)
    assert model.arch.cache_keyword == "layer_past" and model.arch.blocks is hf.gpt_neox.layers
    tokens = model.tokenizer(PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        intact = bridge(tokens)
        with ablate(model, "L1H2"):
            assert (bridge(tokens) - intact).abs().max() > 1e-3  # celtk's hooks act on the user's bridge
    with pytest.raises(ArchitectureError, match="needs a TransformerLens TransformerBridge"):
        Model.from_bridge(hf)


def _arithmetic(model):
    task = get_task("arithmetic")
    splits = make_splits(task, 4, 0, fewshot=2, seed=2)
    return prepare(model, task, splits.discovery, splits.shots)


def test_guard_fires_when_layers_take_the_cache_under_another_keyword(tiny_llama, monkeypatch):
    # A future transformers that renames the layer's cache keyword: the layer swallows the old one in **kwargs.
    # The bridge replay passes the cache under that keyword (the fused replay calls the HF modules itself).
    monkeypatch.setattr(tiny_llama, "arch", dataclasses.replace(tiny_llama.arch, cache_keyword="cache"))
    with pytest.raises(KVCacheIgnoredError,
                       match="Decoder layer 0 of LlamaForCausalLM ran without consulting the KV cache.*'cache'"):
        CachedScreener(tiny_llama, _arithmetic(tiny_llama), batch_size=4, replay="bridge").run([HeadSet.parse("L1H0")])


def test_a_layer_ignoring_the_decoders_cache_trips_the_bridge_guard_not_the_fused_scores(tiny_llama, monkeypatch):
    from transformers import DynamicCache

    layer = tiny_llama.arch.blocks[1].original_component  # the HF layer inside the bridge block
    forward = layer.forward

    def ignore_dynamic_cache(*args, **kwargs):  # drops the decoder's own cache, keeps celtk's stand-ins
        if isinstance(kwargs.get("past_key_values"), DynamicCache):
            kwargs["past_key_values"] = None
        return forward(*args, **kwargs)

    sets = [HeadSet.parse("L1H0")]
    clean_intact, clean = CachedScreener(tiny_llama, _arithmetic(tiny_llama), batch_size=4).run(sets)
    monkeypatch.setattr(layer, "forward", ignore_dynamic_cache)
    # the bridge replay runs the decoder's own layers over the shared prefix's cache: the guard names the layer
    with pytest.raises(KVCacheIgnoredError, match="Decoder layer 1 of"):
        CachedScreener(tiny_llama, _arithmetic(tiny_llama), batch_size=4, replay="bridge").run(sets)
    # the fused replay never hands the decoder's layers that cache (its intact pass stops the decoder before layer 0
    # and recomputes every layer itself), so the broken layer cannot drop the prefix from its scores
    screener = CachedScreener(tiny_llama, _arithmetic(tiny_llama), batch_size=4)
    assert screener.replay == "fused" and screener.prefix_len > 0
    intact, results = screener.run(sets)
    assert np.array_equal(_logprobs(intact), _logprobs(clean_intact))
    assert np.array_equal(_logprobs(results[sets[0]]), _logprobs(clean[sets[0]]))
    monkeypatch.undo()
    intact, _ = CachedScreener(tiny_llama, _arithmetic(tiny_llama), batch_size=4, replay="bridge").run(sets)
    assert len(intact.examples) == 4  # the intact layer passes the guard


def test_a_wrong_shape_fails_with_jaxtypings_message(tiny_llama):
    from jaxtyping import TypeCheckError

    from celtk.evaluation.scoring import decoder_hidden, make_batches, score_hidden

    batch = make_batches(_arithmetic(tiny_llama).requests, 4, 0)[0]
    with torch.no_grad():
        hidden = decoder_hidden(tiny_llama, batch.input_ids, batch.attention_mask)
        lp, _ = score_hidden(tiny_llama, hidden, batch)
        assert lp.shape == (4,)
        with pytest.raises(TypeCheckError, match="hidden: Float\\[Tensor, 'rows pos d_model'\\]"):
            score_hidden(tiny_llama, hidden[0], batch)  # one row's [pos, d_model]: the row axis is missing
