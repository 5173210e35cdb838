"""The examples run as written (public API only)."""

import json
import re
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


# The notebook at small sizes in a directory of the test's own (its defaults: make demo's run, runs/demo)
SMALL = {"discovery": 8, "heldout": 16, "seed": 1, "p": 3, "k": 2, "layers": [29]}
# what differs between two executions that are the same: durations and clock times
TIMING = re.compile(r"\d+(\.\d+)?\s?(ms|s|sec|seconds|min|it/s)\b|\d{4}-\d\d-\d\dT[\d:.]+Z?|\d+:\d\d(:\d\d)?")


def _outputs(notebook) -> list[list[dict]]:
    """Each code cell's outputs as comparable data: streams and results, timing-like text masked."""
    def clean(output) -> dict:
        data = {k: "".join(v) if isinstance(v, list) else v for k, v in output.get("data", {}).items()}
        text = "".join(output.get("text", ""))
        return {"type": output["output_type"], "name": output.get("name"), "text": TIMING.sub("T", text),
                "data": {k: TIMING.sub("T", v) if isinstance(v, str) else v for k, v in data.items()}}
    def merged(outputs) -> list[dict]:
        """Adjacent writes to one stream as one output, as Jupyter saves them: the kernel flushes
        stdout on a timer, so one print can arrive as two messages in one execution and one in the next."""
        out: list[dict] = []
        for o in outputs:
            o = dict(o, text="".join(o.get("text", ""))) if o["output_type"] == "stream" else o
            if out and o["output_type"] == "stream" == out[-1]["output_type"] and o["name"] == out[-1]["name"]:
                out[-1] = dict(out[-1], text=out[-1]["text"] + o["text"])
            else:
                out.append(o)
        return out
    return [[clean(o) for o in merged(cell.outputs)] for cell in notebook.cells if cell.cell_type == "code"]


def _execute(path: Path, cwd: Path):
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:  # as "Restart & Run All" does: a fresh kernel, every output replaced
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}}).execute()  # raises on any cell error
    return notebook


def test_walkthrough_notebook_is_saved_with_the_demos_outputs_and_numbered_headings():
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(EXAMPLES / "cel_walkthrough.ipynb", as_version=4)
    numbers = [int(m.group(1)) for cell in notebook.cells if cell.cell_type == "markdown"
               for m in re.finditer(r"^## (\d+)\.", cell.source, re.MULTILINE)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 5
    text = "".join("".join(o.get("text", "")) for cell in notebook.cells if cell.cell_type == "code"
                   for o in cell.get("outputs", []))
    assert "selected: L1H2, L14H8, L19H4" in text and "11.0% -> 36.0%" in text  # make demo's run
    assert all(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")
    assert "Loading weights" not in text and "TqdmWarning" not in text


def test_walkthrough_notebook_runs_twice_with_the_same_outputs(tmp_path, monkeypatch):
    run = tmp_path / "runs" / "walkthrough"
    monkeypatch.setenv("CELTK_WALKTHROUGH", json.dumps({**SMALL, "out": str(run)}))
    first = _execute(EXAMPLES / "cel_walkthrough.ipynb", tmp_path)
    stored = {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    second = _execute(EXAMPLES / "cel_walkthrough.ipynb", tmp_path)

    assert _outputs(second) == _outputs(first)  # every stage returned its stored result
    assert {p.relative_to(run): p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"} == stored
    selection = json.loads((run / "selection.json").read_text())
    test = json.loads((run / "test.json").read_text())
    log = [json.loads(line) for line in (run / "heldout_log.jsonl").read_text().splitlines()]
    assert [entry.get("event", "look") for entry in log].count("look") == 1  # one look at the held-out set
    text = "".join("".join(o.get("text", "")) for cell in first.cells if cell.cell_type == "code"
                   for o in cell.outputs)
    assert f"selected: {', '.join(selection['heads'])}" in text and test["n"] == SMALL["heldout"]
    assert f"{selection['heads'][0]} on " in text and "direct logit attribution" in text
    assert ("An effect" in text) != ("A null result" in text)  # the result is read out, one way
    assert "reopened: True True" in text and "induction and previous-token heads:" in text
    assert "Loading weights" not in text and "TqdmWarning" not in text  # transformers' own output stays out
    html = [o["data"]["text/html"] for o in first.cells[-1].outputs if "text/html" in o.get("data", {})]
    assert len(html) == 1 and "celtk report: walkthrough" in html[0] and selection["heads"][0] in html[0]
    figures = [o for cell in first.cells if cell.cell_type == "code" for o in cell.outputs
               if "image/png" in o.get("data", {})]
    assert len(figures) == 2  # the screen's grid and the attention pattern, drawn, not "<Figure ...>"
