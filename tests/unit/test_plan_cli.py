"""`celtk plan` speaks `celtk run`'s words: --device and --dtype mean and default to what they do there (the GPU to
plan for is --gpu), --config is a run's settings file (a model's config.json is --model-config), GPT-2 style
config.json files are read, and a prompt longer than the context window is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from celtk.cli import main
from celtk.errors import ConfigError
from celtk.planning.plan import PAPER_TASKS, Device, context_window, n_parameters, plan_run, shape_from_config

CONFIGS = Path(__file__).parent.parent.parent / "examples" / "configs"
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 12, "n_head": 12, "n_embd": 768,
        "n_positions": 1024, "n_inner": None, "vocab_size": 50257}


@pytest.fixture
def gpt2(tmp_path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT2))
    return path


def plan(*args: str):
    result = CliRunner().invoke(main, ["plan", *args])
    shown = result.output + (result.stderr if result.stderr_bytes is not None else "")
    return result.exit_code, " ".join(shown.split())  # as read, whatever the width rich wrapped a long path at


def test_a_gpt2_config_reads_as_gpt2_small(gpt2):
    shape = shape_from_config(gpt2)
    assert (shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.d_model, shape.d_ff) == (12, 12, 12, 768, 3072)
    assert not shape.gated_mlp and context_window(gpt2) == 1024
    assert n_parameters(shape, tied=True) / 1e6 == pytest.approx(124.4 - 0.8, rel=0.01)  # GPT-2 small less wpe
    screen, _, _ = plan_run(gpt2, PAPER_TASKS["arithmetic"], Device("l40s", 120e12, 46e9))
    assert screen.evaluations == 12 * 12 + 1


def test_a_prompt_beyond_the_context_window_is_refused(gpt2):
    with pytest.raises(ConfigError, match=r"1100 prompt tokens .* plus 1 answer tokens = 1101 tokens, exceeds the "
                                          r"model's context window of 1024 tokens"):
        plan_run(gpt2, PAPER_TASKS["boolq"].__class__(**{**vars(PAPER_TASKS["boolq"]), "prompt_tokens": 1100}),
                 Device("l40s", 120e12, 46e9))
    code, shown = plan("--model-config", str(gpt2), "--task", "boolq")  # BoolQ's 800 tokens and 3 shots of ~151
    assert code == 1 and "exceeds the model's context window of 1024 tokens" in shown and "--fewshot" in shown
    code, shown = plan("--model-config", str(gpt2), "--task", "boolq", "--fewshot", "0")
    assert code == 0 and "screen" in shown, shown


def test_device_and_dtype_mean_what_they_mean_on_run(gpt2):
    code, shown = plan("--model-config", str(gpt2))  # run's defaults: cpu, float32, batch 32, 200/500, 3 shots
    assert code == 0 and "cpu (this machine)" in shown and "float32" in shown and "batch 32" in shown, shown
    assert "(200/500, 3 shots)" in shown and "no time without --device-flops" in shown
    code, shown = plan("--model-config", str(gpt2), "--device", "cuda", "--gpu", "h100", "--dtype", "bfloat16")
    assert code == 0 and "h100 (300.00 TFLOP/s, 80 GB)" in shown and "bfloat16" in shown, shown
    code, shown = plan("--model-config", str(gpt2), "--device", "l40s")  # the old meaning: a GPU model
    assert code == 1 and "Unknown device 'l40s'" in shown and "--gpu" in shown, shown
    code, shown = plan("--config", str(gpt2))  # a model's config.json where a run's settings go
    assert code == 1 and f"give it as --model-config {gpt2}" in shown, shown


def test_the_paper_preset_plans_the_papers_sizes():
    code, shown = plan("--model-config", str(CONFIGS / "Llama-3.2-3B-Instruct.json"), "--task", "hellaswag",
                       "--preset", "paper", "--device", "cuda", "--dtype", "bfloat16", "--batch-size", "8")
    assert code == 0 and "(2000/10042, 0 shots)" in shown and "4.39 h" in shown, shown  # docs/planning.md's row


def test_json_holds_what_the_table_shows(gpt2):
    """``--json`` is the table's plan, machine-readable: the same stages, FLOPs and bytes, and seconds = FLOPs over
    the device's rate."""
    from celtk.cli.plan_cmd import _size

    wide = CliRunner().invoke(main, ["plan", "--model-config", str(gpt2), "--device-flops", "2e11", "--discovery",
                                     "50", "--heldout", "70"], env={"COLUMNS": "300"})  # no cell wrapped
    assert wide.exit_code == 0, wide.output
    cells = " ".join(wide.output.replace("│", " ").split())
    result = CliRunner().invoke(main, ["plan", "--model-config", str(gpt2), "--device-flops", "2e11", "--discovery",
                                       "50", "--heldout", "70", "--json"])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.output)
    assert planned["settings"]["discovery"] == 50 and planned["settings"]["heldout"] == 70
    assert planned["device"]["flops_per_second"] == 2e11
    assert [s["stage"] for s in planned["stages"]] == ["screen", "select", "test"]
    for stage in planned["stages"]:
        assert stage["seconds"] == pytest.approx(stage["flops"] / 2e11)
        assert stage["peak_bytes"] == stage["weight_bytes"] + stage["activation_bytes"]
        shown = f"{stage['stage']} {stage['evaluations']} {_size(stage['flops'], 'FLOP')} "
        assert shown + f"{_size(stage['weight_bytes'], 'B')} {_size(stage['activation_bytes'], 'B')}" in cells
