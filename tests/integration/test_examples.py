"""The examples run as written (public API only)."""

import json
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


def test_walkthrough_notebook_runs_in_a_kernel(tmp_path):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(EXAMPLES / "cel_walkthrough.ipynb", as_version=4)
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")  # stored clean
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()  # raises on any cell error

    run = tmp_path / "runs" / "walkthrough"
    selection = json.loads((run / "selection.json").read_text())
    test = json.loads((run / "test.json").read_text())
    text = "".join(o.get("text", "") for cell in notebook.cells for o in cell.get("outputs", []))
    assert f"selected: {','.join(selection['heads'])}" in text and test["n"] == 16
    assert f"{selection['heads'][0]} on " in text and "direct logit attribution" in text
    html = [o["data"]["text/html"] for o in notebook.cells[-1].outputs if "text/html" in o.get("data", {})]
    assert len(html) == 1 and "celtk report: walkthrough" in html[0] and selection["heads"][0] in html[0]
