"""`celtk plan`: shapes and parameter counts from config files alone, the stage estimates, and the
memory model's terms (the measured comparison is benchmarks/plan_accuracy.py, not a unit test)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from celtk.errors import ConfigError
from celtk.evaluation.activations import (
    LOGIT_BYTES,
    SCORE_BYTES,
    Shape,
    TaskSize,
    ablated_pass_bytes,
    attention_bytes,
    cached_stage_bytes,
    intact_pass_bytes,
    mlp_bytes,
    resident_bytes,
    scoring_bytes,
)
from celtk.planning.plan import (
    PAPER_TASKS,
    Device,
    n_parameters,
    plan_run,
    shape_from_config,
)

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
    # the held-out stage streams: its peak does not grow with the held-out set
    hs = PAPER_TASKS["hellaswag"]
    assert (plan_run(config, hs, L40S)[2].activation_bytes
            == plan_run(config, replace(hs, n_heldout=20), L40S)[2].activation_bytes)
    with pytest.raises(ConfigError, match="Unknown dtype"):
        plan_run(config, hs, L40S, dtype="int3")


TINY = Shape(n_layers=4, n_heads=8, n_kv_heads=2, d_head=16, d_model=128, d_ff=384, d_vocab=1000)
TASK = TaskSize("t", "target", 64, 0, prompt_tokens=41, continuation_tokens=2, shared_prefix=20)


def test_batch_and_rows_scale_the_pass_not_the_resident_cache():
    """Doubling the batch doubles every pass term (rows, scored logits, captured layer inputs) and
    leaves the resident cache (one layer input per example) as it is; the cache grows with examples."""
    resident = resident_bytes(TINY, 64, 22, 20, 4)
    small, large = (cached_stage_bytes(TINY, TASK, 64, b, b, 4) - resident for b in (8, 16))
    assert large == pytest.approx(2 * small)
    assert resident_bytes(TINY, 128, 22, 20, 4) == 2 * resident
    # more ablations per pass: more rows in the ablated pass, capped at one layer's heads
    assert cached_stage_bytes(TINY, TASK, 64, 8, 64, 4) > cached_stage_bytes(TINY, TASK, 64, 8, 8, 4)
    assert cached_stage_bytes(TINY, TASK, 64, 8, 64, 4) == cached_stage_bytes(TINY, TASK, 64, 8, 1024, 4)


def test_terms_follow_the_tensors_the_code_allocates():
    rows, width, prefix, db = 8, 10, 30, 4
    keys = prefix + width
    # eager attention: 8 bytes per score [rows, head, width, keys] (scores + float32 softmax)
    wider = attention_bytes(TINY, rows, width, keys + 1, db) - attention_bytes(TINY, rows, width, keys, db)
    assert wider == rows * TINY.n_heads * width * SCORE_BYTES + rows * (2 * TINY.n_kv_heads * TINY.d_head
                                                                          + 2 * TINY.n_heads * TINY.d_head) * db
    # the shared prefix's keys/values of every layer still to run, repeated per row
    full, half = (ablated_pass_bytes(TINY, rows, width, prefix, 4, db, n) for n in (4, 2))
    assert full - half == 2 * 2 * rows * TINY.n_kv_heads * prefix * TINY.d_head * db
    # one ablation's float32 logits and log-probabilities over the vocabulary
    assert (scoring_bytes(TINY, rows, width, 5, db) - scoring_bytes(TINY, rows, width, 4, db)
            == TINY.d_vocab * LOGIT_BYTES)
    # a gated MLP holds three d_ff activations, an ungated one two
    ungated = replace(TINY, gated_mlp=False)
    assert mlp_bytes(TINY, rows, width, db) - mlp_bytes(ungated, rows, width, db) == rows * width * TINY.d_ff * db
    # the intact pass captures every layer's input of this batch and of the previous one
    one, many = (intact_pass_bytes(TINY, rows, width, 0, 4, db, n) for n in (1, 5))
    assert many - one == TINY.n_layers * rows * width * TINY.d_model * db


def test_select_is_planned_as_the_prefix_tree_it_walks():
    """Stage 2's subsets share their lower heads' layers (celtk.screening.prefix_tree): for the plan's pool (spread
    over the lower POOL_DEPTH of the layers) about 62 % of the FLOPs of replaying each subset from its lowest layer,
    and one more pass-wide layer input per tree level."""
    from itertools import combinations

    from celtk.heads import Head, HeadSet
    from celtk.planning.flops import screen_flops
    from celtk.planning.plan import POOL_DEPTH
    from celtk.screening.prefix_tree import flat_layer_evaluations

    config, task = CONFIGS / "Llama-3.2-3B-Instruct.json", PAPER_TASKS["arithmetic"]
    screen, select, _ = plan_run(config, task, L40S, batch_size=8, rows_per_pass=32)
    shape = shape_from_config(config)
    spread = [Head(int((i + 0.5) * 28 * POOL_DEPTH / 10), i) for i in range(10)]  # the plan's prior pool
    sets = [HeadSet(c) for size in (2, 3) for c in combinations(spread, size)]
    width = task.mean_prompt + task.continuation_tokens - 1
    flat = screen_flops(shape, 0, [width] * 2000, 2000 * task.continuation_tokens, [s.heads[0].layer for s in sets])
    assert 0.55 < select.flops / flat["cached"] < 0.7
    assert flat_layer_evaluations(sets, 28) == sum(28 - s.heads[0].layer for s in sets)
    # memory: a tree three deep holds two more layer inputs of the widest pass (8 examples × 8 copies)
    deeper = cached_stage_bytes(TINY, TASK, 64, 8, 64, 4, depth=3) - cached_stage_bytes(TINY, TASK, 64, 8, 64, 4)
    assert deeper == 2 * 8 * 8 * (41 - 20 + 2 - 1) * TINY.d_model * 4
    assert select.activation_bytes >= screen.activation_bytes


def test_a_discovery_set_of_ten_to_the_fifteen_is_planned_not_a_memory_error():
    task = replace(PAPER_TASKS["arithmetic"], n_discovery=10**15, n_heldout=10**15)
    screen, select, test = plan_run(CONFIGS / "Llama-3.2-3B-Instruct.json", task, L40S)
    small = plan_run(CONFIGS / "Llama-3.2-3B-Instruct.json", PAPER_TASKS["arithmetic"], L40S)[0]
    assert screen.flops == pytest.approx(small.flops * 10**15 / 2000, rel=0.01)
    assert not screen.fits and (select.seconds or 0) > 0 and (test.seconds or 0) > 0


def test_the_held_out_passes_count_the_shared_prefix_once():
    """A held-out pass runs the shots once and each example's own tokens against them: its FLOPs grow with the
    examples by the suffix's cost alone, and without a shared prefix every prompt is counted whole."""
    config = CONFIGS / "Llama-3.2-3B-Instruct.json"
    task = replace(PAPER_TASKS["arithmetic"], shared_prefix=60, prompt_tokens=80, mean_prompt_tokens=75)
    shared = plan_run(config, task, L40S)[2].flops
    whole = plan_run(config, replace(task, shared_prefix=0), L40S)[2].flops
    assert shared < whole / 2  # 60 of 75 prompt tokens run once instead of once per example
    more = plan_run(config, replace(task, n_heldout=2 * task.n_heldout), L40S)[2].flops
    assert shared < more < 2 * shared  # doubling the examples adds their own tokens, not a second prefix


def test_humaneval_lengths_are_the_packaged_problems_in_a_real_tokenizer():
    """The HumanEval lengths `celtk plan` prices are the 164 shipped problems' as SmolLM2's tokenizer counts them:
    the longest prompt is the plan's longest, the mean within 5 %, and no canonical solution comes near the 1,024
    generated tokens the plan charges (the cap is an upper bound)."""
    from transformers import AutoTokenizer

    from celtk.models import ALIASES, dequantized_dir
    from celtk.planning.plan import TASK_SIZES
    from celtk.tasks.humaneval import packaged_problems, read_problems

    tokenizer = AutoTokenizer.from_pretrained(dequantized_dir(ALIASES["smollm2-135m"].locate()))
    problems = read_problems(packaged_problems())
    prompts = [len(tokenizer(p["prompt"]).input_ids) for p in problems]
    solutions = [len(tokenizer(p["canonical_solution"]).input_ids) for p in problems]
    size = TASK_SIZES["humaneval"]
    assert len(problems) == 164 == size.n_discovery + size.n_heldout
    assert max(prompts) == size.prompt_tokens
    assert sum(prompts) / len(prompts) == pytest.approx(size.mean_prompt_tokens, rel=0.05)
    assert max(solutions) < size.generate_tokens / 3 and size.kind == "generate" and size.shots_included == 0
