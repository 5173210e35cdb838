"""Architecture facts, read through the TransformerLens bridge.

A bridge's architecture adapter maps TransformerLens names (``blocks``, ``blocks.{l}.attn.o``,
``ln_final``, ``unembed``) to the module paths of the decoder it wraps: ``model.layers`` and
``self_attn.o_proj`` for Llama, ``transformer.h`` and ``attn.c_proj`` for GPT-2,
``gpt_neox.layers`` and ``attention.dense`` for GPT-NeoX. celtk asks the adapter, so the
screener, the exporter and the probes name no architecture's modules themselves.
"""

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from einops import rearrange
from jaxtyping import Bool, Float
from torch import Tensor

from celtk.errors import ArchitectureError

# Decoders whose cached screen, hook ablation and weight export are checked against the plain
# path by the test suite (tests/integration/test_architectures.py, test_pipeline.py).
TESTED_ARCHITECTURES = (
    "Gemma3ForCausalLM", "GPT2LMHeadModel", "GPTNeoXForCausalLM", "LlamaForCausalLM",
    "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "SmolLM3ForCausalLM",
)
# The keyword under which a decoder layer takes its KV cache, newest transformers spelling first.
CACHE_KEYWORDS = ("past_key_values", "layer_past", "past_key_value", "cache")
# Config fields that rescale logits after the unembedding in ways :meth:`Architecture.logits` does not reproduce.
_UNHANDLED_LOGIT_SCALES = ("logit_scale", "logits_scaling", "output_multiplier_scale")


def supported_architectures() -> list[str]:
    """Causal-LM architectures TransformerLens has an adapter for (celtk accepts those whose
    adapter maps per-head attention); :data:`TESTED_ARCHITECTURES` are checked by tests."""
    from transformer_lens.factories.architecture_adapter_factory import SUPPORTED_ARCHITECTURES

    return sorted(a for a in SUPPORTED_ARCHITECTURES if a.endswith(("ForCausalLM", "LMHeadModel")))


def unsupported(architecture: str, why: str) -> ArchitectureError:
    """The refusal for a model celtk cannot screen, naming what it can."""
    return ArchitectureError(
        f"Architecture {architecture!r} cannot be screened: {why}. celtk screens decoder-only transformers "
        f"through a TransformerLens adapter; tested: {', '.join(TESTED_ARCHITECTURES)} "
        f"(celtk.models.supported_architectures() lists the {len(supported_architectures())} causal LMs "
        "TransformerLens maps).")


@dataclass(frozen=True, eq=False)
class Architecture:
    """Where one loaded decoder keeps what celtk touches (modules are the bridge's, so hooks fire).

    Attributes:
        name: the HF architecture class name, e.g. ``GPT2LMHeadModel``.
        decoder: the stack mapping ``input_ids`` to final-normed residuals (``last_hidden_state``).
        blocks: the decoder layers (TransformerLens ``blocks``).
        final_norm: the norm after the last block (``ln_final``).
        unembed: the output head (``unembed``).
        output_weights: per layer, the HF state-dict name of the attention output projection's weight.
        output_transposed: the projection is a GPT-2 ``Conv1D`` (weight ``[head_index·d_head, d_model]``)
            rather than an ``nn.Linear`` (weight ``[d_model, head_index·d_head]``).
        cache_keyword: the keyword a decoder layer takes its KV cache under.
        layer_parameters: the names of a decoder layer's positional parameters, in order (GPT-2's
            blocks are called with the cache and the mask as positional arguments).
        d_mlp: the MLP's hidden width; gated_mlp: whether it has a gate projection (3 matrices, not 2).
    """

    name: str
    decoder: torch.nn.Module
    blocks: torch.nn.ModuleList
    final_norm: torch.nn.Module
    unembed: torch.nn.Module
    output_weights: tuple[str, ...]
    output_transposed: bool
    cache_keyword: str
    layer_parameters: tuple[str, ...]
    d_mlp: int
    gated_mlp: bool
    logit_softcap: float | None

    def logits(self, hidden: Float[Tensor, "*rows d_model"]) -> Float[Tensor, "*rows d_vocab"]:
        """Logits from final-normed residuals, as the HF head computes them (incl. soft-capping)."""
        logits: Float[Tensor, "*rows d_vocab"] = self.unembed(hidden).float()
        if self.logit_softcap:
            logits = torch.tanh(logits / self.logit_softcap) * self.logit_softcap
        return logits

    @property
    def unembed_weight(self) -> Float[Tensor, "d_vocab d_model"]:
        """The unembedding matrix (the HF head's ``weight``)."""
        # torch types a Module's attributes as Tensor | Module; a linear head's weight is a Tensor
        return (getattr(self.unembed, "original_component", None) or self.unembed).weight  # type: ignore[return-value]

    def layer_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> tuple[Float[Tensor, "batch pos d_model"], dict[str, Any]]:
        """Split one decoder-layer call into its residual input and every other argument by name."""
        if len(args) > len(self.layer_parameters):
            raise ArchitectureError(f"A {self.name} decoder layer was called with {len(args)} positional arguments; "
                                    f"its forward names only {len(self.layer_parameters)}.")
        # fewer positional args than parameters is normal (the rest come by keyword); more was refused above
        named = {**dict(zip(self.layer_parameters, args, strict=False)), **kwargs}
        return named.pop(self.layer_parameters[0]), named

    def zero_head_outputs(self, weight: Float[Tensor, "dim0 dim1"], heads: list[int], d_head: int
                          ) -> Float[Tensor, "dim0 dim1"]:
        """A copy of one layer's output-projection weight with ``heads``' inputs zeroed: columns
        ``h·d_head:(h+1)·d_head`` of an ``nn.Linear``, the same rows of a transposed ``Conv1D``."""
        n_inputs = weight.shape[0] if self.output_transposed else weight.shape[1]
        mask: Bool[Tensor, "head_index d_head"] = torch.zeros(n_inputs // d_head, d_head, dtype=torch.bool)
        mask[heads] = True
        flat = rearrange(mask, "head_index d_head -> (head_index d_head)").to(weight.device)
        return weight.masked_fill(flat[:, None] if self.output_transposed else flat[None, :], 0.0)


def _layer_signature(block: torch.nn.Module, name: str) -> tuple[str, tuple[str, ...]]:
    """The cache keyword and the positional parameter names of the HF layer inside a bridge block."""
    layer = getattr(block, "original_component", block)
    accepted = inspect.signature(type(layer).forward).parameters
    positional = tuple(p.name for p in accepted.values()
                       if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self")
    for keyword in CACHE_KEYWORDS:
        if keyword in accepted:
            return keyword, positional
    raise unsupported(name, f"its decoder layer {type(layer).__name__} takes no KV cache argument "
                            f"({', '.join(CACHE_KEYWORDS)})")


def read_architecture(bridge: Any) -> Architecture:
    """Ask a TransformerLens bridge where its decoder's blocks, attention outputs and final norm are.

    Raises:
        ArchitectureError: the bridge's model has no per-head attention blocks, final norm and
            unembedding inside one decoder stack (encoder-decoders, state-space models...).
    """
    from transformers.pytorch_utils import Conv1D

    hf_model, adapter = bridge.original_model, bridge.adapter
    config = hf_model.config
    name = (getattr(config, "architectures", None) or [type(hf_model).__name__])[0]
    mapping = adapter.component_mapping or {}
    missing = [key for key in ("blocks", "ln_final", "unembed") if key not in mapping]
    if (missing or "attn" not in (mapping["blocks"].submodules or {})
            or "o" not in mapping["blocks"].submodules["attn"].submodules):
        raise unsupported(name, f"its TransformerLens adapter maps no {'/'.join(missing) or 'blocks.attn.o'}")
    blocks_path, norm_path = mapping["blocks"].name, mapping["ln_final"].name
    decoder_path = blocks_path.rpartition(".")[0]
    if not decoder_path or not norm_path.startswith(decoder_path + "."):
        raise unsupported(name, f"its final norm {norm_path} is not inside the decoder stack "
                                f"{decoder_path or '(root)'}")
    for field in _UNHANDLED_LOGIT_SCALES:
        if getattr(config, field, None) not in (None, 1, 1.0):
            raise unsupported(name, f"its config sets {field}, a logit rescaling celtk does not reproduce")
    blocks = adapter.get_remote_component(hf_model, blocks_path)
    outputs = [adapter.translate_transformer_lens_path(f"blocks.{l}.attn.o") for l in range(len(blocks))]
    projection = adapter.get_remote_component(hf_model, outputs[0])
    projection = getattr(projection, "original_component", None) or projection
    if not isinstance(projection, (torch.nn.Linear, Conv1D)):
        raise unsupported(name, f"its attention output projection is a {type(projection).__name__}, not a linear map")
    cfg = bridge.cfg
    cache_keyword, layer_parameters = _layer_signature(blocks[0], name)
    return Architecture(
        name=name,
        decoder=adapter.get_remote_component(hf_model, decoder_path),
        blocks=blocks,
        final_norm=adapter.get_remote_component(hf_model, norm_path),
        unembed=adapter.get_remote_component(hf_model, mapping["unembed"].name),
        output_weights=tuple(f"{path}.weight" for path in outputs),
        output_transposed=isinstance(projection, Conv1D),
        cache_keyword=cache_keyword,
        layer_parameters=layer_parameters,
        d_mlp=int(getattr(cfg, "d_mlp", None) or 4 * cfg.d_model),
        gated_mlp=bool(getattr(cfg, "gated_mlp", False)),
        logit_softcap=getattr(config, "final_logit_softcapping", None),
    )
