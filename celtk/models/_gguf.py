"""GGUF checkpoints: dequantize once, cache as a safetensors HF directory, reuse."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from celtk.errors import ModelSourceError
from celtk.models._cache import cache_root
from celtk.models._hf import one_line

# GGUF metadata does not carry an HF architecture list; map the GGUF arch to one.
_GGUF_ARCH_TO_HF = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "smollm3": "SmolLM3ForCausalLM",
    "mistral": "MistralForCausalLM",
}


def file_hash(path: Path) -> str:
    """sha256 of a file's bytes (the cache key), 16 hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def _is_complete(directory: Path) -> bool:
    return (directory / "config.json").is_file() and (directory / "model.safetensors").is_file()


def dequantized_dir(gguf_path: Path) -> Path:
    """Return an HF directory holding ``gguf_path`` dequantized to float32; build it on first use.

    The directory is written under a temporary name and renamed into place, so a crash
    never leaves a half-written cache entry that a later load would trust.
    """
    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise ModelSourceError(f"GGUF file {str(gguf_path)!r} does not exist; give the path of a .gguf file.")
    target = cache_root() / "gguf" / f"{gguf_path.stem}-{file_hash(gguf_path)}"
    if _is_complete(target):
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    except OSError as error:
        raise ModelSourceError(f"Cannot use celtk's cache {cache_root()} for the dequantized {gguf_path.name}: "
                               f"{error.strerror}. Set CELTK_CACHE to a writable directory (it holds float32 "
                               "weights, about 4 bytes per parameter).") from None
    try:
        _dequantize_into(gguf_path, scratch)
        os.chmod(scratch, 0o755)
        if _is_complete(target):  # another process (a Slurm array task, a second shell) finished first: keep
            shutil.rmtree(scratch, ignore_errors=True)  # its copy, which that process may be reading now
            return target
        if target.exists():  # an incomplete leftover from an older celtk; replace it
            shutil.rmtree(target)
        os.replace(scratch, target)
    except OSError as error:
        shutil.rmtree(scratch, ignore_errors=True)
        if _is_complete(target):  # another process renamed its copy into place between our check and ours
            return target
        raise ModelSourceError(f"Could not write the dequantized cache for {gguf_path} under {target.parent}: {error}. "
                               "Set CELTK_CACHE to a writable directory with room for the float32 weights.") from None
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return target


def _dequantize_into(gguf_path: Path, out_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

    from_config: Callable[..., PreTrainedModel] = AutoModelForCausalLM.from_config  # transformers leaves it unannotated
    directory, name = str(gguf_path.parent), gguf_path.name
    try:
        loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    except (ValueError, OSError, KeyError, IndexError, EOFError, struct.error) as error:  # struct: a cut-off header
        raise ModelSourceError(f"Could not read GGUF file {gguf_path}: {one_line(error)[:300]}. It is truncated or "
                               "not a GGUF model; copy or download the .gguf file again.") from None
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)  # save_pretrained refuses a model that says it is GGUF-quantized
    if not settings.get("architectures"):
        settings["architectures"] = [_GGUF_ARCH_TO_HF.get(settings["model_type"], type(loaded).__name__)]
    config = type(loaded.config).from_dict(settings)
    # A fresh model built from the clean config, given the dequantized weights, saves fine.
    fresh = from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "celtk_source.txt").write_text(f"dequantized from {gguf_path.name}\n")
