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
