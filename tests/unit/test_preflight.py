"""Mistakes a run can be refused for are refused before torch loads and before any directory is made: a task or
subtask name, a model alias's typo, a path that is no model, and a run directory that recorded other settings
(named with both values and the flags that give the stored ones)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from celtk.errors import ModelSourceError, RunStoreError, TaskError
from celtk.run.config import RunConfig, check_model_name, check_recorded_settings, preflight

PROBE = """
import sys
from celtk.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
except Exception as error:
    print("refused:", error)
print("torch loaded:", "torch" in sys.modules)
"""


def _celtk(*args: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("flags", "message"), [
    (["--task", "arithmetic:2dz"], "Unknown arithmetic subtask '2dz'"),
    (["--task", "boolk"], "Unknown task 'boolk'. Did you mean: 'boolq'"),
    (["--model", "smollm2-136m"], "Did you mean the packaged alias 'smollm2-135m'"),
    (["--model", "/no/such/model.gguf"], "No GGUF file '/no/such/model.gguf'"),
])
def test_a_wrong_name_is_refused_before_torch_loads_and_makes_no_directory(tmp_path, flags, message):
    for verb in ("run", "screen"):
        out = tmp_path / verb / "r"
        shown = _celtk(verb, *flags, "--out", str(out))
        assert message in shown and "torch loaded: False" in shown, shown
        assert not (tmp_path / verb).exists()


def test_another_runs_directory_is_refused_before_torch_loads_naming_the_settings(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({**RunConfig(discovery=100, seed=1).recorded(), "celtk_version": "x"}))
    shown = _celtk("run", "--discovery", "200", "--out", str(out))
    assert "discovery: stored 100, now 200; seed: stored 1, now 0" in shown
    assert "--discovery 100 --seed 1" in shown and "torch loaded: False" in shown
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]


def test_settings_that_cannot_change_a_result_may_differ(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(RunConfig(batch_size=4, p=5, k=2).recorded()))
    check_recorded_settings(tmp_path, RunConfig(batch_size="auto", device="cuda", p=10, k=3))  # nothing refused
    (tmp_path / "config.json").write_text(json.dumps(RunConfig(screen="racing", p=5).recorded()))
    with pytest.raises(RunStoreError, match=r"p: stored 5, now 10.*--p 5"):
        check_recorded_settings(tmp_path, RunConfig(screen="racing", p=10))  # a racing screen raced for its p


def test_the_model_check_leaves_real_sources_to_the_loader(tmp_path):
    check_model_name("gpt2")  # a TransformerLens name
    check_model_name("HuggingFaceTB/SmolLM2-135M-Instruct")  # a hub id
    with pytest.raises(ModelSourceError, match="has no config.json"):
        check_model_name(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    check_model_name(str(tmp_path))
    with pytest.raises(TaskError, match="Unknown task"):
        preflight(RunConfig(task="nope"), Path(tmp_path))
