"""The fused replay (celtk.fused) against the bridge block it replaces: which decoders it covers,
and, layer by layer on tiny models, the same output as the TransformerLens block run under celtk's
hook_z row masks, on right-padded rows with the decoder's own masks and rotary embeddings."""

from __future__ import annotations

import pytest
import torch
from conftest import make_tiny

from celtk.ablation import ablate_rows
from celtk.errors import ConfigError
from celtk.fused import fused_layers
from celtk.screen import CachedScreener, call_layer, capture_forward

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
    assert [layer.rope for layer in fused_layers(smol)] == [True, False, True]  # its NoPE layer
    with pytest.raises(ConfigError, match="Unknown replay 'sdpa'; choose one of auto, fused, bridge"):
        CachedScreener(smol, _empty(), replay="sdpa")


def _empty():
    from celtk.evaluator import Prepared

    return Prepared([], [], [], "loglikelihood", False)


def test_each_fused_layer_equals_the_bridge_block_under_hook_z_row_masks(fused_model):
    model = fused_model
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
            assert torch.equal(fused[real], bridge[real]), (index, (fused[real] - bridge[real]).abs().max())
            intact = layer(resid[index], kw.get("attention_mask"), kw.get("position_embeddings"))
            assert (intact[0] - fused[0]).abs().max() > 1e-3 and torch.equal(intact[1], fused[1])  # the mask bites, per row
