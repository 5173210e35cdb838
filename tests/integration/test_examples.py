"""The examples run as written (public API only)."""

import runpy
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).parent.parent.parent / "examples"


def test_quickstart_runs():
    namespace = runpy.run_path(str(EXAMPLES / "quickstart.py"))
    summary = namespace["main"](n=12)
    assert summary["heads"] == "L14H3" and 0 <= summary["intact"] <= 1
    assert summary["gain"] == summary["ablated"] - summary["intact"]


def test_probe_heads_runs():
    namespace = runpy.run_path(str(EXAMPLES / "probe_heads.py"))
    out = namespace["main"](n=16)
    eff = out["effect"]
    assert len(eff.examples) == 16 and set(eff.fixes).isdisjoint(eff.breaks)
    assert out["attention"].pattern.shape[0] == len(out["attention"].tokens)
    assert len(out["dla"]) == 30 * 9 and len(out["changes"]) == 5
    assert set(out["attributes"]) == {"L1H2", "L14H8", "L19H4"}
    # a real 135M model has strong previous-token and induction heads; a broken probe gives ≈ 1/80
    assert out["max_scores"]["previous_token"] > 0.5 and out["max_scores"]["induction"] > 0.3
