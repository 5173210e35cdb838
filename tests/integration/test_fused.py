"""The fused replay (celtk.screening.fused) against the bridge block it replaces: which decoders it covers,
and, layer by layer on tiny models, the same output (to float rounding) as the TransformerLens block
run under celtk's hook_z row masks, on right-padded rows with the decoder's own masks and rotary
embeddings; models carrying hooks of their own and layers the bridge computes differently are left
to the bridge."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from _support import make_tiny, not_none, tiny_hf_model

from celtk.ablation import ablate, ablate_rows
from celtk.errors import ConfigError
from celtk.screening.cached import CachedScreener
from celtk.screening.fused import fused_layers
from celtk.screening.layer_replay import call_layer, capture_forward

FUSED = ("llama", "qwen2", "smollm3", "mistral", "qwen3")


@pytest.fixture(scope="module", params=FUSED)
def fused_model(request, smol_tokenizer):
    return make_tiny(request.param, smol_tokenizer)


def test_fused_layers_cover_the_llama_family_and_nothing_else(smol_tokenizer):
    for arch in ("gemma3", "gpt2", "gpt_neox"):
        model = make_tiny(arch, smol_tokenizer)
        assert fused_layers(model) is None, arch
        assert CachedScreener(model, _empty(), replay="auto").replay == "bridge"
        with pytest.raises(ConfigError, match="fused replay does not cover .*replay='bridge'"):
            CachedScreener(model, _empty(), replay="fused")
    smol = make_tiny("smollm3", smol_tokenizer)
    assert [layer.rope for layer in not_none(fused_layers(smol))] == [True, False, True]  # its NoPE layer
    with pytest.raises(ConfigError, match="Unknown replay 'sdpa'; choose one of auto, fused, bridge"):
        CachedScreener(smol, _empty(), replay="sdpa")


def _empty():
    from celtk.evaluation.prompts import Prepared

    return Prepared([], [], [], "loglikelihood", False)


def test_each_fused_layer_equals_the_bridge_block_under_hook_z_row_masks(fused_model):
    _check_layers(fused_model)


def test_fused_layers_equal_the_bridge_blocks_in_bfloat16(smol_tokenizer):
    from celtk.models import wrap_hf_model

    # bfloat16 weights: the float32 softmax is cast back before the value product, as in the bridge
    _check_layers(wrap_hf_model(tiny_hf_model("llama", len(smol_tokenizer)).to(torch.bfloat16), smol_tokenizer,
                                name="tiny-llama-bf16"))


def _check_layers(model):
    layers = fused_layers(model)
    assert layers is not None and CachedScreener(model, _empty()).replay == "fused"
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 500, (3, 20), generator=gen)
    attention = torch.ones_like(ids)
    attention[1, 14:], attention[2, 9:] = 0, 0  # right padding, as the screener's batches
    with torch.no_grad():
        resid, kwargs, _ = capture_forward(model, input_ids=ids, attention_mask=attention, use_cache=False)
        mask = torch.zeros(3, model.n_heads, dtype=torch.bool)
        mask[0, 1], mask[2, [0, 3]] = True, True
        for index, layer in enumerate(layers):
            kw = {k: v for k, v in kwargs[index].items() if k not in ("past_key_values", "use_cache")}
            with ablate_rows(model, index, mask):
                bridge = call_layer(model, index, resid[index], kw, 3, 1, None)
            fused = layer(resid[index], kw.get("attention_mask"), kw.get("position_embeddings"), None, mask)
            real = attention.bool()  # padded positions' outputs are never read
            # rounding only: the grouped score product may sum in another order than repeat_kv's (equal on these shapes)
            tight: dict[str, Any] = dict(rtol=1e-6, atol=1e-6) if fused.dtype == torch.float32 else {}
            torch.testing.assert_close(fused[real], bridge[real], **tight)
            intact = layer(resid[index], kw.get("attention_mask"), kw.get("position_embeddings"))
            # the mask bites, per row
            assert (intact[0] - fused[0]).abs().max() > 1e-3 and torch.equal(intact[1], fused[1])


def test_each_fused_layer_equals_the_bridge_block_under_every_ablation_kind(fused_model):
    from celtk.ablation_kinds import RowSpec

    layers = fused_layers(fused_model)
    assert layers is not None
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 500, (3, 20), generator=gen)
    attention = torch.ones_like(ids)
    attention[2, 11:] = 0
    mask = torch.zeros(3, fused_model.n_heads, dtype=torch.bool)
    mask[0, 1], mask[2, [0, 3]] = True, True
    shape = (fused_model.n_heads, fused_model.d_head)
    specs = {"scale:0.5": RowSpec(mask, scale=0.5), "scale:-1": RowSpec(mask, scale=-1.0),
             "mean": RowSpec(mask, value=torch.randn(*shape, generator=gen)),  # one vector per head
             "resample": RowSpec(mask, value=torch.randn(3, 20, *shape, generator=gen))}  # per row and position
    with torch.no_grad():
        resid, kwargs, _ = capture_forward(fused_model, input_ids=ids, attention_mask=attention, use_cache=False)
        for index, layer in enumerate(layers):
            kw = {k: v for k, v in kwargs[index].items() if k not in ("past_key_values", "use_cache")}
            intact = layer(resid[index], kw.get("attention_mask"), kw.get("position_embeddings"))
            for name, spec in specs.items():
                with ablate_rows(fused_model, index, spec):
                    bridge = call_layer(fused_model, index, resid[index], kw, 3, 1, None)
                fused = layer(resid[index], kw.get("attention_mask"), kw.get("position_embeddings"), None, spec)
                real = attention.bool()
                torch.testing.assert_close(fused[real], bridge[real], rtol=1e-6, atol=1e-6, msg=name)
                assert (intact[0] - fused[0]).abs().max() > 1e-3, name  # the replacement bites, per row
                assert torch.equal(intact[1], fused[1]), name


def test_a_model_carrying_its_own_hooks_replays_through_the_bridge(smol_tokenizer):
    from celtk.evaluation.prompts import prepare
    from celtk.heads import HeadSet
    from celtk.tasks import get_task, make_splits

    model = make_tiny("llama", smol_tokenizer)
    task = get_task("arithmetic")
    splits = make_splits(task, 6, 0, fewshot=2, seed=2)
    prepared = prepare(model, task, splits.discovery, splits.shots)
    with ablate(model, "L2H1"):  # an outer ablation: the intact pass and every replay must see it
        screener = CachedScreener(model, prepared, batch_size=3)
        intact, results = screener.run([HeadSet(), HeadSet.parse("L0H0")])
        assert screener.replay == "bridge"
        assert [e.logprob for e in results[HeadSet()].examples] == [e.logprob for e in intact.examples]
        with pytest.raises(ConfigError, match="carries hooks of its own.*replay='bridge'"):
            CachedScreener(model, prepared, batch_size=3, replay="fused").run([HeadSet()])
    screener = CachedScreener(model, prepared, batch_size=3)  # hooks gone; the bridge's own norm pre-hooks stay
    screener.run([HeadSet()])
    assert screener.replay == "fused"


def test_a_llama4_query_scale_is_left_to_the_bridge(smol_tokenizer):
    import transformers as tf

    from celtk.models import wrap_hf_model

    config = tf.LlamaConfig(vocab_size=len(smol_tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, pad_token_id=0,
                            rope_parameters={"rope_type": "default", "rope_theta": 1e4, "llama_4_scaling_beta": 0.5,
                                             "original_max_position_embeddings": 8})
    model = wrap_hf_model(tf.AutoModelForCausalLM.from_config(config).eval(), smol_tokenizer, name="tiny-llama4-scale")
    assert fused_layers(model) is None  # the bridge scales queries by position; the fused layer would not


def test_a_replay_from_layer_zero_runs_no_decoder_layer_to_get_its_inputs(fused_model, monkeypatch):
    """``capture_inputs`` stops the decoder in layer 0's pre-hook: layer 0's input and every layer's keyword
    arguments are what ``capture_forward`` records after running all layers, no layer's forward runs, and the
    cached screener scores every set to the same bits whichever capture feeds its intact pass."""
    from celtk.evaluation.prompts import prepare
    from celtk.heads import HeadSet, all_heads
    from celtk.screening import layer_replay
    from celtk.screening.layer_replay import capture_inputs, decoder_layers
    from celtk.tasks import get_task, make_splits

    task = get_task("arithmetic")
    splits = make_splits(task, 8, 0, fewshot=2, seed=3)
    prepared = prepare(fused_model, task, splits.discovery, splits.shots)
    ids = torch.tensor([list(prepared.requests[0].context)] * 2)
    mask = torch.ones_like(ids)
    mask[1, -3:] = 0  # a right-padded row: the mask differs by row
    ran: list[int] = []
    handles = [layer.register_forward_hook(lambda *_, i=i: ran.append(i))
               for i, layer in enumerate(decoder_layers(fused_model))]
    try:
        first, kwargs = not_none(capture_inputs(fused_model, input_ids=ids, attention_mask=mask, use_cache=False))
    finally:
        for handle in handles:
            handle.remove()
    assert ran == []
    resid, every, _ = capture_forward(fused_model, input_ids=ids, attention_mask=mask, use_cache=False)
    assert torch.equal(first, resid[0]) and len(kwargs) == len(every) == fused_model.n_layers
    for mine, theirs in zip(kwargs, every, strict=True):
        assert mine.keys() == theirs.keys()
        for key in ("attention_mask", "position_embeddings", "position_ids"):
            a, b = mine.get(key), theirs.get(key)
            assert (a is None) == (b is None), key
            if isinstance(a, tuple) and isinstance(b, tuple):
                assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), key
            elif a is not None:
                assert isinstance(b, torch.Tensor) and torch.equal(a, b), key

    sets = [HeadSet((h,)) for h in all_heads(fused_model.n_layers, fused_model.n_heads)] + [HeadSet()]
    for share in (False, True):
        fast = CachedScreener(fused_model, prepared, batch_size=3, share_prefix=share).run(sets)
        with monkeypatch.context() as patch:  # every layer run by the decoder, as before
            patch.setattr("celtk.screening.cached.capture_inputs", lambda *a, **k: None)
            whole = CachedScreener(fused_model, prepared, batch_size=3, share_prefix=share).run(sets)
        assert [e.logprob for e in fast[0].examples] == [e.logprob for e in whole[0].examples]
        for s in sets:
            assert [e.logprob for e in fast[1][s].examples] == [e.logprob for e in whole[1][s].examples], s
    assert layer_replay.uniform_layers(fused_model)


def test_layers_of_different_attention_types_are_captured_whole(smol_tokenizer):
    """Sliding-window and full layers get different masks, so layer 0's keyword arguments do not stand for every
    layer's: ``capture_inputs`` declines."""
    from celtk.screening.layer_replay import capture_inputs, uniform_layers

    model = make_tiny("gemma3", smol_tokenizer)
    ids = torch.tensor([[5, 6, 7, 8]])
    assert not uniform_layers(model)
    assert capture_inputs(model, input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False) is None
