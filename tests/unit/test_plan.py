"""`celtk plan`: shapes and parameter counts from config files alone, the stage estimates, and
the memory model against a measured peak of the cached screener on a tiny model."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from celtk.errors import ConfigError
from celtk.plan import PAPER_TASKS, Device, n_parameters, plan_run, shape_from_config

CONFIGS = Path(__file__).parent.parent.parent / "examples" / "configs"
L40S = Device("l40s", 120e12, 46e9)


@pytest.mark.parametrize("name, billions", [("Llama-3.2-3B-Instruct", 3.21), ("Qwen2.5-3B-Instruct", 3.09),
                                            ("SmolLM3-3B", 3.08)])
def test_config_files_give_the_published_parameter_counts(name, billions):
    shape = shape_from_config(CONFIGS / f"{name}.json")
    assert n_parameters(shape, tied=True) / 1e9 == pytest.approx(billions, rel=0.01)


def test_transformers_config_object_reads_as_its_json():
    import transformers

    config = transformers.LlamaConfig(hidden_size=96, intermediate_size=200, num_hidden_layers=3, num_attention_heads=6,
                                      num_key_value_heads=2, vocab_size=500)
    shape = shape_from_config(config)
    assert shape == shape_from_config(config.to_dict())
    assert (shape.d_head, shape.n_kv_heads, shape.d_ff) == (16, 2, 200)
    with pytest.raises(ConfigError, match="lacks hidden_size"):
        shape_from_config({"num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10})


def test_stage_estimates_scale_as_the_algorithm_does():
    config = CONFIGS / "Llama-3.2-3B-Instruct.json"
    screen, select, test = plan_run(config, PAPER_TASKS["arithmetic"], L40S)
    assert (screen.evaluations, select.evaluations, test.evaluations) == (28 * 24 + 1, 45 + 120, 2)
    assert screen.flops > select.flops > 0 and screen.weight_bytes == pytest.approx(3.21e9 * 2, rel=0.01)
    doubled = plan_run(config, replace(PAPER_TASKS["arithmetic"], n_discovery=4000), L40S)[0]
    assert doubled.flops == pytest.approx(2 * screen.flops, rel=0.01)
    assert screen.seconds == pytest.approx(screen.flops / 120e12)
    # today's held-out stage keeps every held-out batch resident; streaming needs one batch
    hs = PAPER_TASKS["hellaswag"]
    cached, streamed = plan_run(config, hs, L40S)[2], plan_run(config, hs, L40S, test_streams=True)[2]
    assert cached.activation_bytes > 10 * streamed.activation_bytes
    with pytest.raises(ConfigError, match="Unknown dtype"):
        plan_run(config, hs, L40S, dtype="int3")


CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
from conftest import make_tiny
from transformers import AutoTokenizer
from celtk.evaluator import prepare
from celtk.heads import HeadSet
from celtk.models import ALIASES, dequantized_dir
from celtk.plan import cached_stage_bytes, peak_resident_growth, shape_from_config, task_size_of
from celtk.screen import CachedScreener
from celtk.tasks import Example, get_task

tok = AutoTokenizer.from_pretrained(dequantized_dir(ALIASES["smollm2-135m"].locate()))
tok.pad_token = tok.pad_token or tok.eos_token
model = make_tiny("llama", tok, n_layers=2, n_heads=8)
words = "the quick brown fox jumps over a lazy dog and then runs far away ".split()
examples = [Example(id=str(i), context=" ".join(words[(i + j) % len(words)] for j in range(150)) + " Answer:",
                    target=f" {i + 10}") for i in range(32)]
prepared = prepare(model, get_task("arithmetic:2da"), examples)
screener = CachedScreener(model, prepared, batch_size=16, rows_per_pass=128)
_, measured = peak_resident_growth(lambda: screener.run([HeadSet.parse(f"L0H{h}") for h in range(8)]))
predicted = cached_stage_bytes(shape_from_config(model.hf_model.config), task_size_of(prepared), 32, 16, 128, 4)
print(json.dumps([measured, predicted]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the kernel's peak RSS")
def test_predicted_peak_matches_the_measured_one_on_a_tiny_model():
    """The cached screener's measured peak growth (a fresh process, glibc's mmap threshold fixed so
    that RSS follows live tensors) against the plan's activation bytes: 8 ablations × 16 rows of
    ~156 tokens in one pass, where eager attention scores dominate."""
    import json
    import os
    import subprocess

    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(Path(__file__).parent.parent)], env=env, check=True,
                         capture_output=True, text=True)
    measured, predicted = json.loads(out.stdout.strip().splitlines()[-1])
    assert measured > 100e6  # activations dominate the process's own noise
    assert 0.75 * measured <= predicted <= 1.35 * measured, (predicted, measured)
