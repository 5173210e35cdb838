"""Inputs bounded by the model and the machine before any work: what the refusals
cost, and that a refused run leaves nothing behind. The messages themselves are cases of
tests/integration/test_errors.py (family "bounds from the model and the machine")."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# One 10,000-token prompt on the tiny Llama (512 positions), through the screen stage. Before the bound the
# screen ran it: the eager attention of one layer alone is 4 heads x 10,000^2 floats per row.
_SCRIPT = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1] + "/tests")
from _support import make_tiny
from transformers import AutoTokenizer
from celtk.models import ALIASES, dequantized_dir
from celtk.run import RunConfig, run_screen
from celtk.errors import CeltkError
import torch

forwards = []  # every module call in the process after this line: a forward pass of any layer would land here
torch.nn.modules.module.register_module_forward_pre_hook(lambda module, args: forwards.append(type(module).__name__))

tokenizer = AutoTokenizer.from_pretrained(dequantized_dir(ALIASES["smollm2-135m"].locate()))
tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
model = make_tiny("llama", tokenizer)
task = sys.argv[2]
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
try:
    run_screen(RunConfig(model="tiny", task=task, discovery=1, heldout=1, fewshot=0), sys.argv[3], model=model)
    error = None
except CeltkError as caught:
    error = f"{type(caught).__name__}: {caught}"
seconds = time.perf_counter() - started
print(json.dumps({"error": error, "seconds": seconds,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "before_mb": before / 1024, "n_ctx": model.n_ctx, "module_calls": len(forwards)}))
"""


def _cap_memory() -> None:  # so that code without the bound fails here instead of taking the machine
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


def test_a_10000_token_prompt_is_refused_before_any_forward_pass_and_adds_no_memory(tmp_path):
    """Without the bound, one layer's eager attention on this prompt is 4 x 10,000^2 floats (1.6 GB); with
    it, the refusal comes after tokenising and before any module runs. Stated as counts and a memory
    difference, not a wall-clock bound: the process's own footprint (torch, transformers) varies by
    version and machine, and timings by load."""
    rows = [{"id": f"long-{i}", "prompt": " ".join(["stone"] * 10_000) + f" {i} is", "target": " 1"} for i in range(2)]
    data = tmp_path / "long.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", _SCRIPT, str(ROOT), f"jsonl:{data}", str(out)], capture_output=True,
                         text=True, env=env, preexec_fn=_cap_memory, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["n_ctx"] == 512
    assert result["error"] is not None and result["error"].startswith("TaskError: Example long-"), result
    assert "10,0" in result["error"] and "reads at most 512" in result["error"]
    assert result["module_calls"] == 0, result  # no forward pass of any module, not even the embedding
    assert result["maxrss_mb"] - result["before_mb"] < 256, result  # the refusal itself: far below one layer's 1.6 GB
    assert not (out / "screen.json").exists() and not (out / "fingerprint.json").exists()


def test_the_memory_check_names_a_batch_size_that_the_estimate_fits(tiny_llama, tmp_path, monkeypatch):
    """On a machine whose free memory holds plain passes of batch size 8 but the cached screener only at
    batch size 7, batch size 8 is refused before any pass, naming 7; batch size 7 then runs the screen."""
    import celtk.evaluation.memory
    from celtk.errors import ConfigError
    from celtk.evaluation.memory import stage_bytes
    from celtk.evaluation.prompts import prepare
    from celtk.run import RunConfig, run_screen
    from celtk.tasks import get_task, make_splits

    rows = [{"prompt": f"{i} plus 1 is", "target": f" {i + 1}"} for i in range(30)]
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = get_task(f"jsonl:{data}")
    prepared = prepare(tiny_llama, task, make_splits(task, 10, 10, seed=0, fewshot=0).discovery)
    cached = {b: stage_bytes(tiny_llama, prepared, b, 64) for b in (7, 8)}  # the screener runs max(64, batch) rows
    plain = stage_bytes(tiny_llama, prepared, 8, cached=False)
    free = int((plain + cached[8]) / 2)
    assert cached[7] <= free < cached[8] and plain <= free
    monkeypatch.setattr(celtk.evaluation.memory, "available_memory", lambda device: free)
    config = RunConfig(model="tiny", task=f"jsonl:{data}", discovery=10, heldout=10, fewshot=0, batch_size=8)
    with pytest.raises(ConfigError,
                       match=r"The cached screener on 10 examples needs about .* at batch size 8 \(64 rows "
                                          r"per pass\).* batch size 7 would fit"):
        run_screen(config, tmp_path / "big", model=tiny_llama)
    assert not (tmp_path / "big" / "screen.json").exists()
    document = run_screen(RunConfig(**{**config.__dict__, "batch_size": 7}), tmp_path / "small", model=tiny_llama)
    assert len(document.heads) == tiny_llama.n_total_heads


def test_an_attribute_probe_longer_than_the_context_is_refused(tiny_llama):
    """The probe runs its random tokens twice: a length past half the context is named, not run."""
    from celtk.circuits import head_attribute_scores
    from celtk.errors import ConfigError

    half = tiny_llama.n_ctx // 2
    with pytest.raises(ConfigError, match=rf"runs {2 * (half + 1)} tokens .* context of {tiny_llama.n_ctx} .*"
                                          rf"give length ≤ {half}"):
        head_attribute_scores(tiny_llama, length=half + 1, batch=1)
    with pytest.raises(ConfigError, match="probe's length must be a positive integer"):
        head_attribute_scores(tiny_llama, length=0)
    assert head_attribute_scores(tiny_llama, length=4, batch=1)["induction"].shape == (3, 4)
