"""The celtk :class:`Model`: a TransformerLens bridge, its tokenizer, its shape and architecture facts."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Shaped

from celtk.boundary import check_fields
from celtk.errors import ArchitectureError
from celtk.heads import HeadSet
from celtk.models._arch import Architecture, read_architecture, unsupported
from celtk.registry import annotation_names

if TYPE_CHECKING:  # transformers loads with the model's weights, not with this module
    from transformers import PretrainedConfig, PreTrainedModel

# what the type checks under pytest resolve on first need
__getattr__ = annotation_names(dict.fromkeys(("PretrainedConfig", "PreTrainedModel"), "transformers"))

CONTEXT_KEYS = ("seq_length", "n_positions", "max_position_embeddings", "n_ctx")  # lm-eval's order


@dataclass(eq=False)
class Model:
    """A loaded model.

    Attributes:
        bridge: the TransformerLens ``TransformerBridge`` (hooks: ``blocks.{l}.attn.hook_z``).
        tokenizer: the Hugging Face tokenizer.
        name: the resolved model name (alias, hub id or path) recorded in results.
        source: which kind of source it came from (``alias``, ``gguf``, ``local``, ``hub``).
        architecture: the HF architecture class name, e.g. ``LlamaForCausalLM``.
        n_layers, n_heads, n_kv_heads, d_head, d_model, d_vocab: shape facts.
        arch: where the decoder keeps its blocks, attention outputs and final norm
            (:class:`celtk.models.Architecture`, read through the bridge's adapter).
        local_dir: the HF-format directory the weights were loaded from, when there is one.
    """

    bridge: Any
    tokenizer: Any
    name: str
    source: str
    architecture: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_head: int
    d_model: int
    d_vocab: int
    arch: Architecture
    local_dir: str | None = None
    metadata: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def from_bridge(cls, bridge: Any, *, name: str | None = None, tokenizer: Any = None, source: str = "bridge",
                    local_dir: str | None = None, metadata: dict[str, object] | None = None) -> Model:
        """Wrap a TransformerLens ``TransformerBridge`` a user already has (e.g. from
        ``TransformerBridge.boot_transformers("gpt2")``) as a celtk :class:`Model`.

        Args:
            bridge: a ``TransformerBridge`` over a decoder-only model, weights unprocessed.
            name: the name recorded in results (default: the HF config's ``_name_or_path``).
            tokenizer: the tokenizer to score with (default: the bridge's own).

        Raises:
            ArchitectureError: the bridge wraps no decoder celtk can screen (the message names those it can).

        Example:
            >>> from transformer_lens.model_bridge import TransformerBridge
            >>> model = Model.from_bridge(TransformerBridge.boot_transformers("gpt2"))  # doctest: +SKIP
            >>> model.n_layers, model.n_heads  # doctest: +SKIP
            (12, 12)
        """
        if not hasattr(bridge, "adapter") or not hasattr(bridge, "original_model"):
            raise ArchitectureError(f"Model.from_bridge needs a TransformerLens TransformerBridge, got "
                                    f"{type(bridge).__name__}.")
        if getattr(bridge, "_weights_processed", False):
            raise ArchitectureError("The bridge's weights are processed (fold_ln / center_writing_weights): celtk "
                                    "ablates and exports the original HF weights. Pass a bridge before "
                                    "process_weights().")
        arch = read_architecture(bridge)
        tokenizer = tokenizer if tokenizer is not None else bridge.tokenizer
        if tokenizer is None:
            raise unsupported(arch.name, "the bridge has no tokenizer; pass tokenizer=")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        config, cfg = bridge.original_model.config, bridge.cfg
        return cls(
            bridge=bridge, tokenizer=tokenizer, name=name or getattr(config, "_name_or_path", "") or arch.name,
            source=source, architecture=arch.name, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
            n_kv_heads=getattr(cfg, "n_key_value_heads", None) or cfg.n_heads, d_head=cfg.d_head,
            d_model=cfg.d_model, d_vocab=config.vocab_size, arch=arch, local_dir=local_dir,
            metadata=dict(metadata or {}),
        )

    @property
    def hf_model(self) -> PreTrainedModel:
        """The wrapped HF ``*ForCausalLM``; its decoder layers are bridge blocks, so hooks fire."""
        hf: PreTrainedModel = self.bridge.original_model
        return hf

    @property
    def device(self) -> torch.device:
        device: torch.device = next(self.hf_model.parameters()).device
        return device

    @property
    def dtype(self) -> torch.dtype:
        dtype: torch.dtype = next(self.hf_model.parameters()).dtype
        return dtype

    @property
    def n_total_heads(self) -> int:
        return self.n_layers * self.n_heads

    @property
    def n_ctx(self) -> int | None:
        """The most positions the model reads at once (prompt and continuation together), from its
        config as lm-eval's ``max_length`` reads it (``seq_length``, ``n_positions``,
        ``max_position_embeddings``, ``n_ctx``); ``None`` when the config names none."""
        config = self._hf_config()
        for key in CONTEXT_KEYS:
            value = getattr(config, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    def _hf_config(self) -> PretrainedConfig | None:
        """The HF config, or None for a model without weights (a stand-in wrapping only a tokenizer)."""
        config: PretrainedConfig | None = getattr(getattr(self.bridge, "original_model", None), "config", None)
        return config

    @property
    def n_ctx_source(self) -> str:
        """The config key :attr:`n_ctx` was read from, for messages."""
        config = self._hf_config()
        return next((k for k in CONTEXT_KEYS if isinstance(getattr(config, k, None), int)), "config")

    def hf_state_dict(self) -> dict[str, Shaped[torch.Tensor, ...]]:  # every weight: any shape and dtype
        """The weights under their plain HF names (the bridge's wrapper names stripped)."""
        from transformers import AutoModelForCausalLM

        # transformers leaves from_config unannotated
        from_config: Callable[..., PreTrainedModel] = AutoModelForCausalLM.from_config
        with torch.device("meta"):
            expected = set(from_config(self.hf_model.config).state_dict())
        out: dict[str, Shaped[torch.Tensor, ...]] = {}
        for key, value in self.hf_model.state_dict().items():
            clean = key.replace("._original_component", "").replace("_original_component.", "")
            if clean in expected and clean not in out:
                out[clean] = value
        missing = expected - set(out)
        if missing:
            raise RuntimeError(f"could not map bridge weights back to HF names; missing {sorted(missing)[:5]}")
        return out

    @cached_property
    def weight_hash(self) -> str:
        """A content hash of every weight (HF name, shape, dtype, bytes); 16 hex digits."""
        digest = hashlib.blake2b(digest_size=8)
        for name, tensor in sorted(self.hf_state_dict().items()):
            digest.update(name.encode())
            digest.update(str(tuple(tensor.shape)).encode())
            digest.update(str(tensor.dtype).encode())
            data = tensor.detach().to("cpu").contiguous()
            digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
        return digest.hexdigest()

    def validate_heads(self, heads: HeadSet) -> HeadSet:
        """Raise :class:`celtk.errors.HeadError` unless every head exists in this model."""
        return heads.validate(self.n_layers, self.n_heads)

    def describe(self) -> dict[str, object]:
        """The facts recorded beside every result."""
        return {
            "name": self.name,
            "source": self.source,
            "architecture": self.architecture,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "n_kv_heads": self.n_kv_heads,
            "d_head": self.d_head,
            "dtype": str(self.dtype).removeprefix("torch."),
            "weight_hash": self.weight_hash,
            **self.metadata,
        }
