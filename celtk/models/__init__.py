"""Model loading: packaged aliases, GGUF files (cached dequantized), local HF directories, hub ids."""

from celtk.models._aliases import ALIASES, DEFAULT_MODEL, Alias, alias_available
from celtk.models._gguf import cache_root, dequantized_dir
from celtk.models._load import load_model, resolve_device, resolve_dtype, wrap_hf_model
from celtk.models._model import Model

__all__ = [
    "ALIASES", "DEFAULT_MODEL", "Alias", "Model", "alias_available", "cache_root", "dequantized_dir",
    "load_model", "resolve_device", "resolve_dtype", "wrap_hf_model",
]
