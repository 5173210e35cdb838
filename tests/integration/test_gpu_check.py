"""benchmarks/gpu_check.py, the one command for a CUDA machine, run here at tiny sizes on CPU (``--smoke``)
without network: every section runs and writes its figures, and the exactness it measures holds on CPU
float32 (cached == plain, fused == bridge, the prefix tree == each set alone, bit for bit). Its model
configs are the paper's (examples/configs)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_check
    finally:
        sys.path.pop(0)
    return gpu_check


@pytest.mark.parametrize("name, file",
                         [("llama-3.2-3b", "Llama-3.2-3B-Instruct"), ("qwen2.5-3b", "Qwen2.5-3B-Instruct"),
                          ("smollm3-3b", "SmolLM3-3B")])
def test_the_checks_configs_are_the_papers(name, file):
    written = _script().PAPER_MODELS[name]
    published = json.loads((ROOT / "examples" / "configs" / f"{file}.json").read_text())
    for key, value in written.items():
        assert published[key] == value, (name, key)
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "vocab_size", "tie_word_embeddings"):
        assert key in written


def test_smoke_runs_every_section_offline_and_exactness_holds_on_cpu(tmp_path):
    out = tmp_path / "check.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--smoke", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=900)
    data = json.loads(out.read_text())
    assert done.returncode == 0 and data["errors"] == {} and data["skipped"] == [], (data["errors"],
                                                                                     done.stderr[-2000:])
    assert set(data["sections"]) == {"matmul", "tiny_exactness_float32", "tiny_exactness_bfloat16", "llama-3.2-3b",
                                     "qwen2.5-3b", "smollm3-3b", "llama-3.2-3b-float32"}
    tiny = data["sections"]["tiny_exactness_float32"]
    assert set(tiny) == {"llama", "qwen2", "smollm3", "mistral", "qwen3", "gpt2", "gpt_neox"}
    for arch, result in tiny.items():
        plain = result["cached_vs_plain"]
        assert plain["verdicts_agreeing"] == plain["verdicts"] > 0 and plain["max_abs_logprob_diff"] < 1e-4, arch
        assert result["tree_vs_alone"]["max_abs_logprob_diff"] == 0.0, arch  # same rows' arithmetic on CPU
        assert result["ablations_changing_a_verdict"] > 0, arch  # the verdicts compared are not all the intact ones
        if "fused_vs_bridge" in result:
            assert result["fused_vs_bridge"]["verdicts_agreeing"] == result["fused_vs_bridge"]["verdicts"], arch
    assert {a for a, r in tiny.items() if "fused_vs_bridge" in r} == {"llama", "qwen2", "smollm3", "mistral", "qwen3"}
    for name in ("llama-3.2-3b", "qwen2.5-3b", "smollm3-3b"):
        section = data["sections"][name]
        for shape in ("arithmetic", "boolq"):
            speed = section["speed"][shape]
            assert speed["cached_fused"]["seconds_per_head"] > 0 and speed["naive_hook_loop"]["seconds_per_head"] > 0
            assert speed["reload_per_head"]["seconds_per_head"] > 0 and section["hours"][shape] > 0
        memory = section["memory"]
        assert (memory["predicted_peak_gib"] > memory["predicted_weights_gib"] > 0
                and len(memory["auto_batch_chose"]) == 2)
    assert data["goals"]["fused_equals_bridge_float32"] is True
    assert "| llama-3.2-3b | arithmetic |" in out.with_suffix(".md").read_text()
