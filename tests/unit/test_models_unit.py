"""Model-source resolution errors that need no model weights."""

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
