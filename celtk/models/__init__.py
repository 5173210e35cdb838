"""Model loading: packaged aliases, GGUF files (cached dequantized), local HF directories, hub ids,
a user's own TransformerLens bridge; and the architecture facts read through that bridge.

Names load on first use, so ``celtk.models._aliases`` (the packaged aliases, read by the CLI's checks
before anything heavy) is importable without torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "ALIASES": "_aliases", "DEFAULT_MODEL": "_aliases", "Alias": "_aliases", "alias_available": "_aliases",
    "CACHE_KEYWORDS": "_arch", "TESTED_ARCHITECTURES": "_arch", "Architecture": "_arch",
    "read_architecture": "_arch", "supported_architectures": "_arch",
    "cache_root": "_cache", "dequantized_dir": "_gguf",
    "load_model": "_load", "resolve_device": "_load", "resolve_dtype": "_load", "transformer_lens_name": "_load",
    "wrap_hf_model": "_load",
    "Model": "_model",
}

__all__ = [
    "ALIASES", "CACHE_KEYWORDS", "DEFAULT_MODEL", "TESTED_ARCHITECTURES", "Alias", "Architecture", "Model",
    "alias_available", "cache_root", "dequantized_dir", "load_model", "read_architecture", "resolve_device",
    "resolve_dtype", "supported_architectures", "transformer_lens_name", "wrap_hf_model",
]


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        value = globals()[name] = getattr(importlib.import_module(f"celtk.models.{_EXPORTS[name]}"), name)
        return value
    raise AttributeError(f"module 'celtk.models' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    from celtk.models._aliases import ALIASES, DEFAULT_MODEL, Alias, alias_available
    from celtk.models._arch import (
        CACHE_KEYWORDS,
        TESTED_ARCHITECTURES,
        Architecture,
        read_architecture,
        supported_architectures,
    )
    from celtk.models._cache import cache_root
    from celtk.models._gguf import dequantized_dir
    from celtk.models._load import load_model, resolve_device, resolve_dtype, transformer_lens_name, wrap_hf_model
    from celtk.models._model import Model
