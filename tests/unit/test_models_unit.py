"""Model-source resolution errors that need no model weights."""

from pathlib import Path

import pytest

from celtk.errors import ConfigError, HubUnreachableError, ModelSourceError
from celtk.models import load_model, resolve_device, resolve_dtype


def test_hub_id_offline_fails_fast_with_advice(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty local HF cache
    with pytest.raises(HubUnreachableError, match="hub is unreachable.*--model DIR"):
        load_model("Qwen/Qwen2.5-3B-Instruct")


def test_unknown_alias_suggests(tmp_path):
    with pytest.raises(ModelSourceError, match="Did you mean: 'smollm2-135m'"):
        load_model("smollm2")


def test_bad_paths(tmp_path):
    with pytest.raises(ModelSourceError, match="has no config.json"):
        load_model(str(tmp_path))
    with pytest.raises(ModelSourceError, match="does not exist"):
        load_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelSourceError, match="neither an HF model directory nor a .gguf"):
        load_model("./nothing-here")


def test_corrupted_gguf_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CELTK_CACHE", str(tmp_path / "cache"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ModelSourceError, match="Could not read GGUF file"):
        load_model(str(bad))
    assert not any((tmp_path / "cache" / "gguf").glob("bad-*"))  # nothing half-written left behind


def test_dtype_and_device_checks():
    with pytest.raises(ConfigError, match="dtype 'float8' is not supported; use one of float32, bfloat16, float16"):
        resolve_dtype("float8")
    with pytest.raises(ConfigError, match="not available"):
        resolve_device("cuda:7")
    with pytest.raises(ConfigError, match="not a torch device"):
        resolve_device("gpu0")


def test_transformer_lens_model_names_are_hub_ids(monkeypatch, tmp_path):
    from celtk.models import transformer_lens_name

    assert transformer_lens_name("gpt2") == "gpt2" and transformer_lens_name("gpt2-small") == "gpt2"
    assert transformer_lens_name("pythia-70m") == "EleutherAI/pythia-70m"
    assert transformer_lens_name("smollm2") is None
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty local HF cache
    with pytest.raises(HubUnreachableError, match="'gpt2' is not in the local HF cache"):
        load_model("gpt2-small")  # resolved to the hub id, then refused only because the hub is off


def test_a_wrong_shape_is_caught_by_jaxtyping():
    # celtk/evaluation/scoring.py starts with `from __future__ import annotations`; jaxtyping (0.3) + beartype
    # still check it.
    import torch
    from jaxtyping import TypeCheckError

    from celtk.evaluation.scoring import Batch

    ids, scored = torch.zeros(2, 5, dtype=torch.long), torch.zeros(3, dtype=torch.long)
    Batch(ids, torch.ones(2, 5, dtype=torch.long), scored, scored, scored, scored, [0, 1])
    with pytest.raises(TypeCheckError, match="pos=5"):
        Batch(ids, torch.ones(2, 6, dtype=torch.long), scored, scored, scored, scored, [0, 1])


@pytest.mark.parametrize("when", ["before the rename", "at the rename"])
def test_two_processes_dequantizing_at_once_keep_the_first_copy(tmp_path, monkeypatch, when):
    """Two processes that dequantize one GGUF file into a shared cache at once (Slurm array tasks): the one that
    finishes second keeps the copy already in place, which the first may be reading, and leaves no scratch behind."""
    from celtk.models import _gguf

    monkeypatch.setenv("CELTK_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    target = _gguf.cache_root() / "gguf" / f"m-{_gguf.file_hash(gguf)}"

    def finished_by(directory):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text("{}")
        (directory / "model.safetensors").write_bytes(b"weights of " + directory.name.encode())

    def dequantize(path, scratch):
        finished_by(scratch)
        if when == "before the rename":
            finished_by(target)  # the other process renamed its copy into place while this one worked

    real_replace = _gguf.os.replace

    def replace(source, destination):
        if when == "at the rename":
            finished_by(Path(destination))  # ... or in the instant between this one's check and its rename
            raise OSError(39, "Directory not empty")
        real_replace(source, destination)

    monkeypatch.setattr(_gguf, "_dequantize_into", dequantize)
    monkeypatch.setattr(_gguf.os, "replace", replace)
    assert _gguf.dequantized_dir(gguf) == target
    assert (target / "model.safetensors").read_bytes() == f"weights of {target.name}".encode()  # the first copy
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no .partial- scratch left
