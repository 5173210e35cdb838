"""The celtk :class:`Model`: a TransformerLens bridge, its tokenizer and its shape facts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from celtk.heads import HeadSet


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
    local_dir: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def hf_model(self) -> Any:
        """The wrapped HF ``*ForCausalLM``; its decoder layers are bridge blocks, so hooks fire."""
        return self.bridge.original_model

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.hf_model.parameters()).dtype

    @property
    def n_total_heads(self) -> int:
        return self.n_layers * self.n_heads

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The weights under their plain HF names (the bridge's wrapper names stripped)."""
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            expected = set(AutoModelForCausalLM.from_config(self.hf_model.config).state_dict())
        out: dict[str, torch.Tensor] = {}
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

    def describe(self) -> dict[str, Any]:
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
