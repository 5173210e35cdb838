"""``load_model``: one code path for packaged aliases, GGUF files, local directories and hub ids.

Every source resolves to something ``from_pretrained`` reads (a local HF directory or a
hub id); the HF model is then wrapped in a TransformerLens ``TransformerBridge``.
"""

from __future__ import annotations

import os
import socket
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tqdm import TqdmWarning

from celtk.boundary import public
from celtk.errors import ConfigError, HubUnreachableError, ModelSourceError, suggest
from celtk.models._aliases import ALIASES
from celtk.models._arch import unsupported
from celtk.models._gguf import dequantized_dir
from celtk.models._hf import read_hf_model
from celtk.models._model import Model
from celtk.registry import annotation_names

if TYPE_CHECKING:  # transformers loads when a model is wrapped, not with this module
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__getattr__ = annotation_names(dict.fromkeys(  # what the type checks under pytest resolve on first need
    ("PreTrainedModel", "PreTrainedTokenizerBase"), "transformers"))

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """Map ``"float32"``/``"bfloat16"``/``"float16"`` (or a torch dtype) to a torch dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ConfigError(f"dtype {dtype} is not supported; use one of {', '.join(DTYPES)}.")
        return dtype
    if dtype not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}.")
    return DTYPES[dtype]


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None``/``"auto"`` picks CUDA when present, else CPU; an unavailable device is an error."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"Device {device!r} is not a torch device; use 'cpu', 'cuda', 'cuda:N', 'mps' or "
                          "'auto'.") from None
    if dev.type not in ("cpu", "cuda", "mps") or (dev.type == "cpu" and dev.index not in (None, 0)):
        raise ConfigError(f"Device {device!r} is a torch device celtk cannot run on (it runs models on cpu, cuda "
                          "and mps, where their weights hold numbers); use 'cpu', 'cuda', 'cuda:N', 'mps' or 'auto'.")
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (dev.index is not None and dev.index >= count):
            raise ConfigError(f"Device {device!r} is not available: this machine has {count} CUDA device(s). "
                              "Use device='cpu' (--device cpu).")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"Device {device!r} is not available on this machine. Use device='cpu' (--device cpu).")
    return dev


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").split("://")[-1].split("/")[0]
    host, _, port = endpoint.partition(":")
    try:
        with socket.create_connection((host, int(port or 443)), timeout=timeout):
            return True
    except OSError:
        return False


def _in_hub_cache(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    return isinstance(found, str)


def transformer_lens_name(name: str) -> str | None:
    """The hub id TransformerLens knows a short model name by (``gpt2-small`` → ``gpt2``,
    ``pythia-70m`` → ``EleutherAI/pythia-70m``), or None."""
    try:
        from transformer_lens.supported_models import get_official_model_name

        return get_official_model_name(name)
    except (ImportError, ValueError):
        return None


def check_hub_id(repo_id: str) -> None:
    """Refuse what cannot be a hub model id (``a/b/c``, spaces, ``owner/``) before any lookup."""
    from huggingface_hub.errors import HFValidationError

    # exported by a computed __all__ that mypy cannot read (unused-ignore: plain mypy does not check re-exports)
    from huggingface_hub.utils import validate_repo_id  # type: ignore[attr-defined, unused-ignore]

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise ModelSourceError(f"Model {repo_id!r} is not a hub id, a local path or a packaged alias: a hub id is "
                               "'owner/name' (one slash; letters, digits, '-', '_' and '.'; at most 96 characters), "
                               "e.g. 'HuggingFaceTB/SmolLM2-135M-Instruct'.") from None


def _resolve_source(source: str) -> tuple[str, str, dict[str, object]]:
    """Return (what from_pretrained reads, source kind, metadata)."""
    if source in ALIASES:
        gguf_path = ALIASES[source].locate()
        return str(dequantized_dir(gguf_path)), "alias", {"gguf": gguf_path.name}
    path = Path(source).expanduser()
    if source.endswith(".gguf"):
        return str(dequantized_dir(path)), "gguf", {"gguf": path.name}
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelSourceError(f"Directory {source!r} has no config.json; give an HF model directory "
                                   "(config.json + weights).")
        return str(path), "local", {}
    if path.exists() or source.startswith((".", "/", "~")):
        raise ModelSourceError(f"Model path {source!r} is neither an HF model directory nor a .gguf file.")
    if "/" not in source:
        official = transformer_lens_name(source)
        if official is None:
            raise ModelSourceError(f"Unknown model {source!r}: give a packaged alias, a hub id (owner/name), a "
                                   f"TransformerLens model name (gpt2, pythia-70m), an HF model directory or a .gguf "
                                   f"file.{suggest(source, ALIASES)}")
        source = official
    check_hub_id(source)
    if not _in_hub_cache(source) and not _hub_reachable():
        raise HubUnreachableError(
            f"The Hugging Face hub is unreachable (or HF_HUB_OFFLINE is set) and {source!r} is not in the local HF "
            f"cache. Download it elsewhere (e.g. `huggingface-cli download {source} --local-dir DIR`), copy DIR here "
            "and load it with load_model('DIR') (--model DIR), or use a packaged alias such as 'smollm2-135m'."
        )
    return source, "hub", {}


def _check_weight_files(directory: str, kind: str) -> None:
    """Read every safetensors header (cheap: no tensor data) so a truncated or corrupted
    weight file is named, with the fix, before transformers fails somewhere deeper."""
    from safetensors import safe_open

    for path in sorted(Path(directory).glob("*.safetensors")):
        try:
            with safe_open(str(path), "pt") as handle:
                handle.keys()
        except Exception as error:  # SafetensorError is not an OSError
            if kind in ("alias", "gguf"):
                fix = f"It is celtk's dequantized cache: delete {directory} and celtk rebuilds it on the next load."
            else:
                fix = "Copy or download the checkpoint again."
            raise ModelSourceError(f"Weight file {path} is corrupted or truncated ({error}). {fix}") from None


@public
def load_model(
    source: str | Path,
    *,
    device: str | torch.device | None = "cpu",
    dtype: str | torch.dtype = "float32",
) -> Model:
    """Load a model and wrap it in a TransformerLens bridge.

    Args:
        source: a packaged alias (``smollm2-135m``, ``gemma3-270m``), a ``.gguf`` path,
            an HF model directory, a hub id such as ``Qwen/Qwen2.5-3B-Instruct``, or a
            TransformerLens model name such as ``gpt2`` or ``pythia-70m`` (fetched from the hub); a
            path may be a ``pathlib.Path``.
        device: ``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto``.
        dtype: ``float32`` (default), ``bfloat16`` or ``float16``; recorded in results.

    Returns:
        A :class:`Model` in eval mode.

    Example:
        >>> model = load_model("smollm2-135m")  # doctest: +SKIP
        >>> model.n_layers, model.n_heads
        (30, 9)
    """
    source = os.fspath(source)
    torch_dtype = resolve_dtype(dtype)
    torch_device = resolve_device(device)
    target, kind, metadata = _resolve_source(source)
    if kind != "hub":
        _check_weight_files(target, kind)
    with quiet_transformers():
        hf_model, tokenizer = read_hf_model(target, source, torch_dtype)
        return wrap_hf_model(hf_model, tokenizer, name=source, source=kind, device=torch_device,
                             local_dir=target if kind != "hub" else None, metadata=metadata)


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' own progress bars ("Loading weights: 272/272") off, and tqdm's notebook warning ("IProgress not
    found", when transformers first imports tqdm.auto in a kernel without ipywidgets) ignored, inside a load only:
    celtk reports its own progress, and a notebook cell shows nothing else. The caller's setting comes back after."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)
        from transformers.utils import logging as hf_logging  # transformers, as every load does

        # the two switches, which transformers leaves unannotated
        bars_off: Callable[[], None] = hf_logging.disable_progress_bar
        bars_on: Callable[[], None] = hf_logging.enable_progress_bar
        enabled = hf_logging.is_progress_bar_enabled()
        bars_off()
        try:
            yield
        finally:
            if enabled:
                bars_on()


def wrap_hf_model(
    hf_model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    *,
    name: str,
    source: str = "memory",
    device: torch.device | str = "cpu",
    local_dir: str | None = None,
    metadata: dict[str, object] | None = None,
) -> Model:
    """Wrap an HF causal LM already in memory (e.g. a tiny test model) as a celtk :class:`Model`.

    Raises:
        ArchitectureError: TransformerLens has no adapter for the model, or it is not a decoder
            celtk can screen; the message names the architectures that are.
    """
    from transformer_lens.model_bridge import TransformerBridge

    config = hf_model.config
    if not config.architectures:
        config.architectures = [type(hf_model).__name__]
    # transformers wraps PreTrainedModel.to in functools.wraps(Module.to), which mypy reads as the unbound method
    hf_model = hf_model.to(device).eval()  # type: ignore[arg-type]
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:
        bridge = TransformerBridge.boot_transformers(name, hf_model=hf_model, tokenizer=tokenizer, device=device,
                                                     dtype=next(hf_model.parameters()).dtype)
    except ValueError as error:
        if "supported architecture" not in str(error) and "Unsupported architecture" not in str(error):
            raise
        raise unsupported(config.architectures[0], "TransformerLens has no adapter for it") from None
    bridge.eval()
    # Score with the caller's tokenizer: the bridge configures a copy of its own (BOS, padding side).
    return Model.from_bridge(bridge, name=name, tokenizer=tokenizer, source=source, local_dir=local_dir,
                             metadata=metadata)
