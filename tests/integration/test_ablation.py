"""Invariants of the paper's ablation on tiny Llama / Qwen2 / SmolLM3 models."""

import pytest
import torch

from celtk.ablation import ablate, export_ablated, zero_output_columns
from celtk.heads import HeadSet

PROMPT = "Question: What is 98 plus 45?\nAnswer: 143"


def _tokens(model):
    return model.tokenizer(PROMPT, return_tensors="pt").input_ids


def _logits(model, tokens):
    with torch.no_grad():
        return model.bridge(tokens)


def test_empty_set_is_identity(tiny_model):
    tokens = _tokens(tiny_model)
    intact = _logits(tiny_model, tokens)
    with ablate(tiny_model, HeadSet()):
        assert torch.equal(_logits(tiny_model, tokens), intact)


def test_ablation_changes_output_and_is_order_free(tiny_model):
    tokens = _tokens(tiny_model)
    intact = _logits(tiny_model, tokens)
    with ablate(tiny_model, "L0H1,L2H3"):
        a = _logits(tiny_model, tokens)
    with ablate(tiny_model, "L2H3"), ablate(tiny_model, "L0H1"):
        b = _logits(tiny_model, tokens)
    assert (a - intact).abs().max() > 1e-3
    assert torch.allclose(a, b, atol=0, rtol=0)


def test_hook_equals_weight_column_zeroing(tiny_model):
    from transformers import AutoModelForCausalLM

    heads = HeadSet.parse("L0H1,L1H0,L2H3")
    tokens = _tokens(tiny_model)
    with ablate(tiny_model, heads):
        hooked = _logits(tiny_model, tokens)
    plain = AutoModelForCausalLM.from_config(tiny_model.hf_model.config, dtype=torch.float32).eval()
    plain.config._attn_implementation = "eager"
    plain.load_state_dict(zero_output_columns(tiny_model, tiny_model.hf_state_dict(), heads))
    with torch.no_grad():
        weighted = plain(tokens).logits
    assert (hooked - weighted).abs().max().item() <= 1e-5


def test_context_restores_model_even_after_exception(tiny_model):
    tokens = _tokens(tiny_model)
    intact = _logits(tiny_model, tokens)
    with pytest.raises(RuntimeError, match="boom"):
        with ablate(tiny_model, "L1H1"):
            raise RuntimeError("boom")
    assert torch.equal(_logits(tiny_model, tokens), intact)
    with ablate(tiny_model, "L1H1"):
        pass
    assert torch.equal(_logits(tiny_model, tokens), intact)


def test_composes_with_other_hooks(tiny_model):
    tokens = _tokens(tiny_model)
    seen = {}

    def record(z, hook):
        seen["z"] = z.detach().clone()
        return z

    handle = tiny_model.bridge.hook_dict["blocks.1.attn.hook_z"].add_hook(record)
    try:
        with ablate(tiny_model, "L1H2"):
            _logits(tiny_model, tokens)
        assert "z" in seen  # the user's hook still ran inside the ablation
    finally:
        handle.hook.remove()


def test_gqa_only_the_query_head_is_zeroed(tiny_model):
    # 4 query heads share 2 KV heads: heads 0,1 share KV head 0. Ablating head 0 must leave head 1's z intact.
    assert tiny_model.n_kv_heads < tiny_model.n_heads
    tokens = _tokens(tiny_model)
    zs = {}

    def grab(key):
        def hook(z, hook):
            zs[key] = z.detach().clone()
            return z
        return hook

    with torch.no_grad():
        tiny_model.bridge.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z", grab("intact"))])
        with ablate(tiny_model, "L1H0"):
            # our hook runs first (added first), so record the value after ablation in a later hook
            tiny_model.bridge.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z", grab("ablated"))])
    assert torch.equal(zs["ablated"][:, :, 0], torch.zeros_like(zs["ablated"][:, :, 0]))
    assert torch.equal(zs["ablated"][:, :, 1:], zs["intact"][:, :, 1:])


def test_export_reloads_with_plain_transformers(tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    heads = HeadSet.parse("L0H3,L2H0")
    tokens = _tokens(tiny_model)
    with ablate(tiny_model, heads):
        hooked = _logits(tiny_model, tokens)
    out = export_ablated(tiny_model, heads, tmp_path / "export")
    assert (out / "celtk_ablation.json").is_file() and (out / "tokenizer.json").is_file()
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        assert (reloaded(tokens).logits - hooked).abs().max().item() <= 1e-5
    with pytest.raises(Exception, match="already exists"):
        export_ablated(tiny_model, heads, out)


def test_out_of_range_head_rejected(tiny_model):
    from celtk.errors import HeadError

    with pytest.raises(HeadError, match="heads are 0..3"):
        with ablate(tiny_model, "L0H4"):
            pass


def test_local_directory_source_loads_the_export(tiny_llama, tmp_path):
    from celtk.models import load_model

    heads = HeadSet.parse("L1H1")
    tokens = _tokens(tiny_llama)
    with ablate(tiny_llama, heads):
        hooked = _logits(tiny_llama, tokens)
    loaded = load_model(str(export_ablated(tiny_llama, heads, tmp_path / "exp")))
    assert loaded.source == "local" and (loaded.n_layers, loaded.n_heads, loaded.n_kv_heads) == (3, 4, 2)
    assert (_logits(loaded, tokens) - hooked).abs().max().item() <= 1e-5
