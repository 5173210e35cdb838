"""Exactness on real weights, at a small size: benchmarks/real_weights_parity.py on the real Qwen2
(q/k/v biases, 7:1 grouped KV heads) and Gemma-3 checkpoints. celtk's ablated evaluation equals a plain transformers
model with a pre-hook zeroing heads' slices of ``o_proj``'s input, and the cached screener (fused and bridge replays)
equals the plain path, example by example: verdicts identical, log-probabilities within float32 rounding. Skipped
where the models' packages are not installed (``celtk models``); the full figures are in the benchmark."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import real_weights_parity
    finally:
        sys.path.pop(0)
    return real_weights_parity


@pytest.mark.slow
@pytest.mark.parametrize("alias", ["qwen2.5-coder-0.5b", "gemma3-270m"])
def test_ablations_on_real_weights_equal_a_plain_o_proj_hook(alias):
    from celtk.models import ALIASES, alias_available

    if not alias_available(ALIASES[alias]):
        pytest.skip(f"{alias} is not installed here: {ALIASES[alias].install}")
    found = _benchmark().parity(alias, n=6, layers=3)
    assert found["largest_ablation_effect"] > 1e-2  # the sampled ablations bite
    names = {row["comparison"] for row in found["comparisons"]}
    assert "evaluate vs HF o_proj hook" in names and "cached (bridge) vs plain" in names
    assert ("cached (fused) vs plain" in names) == (alias.startswith("qwen"))  # Gemma-3 replays through the bridge
    for row in found["comparisons"]:
        assert row["verdicts_differing"] == 0, row
        assert row["max_abs_dlogprob"] < 1e-3, row
