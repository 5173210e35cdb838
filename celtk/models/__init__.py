"""Model loading: packaged aliases, GGUF files (cached dequantized), local HF directories, hub ids,
a user's own TransformerLens bridge; and the architecture facts read through that bridge."""

from celtk.models._aliases import ALIASES, DEFAULT_MODEL, Alias, alias_available
from celtk.models._arch import (
    CACHE_KEYWORDS,
    TESTED_ARCHITECTURES,
    Architecture,
    read_architecture,
    supported_architectures,
)
from celtk.models._gguf import cache_root, dequantized_dir
from celtk.models._load import load_model, resolve_device, resolve_dtype, transformer_lens_name, wrap_hf_model
from celtk.models._model import Model

__all__ = [
    "ALIASES", "CACHE_KEYWORDS", "DEFAULT_MODEL", "TESTED_ARCHITECTURES", "Alias", "Architecture", "Model",
    "alias_available", "cache_root", "dequantized_dir", "load_model", "read_architecture", "resolve_device",
    "resolve_dtype", "supported_architectures", "transformer_lens_name", "wrap_hf_model",
]
