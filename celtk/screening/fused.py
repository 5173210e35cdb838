"""A fused forward for Llama-family decoder layers: the cached screener's replay without the bridge.

TransformerLens's bridge runs each attention block through its own re-implementation of eager
attention with a dozen hook points per layer, and copies every key/value head once per query head
(``repeat_kv``) before the score product. The screener needs one of those hooks, ``hook_z``, and its
effect, a head's ``z`` zeroed (or replaced: :mod:`celtk.ablation_kinds`) before the output projection, is one
masked fill. A :class:`FusedLayer`
runs a decoder layer from the Hugging Face modules the bridge wraps, calling each of them as the HF
layer does (norms, projections, q/k norms, activation; the decoder's rotary cos/sin through HF's
``apply_rotary_pos_emb``), with the same eager
attention arithmetic (:func:`grouped_attention`: scaled scores, the decoder's own additive mask for
that layer, a float32 softmax) but without the key/value copies, and the ablated heads' ``z``
zeroed (or replaced by the kind's value) per row between attention and the output projection.

Only layers whose HF class is one of :data:`FUSED_LAYERS`, and whose modules are the ones read here,
are fused; every other decoder (Gemma-3, GPT-2, GPT-NeoX, ...) replays through the bridge, and so
does any screen of a model that carries hooks of its own (:func:`has_hooks`). The fused layer's
output equals the bridge block's under celtk's hook_z row masks to float rounding: the grouped score
product may sum in another order than the products over ``repeat_kv`` copies (bit for bit on the
demo's SmolLM2 screen; 4e-6 in log-probability on a tiny planted model). ``tests/integration/test_fused.py``
checks each layer of tiny Llama, Qwen2, SmolLM3, Mistral and Qwen3 models (float32 to 1e-6, and
bfloat16); the screens built on it are checked against :func:`celtk.ablation.ablate` for every head
(``tests/integration/test_pipeline.py``, ``test_architectures.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
from jaxtyping import Bool, Float, Shaped
from torch import Tensor

from celtk.ablation_kinds import RowSpec, as_spec
from celtk.models import Model
from celtk.screening.kv_stand_ins import StandInCache

# HF decoder layers whose forward a FusedLayer reproduces: pre-norm attention and gated MLP, RMSNorm
# ``weight * x̂``, RoPE (``use_rope`` switches it per layer in SmolLM3), optional q/k/v biases (Qwen2)
# and q/k RMSNorms over the head dimension before RoPE (Qwen3).
FUSED_LAYERS = ("LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer",
                "SmolLM3DecoderLayer")
_LAYER_MODULES = ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm")
_ATTN_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP_MODULES = ("gate_proj", "up_proj", "down_proj", "act_fn")
# Attention features a FusedLayer does not reproduce; a layer whose attention has any is not fused.
_UNFUSED_ATTENTION = ("sinks", "attn_logit_softcapping", "q_gate", "rotary_fn")


def _hf(module: Any) -> Any:
    """The HF module inside a bridge component (or the module itself)."""
    return getattr(module, "original_component", None) or module


@dataclass(frozen=True, eq=False)
class FusedLayer:
    """One decoder layer's HF modules, called without the bridge's hooks.

    Attributes:
        index: the layer's index (passed to the KV cache's ``update``).
        modules: ``name -> HF module`` for the norms, projections, optional q/k norms and the MLP.
        n_heads, n_kv_heads, d_head: attention shape; scaling: the score scale HF uses.
        rope: whether the layer applies its rotary embedding (SmolLM3's NoPE layers do not).
    """

    index: int
    modules: dict[str, Any]
    n_heads: int
    n_kv_heads: int
    d_head: int
    scaling: float
    rope: bool

    def __call__(self, hidden: Float[Tensor, "rows pos d_model"], attention_mask: Shaped[Tensor, " ..."] | None,
                 position_embeddings: tuple[Float[Tensor, "cos_rows pos d_head"],
                                            Float[Tensor, "cos_rows pos d_head"]] | None,
                 cache: StandInCache | None = None,
                 head_mask: Bool[Tensor, "rows head_index"] | RowSpec | None = None
                 ) -> Float[Tensor, "rows pos d_model"]:
        """The layer's output on ``hidden`` with the heads ``head_mask`` marks zeroed in each row (a
        :class:`celtk.ablation_kinds.RowSpec`: replaced as its kind says, as the bridge's hook_z hook would).

        ``attention_mask`` is the decoder's additive (or boolean) mask for this layer, broadcastable
        to ``[rows, head_index, pos, keys]`` (its rank checked by :func:`grouped_attention`);
        ``position_embeddings`` the decoder's rotary ``(cos, sin)`` of these positions; ``cache``, when given, is
        asked for the keys and values to attend to, as an HF cache is (``update(k, v, layer_idx)``)."""
        m = self.modules
        rows, pos, _ = hidden.shape
        x = m["input_layernorm"](hidden)
        q = m["q_proj"](x).view(rows, pos, self.n_heads, self.d_head)
        k = m["k_proj"](x).view(rows, pos, self.n_kv_heads, self.d_head)
        v = m["v_proj"](x).view(rows, pos, self.n_kv_heads, self.d_head).transpose(1, 2)
        if "q_norm" in m:
            q, k = m["q_norm"](q), m["k_norm"](k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        if self.rope and position_embeddings is not None:
            from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

            q, k = apply_rotary_pos_emb(q, k, *position_embeddings)
        if cache is not None:
            k, v = cache.update(k, v, self.index)
        z = grouped_attention(q, k, v, attention_mask, self.scaling).transpose(1, 2)  # hook_z's layout
        if head_mask is not None:  # hook_z: replace the ablated heads' z before the output projection
            z = as_spec(head_mask).apply(z)
        hidden = hidden + m["o_proj"](z.reshape(rows, pos, self.n_heads * self.d_head))
        x = m["post_attention_layernorm"](hidden)
        return cast(Tensor, hidden + m["down_proj"](m["act_fn"](m["gate_proj"](x)) * m["up_proj"](x)))


def grouped_attention(q: Float[Tensor, "rows head_index pos d_head"], k: Float[Tensor, "rows kv_head keys d_head"],
                      v: Float[Tensor, "rows kv_head keys d_head"], mask: Shaped[Tensor, " ..."] | None, scaling: float
                      ) -> Float[Tensor, "rows head_index pos d_head"]:
    """Eager attention as HF's and the bridge's (scores scaled after the product, the additive mask,
    a float32 softmax), with each key/value head's query heads stacked along the positions instead
    of the keys and values copied once per query head (``repeat_kv``): query head ``j·G + i`` reads
    key/value head ``j``, so ``[rows, head_index, pos]`` is ``[rows, kv_head, (G pos)]``."""
    rows, heads, pos, d = q.shape
    kv_heads, keys = k.shape[1], k.shape[2]
    group = heads // kv_heads
    scores = torch.matmul(q.reshape(rows, kv_heads, group * pos, d), k.transpose(-2, -1)) * scaling
    if mask is None:  # as the bridge: causal, the last ``pos`` of ``keys`` positions querying
        mask = torch.ones(pos, keys, dtype=torch.bool, device=q.device).tril(keys - pos)[None, None]
    if mask.ndim != 4:
        raise ValueError(f"grouped_attention takes a 4-D attention mask [rows, 1 or head_index, pos, keys], "
                         f"got shape {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        mask = (torch.zeros((), dtype=scores.dtype, device=scores.device)
                .masked_fill(~mask, torch.finfo(scores.dtype).min))
    mask = mask[..., -pos:, :keys].to(scores.dtype)  # [rows or 1, 1 or head_index, pos, keys]
    mask = mask[:, :, None] if mask.shape[1] == 1 else torch.unflatten(mask, 1, (kv_heads, group))
    scores = (scores.view(rows, kv_heads, group, pos, keys) + mask).view(rows, kv_heads, group * pos, keys)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v).view(rows, heads, pos, d)


def _bridge_only_math(layer: Any) -> bool:
    """Whether the bridge computes this layer's attention differently from the HF layer in a way a
    FusedLayer does not follow: Ministral's llama-4 query scale (the bridge applies it from
    ``rope_parameters``), compatibility mode's -inf masks, dropout in training mode."""
    attn = _hf(layer.self_attn)
    rope = getattr(getattr(attn, "config", None), "rope_parameters", None)
    return ((isinstance(rope, dict) and rope.get("llama_4_scaling_beta") is not None)
            or bool(getattr(layer.self_attn, "compatibility_mode", False)) or layer.self_attn.training)


def has_hooks(model: Model) -> bool:
    """Whether any of the bridge's hook points (``hook_z``, ``hook_resid_pre``, ...) carries a hook
    (someone's ``ablate()``, a probe, a patch): those act in the bridge's blocks, which the fused
    replay does not run. Only hook points count: the bridge registers pre-hooks of its own on its
    norm components during its first forward."""
    from transformer_lens.hook_points import HookPoint

    return any(isinstance(m, HookPoint) and (m._forward_hooks or m._forward_pre_hooks) for m in model.bridge.modules())


def fused_layers(model: Model) -> list[FusedLayer] | None:
    """A :class:`FusedLayer` per decoder layer of ``model``, or ``None`` when any layer is not one
    this module reproduces (the screener then replays through the bridge)."""
    layers = []
    for index, block in enumerate(model.arch.blocks):
        layer = _hf(block)
        if type(layer).__name__ not in FUSED_LAYERS or not all(hasattr(layer, n) for n in _LAYER_MODULES):
            return None
        attn, mlp = _hf(layer.self_attn), _hf(layer.mlp)
        if not all(hasattr(attn, n) for n in _ATTN_MODULES) or not all(hasattr(mlp, n) for n in _MLP_MODULES):
            return None
        if any(getattr(attn, n, None) is not None for n in _UNFUSED_ATTENTION) or _bridge_only_math(layer):
            return None
        modules = {n: _hf(getattr(attn, n)) for n in _ATTN_MODULES}
        modules |= {n: _hf(getattr(mlp, n)) for n in _MLP_MODULES}
        modules |= {n: _hf(getattr(layer, n)) for n in ("input_layernorm", "post_attention_layernorm")}
        if getattr(attn, "q_norm", None) is not None:
            modules |= {"q_norm": _hf(attn.q_norm), "k_norm": _hf(attn.k_norm)}
        if not all(isinstance(modules[n], torch.nn.Linear)
                   for n in (*_ATTN_MODULES, "gate_proj", "up_proj", "down_proj")):
            return None
        layers.append(FusedLayer(index, modules, model.n_heads, model.n_kv_heads, model.d_head,
                                 float(getattr(attn, "scaling", model.d_head ** -0.5)),
                                 bool(getattr(attn, "use_rope", True))))
    return layers
