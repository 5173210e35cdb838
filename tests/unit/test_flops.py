"""The FLOP count behind the efficiency figures and GPU-hour estimates."""

import pytest

from celtk.planning.flops import Shape, gpu_hours, layer_flops, screen_flops

TINY = Shape(n_layers=2, n_heads=2, n_kv_heads=1, d_head=3, d_model=4, d_ff=5, d_vocab=7)


def test_layer_flops_by_hand():
    # 2 new tokens after 3 past: q = 6, kv = 3; projections 2*2*4*(6+6) + 2*2*6*4; keys seen 2*3 + 3 = 9
    expected = 2 * 2 * 4 * 12 + 2 * 2 * 6 * 4 + 2 * 2 * 9 * 6 + 2 * 2 * 3 * 4 * 5
    assert layer_flops(TINY, 2, 3) == expected


def test_cached_equals_plain_without_prefix_from_layer_zero_and_saves_otherwise():
    suffixes = [5, 7, 6]
    same = screen_flops(TINY, 0, suffixes, 3, [0, 0, 0])
    assert same["cached"] == pytest.approx(same["plain"])
    later = screen_flops(TINY, 0, suffixes, 3, [1, 1, 1])
    shared = screen_flops(TINY, 10, suffixes, 3, [0, 0, 0])
    assert later["cached"] < later["plain"] and shared["cached"] < shared["plain"]


def test_gpu_hours_scale_with_examples():
    a = gpu_hours(TINY, 100, 20, 10)
    b = gpu_hours(TINY, 200, 20, 10)
    assert b["cached"] == pytest.approx(2 * a["cached"], rel=0.05) and a["cached"] < a["plain"]


def test_slurm_examples_parse_and_estimate_runs(capsys):
    import runpy
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parents[2] / "examples" / "slurm"
    for script in sorted(here.glob("*.s*")):
        if script.suffix in (".sh", ".sbatch"):
            assert subprocess.run(["bash", "-n", str(script)]).returncode == 0, script
    sys.argv = ["estimate_gpu_hours.py"]
    runpy.run_path(str(here / "estimate_gpu_hours.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "Qwen2.5-3B-Instruct" in out and len(out.strip().splitlines()) == 10


def test_ungated_mlp_counts_two_matrices():
    # GPT-2 / GPT-NeoX: up and down projections only; the gated (Llama) MLP adds the gate's third.
    import dataclasses

    plain = dataclasses.replace(TINY, gated_mlp=False)
    assert layer_flops(TINY, 2, 3) - layer_flops(plain, 2, 3) == 2 * 2 * TINY.d_model * TINY.d_ff


def test_repeat_counts_equal_widths_without_a_list_of_them():
    """``celtk plan --discovery 10^15`` once built a list of 10^15 widths (MemoryError)."""
    listed = screen_flops(TINY, 4, [6] * 50, 50, [0, 1, 1])
    assert screen_flops(TINY, 4, [6], 50, [0, 1, 1], repeat=50) == pytest.approx(listed)
    huge = gpu_hours(TINY, 10**15, 20, 10)
    assert huge["cached"] == pytest.approx(10**13 * gpu_hours(TINY, 100, 20, 10)["cached"], rel=0.01)
