"""The figures the documentation quotes from small tiny-model scripts do not drift: each script under benchmarks/
that writes a JSON into docs/ and a passage between markers in a page is rerun here, and its fresh figures must
equal the committed JSON, and the page's passage must be the one the script writes from that JSON. Editing a
number in the page, in the JSON, or changing what the code computes fails one of these. docs/figures.md lists
every figure of the documentation and which script prints it; the long real-model runs there are benchmarks,
not rerun here."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def _passage(module: ModuleType) -> str:
    """The page's text between the script's markers, markers included."""
    page = module.PAGE.read_text()
    assert module.START in page and module.END in page, f"{module.PAGE.name} lost the markers of {module.__name__}"
    return module.START + page.split(module.START, 1)[1].split(module.END, 1)[0] + module.END


def _differences(committed, fresh, path: str = "") -> list[str]:
    """Each figure that differs, as ``path: committed -> fresh`` (what a failure shows)."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        return [line for key in sorted(committed.keys() | fresh.keys(), key=str)
                for line in _differences(committed.get(key), fresh.get(key), f"{path}.{key}".lstrip("."))]
    return [] if committed == fresh else [f"{path}: {committed!r} -> {fresh!r}"]


@pytest.fixture(scope="module")
def planted_heads(smol_tokenizer):
    with pytest.MonkeyPatch.context() as monkeypatch:
        module = _script("planted_heads", monkeypatch)
        return module, module.measure(smol_tokenizer)


def test_planted_heads_figures_rerun_to_the_committed_json(planted_heads):
    module, fresh = planted_heads
    committed = json.loads(module.DATA.read_text())
    assert fresh == committed, ("benchmarks/planted_heads.py gives other figures than docs/planted-heads.json "
                                "(rerun it and read what changed): " + "; ".join(_differences(committed, fresh)))


def test_the_pages_planted_heads_sentence_is_the_jsons(monkeypatch):
    module = _script("planted_heads", monkeypatch)
    committed = json.loads(module.DATA.read_text())
    assert _passage(module) == module.block(committed), \
        "docs/selection-holds.md's planted-heads sentence differs from docs/planted-heads.json's figures"
    # the figures the sentence is about, read back from the JSON
    anti, shared = committed["anti_answer"]["kinds"], committed["shared"]["kinds"]
    assert anti["zero"]["gain"] > anti["mean"]["gain"] > anti["resample"]["gain"] > 0
    dose = [anti[f"scale:{alpha}"]["gain"] for alpha in ("1.0", "0.75", "0.5", "0.25", "0.0")]
    assert dose == sorted(dose) and dose[0] == 0 and dose[-1] == anti["zero"]["gain"]
    assert shared["zero"]["gain"] > 0 and shared["mean"]["gain"] <= 0 and shared["resample"]["gain"] <= 0


def test_the_sentence_writes_figures_as_the_page_does(monkeypatch):
    """A gain in signed points without a trailing .0 (a minus sign, not a hyphen), a rate in percent."""
    module = _script("planted_heads", monkeypatch)
    assert [module.points(g) for g in (0.81, 0.325, 0.0, -0.003)] == ["+81", "+32.5", "+0", "−0.3"]
    assert [module.percent(r) for r in (0.19, 0.0, 0.325)] == ["19", "0", "32.5"]


def test_the_pages_demo_ablations_table_is_the_committed_jsons(monkeypatch):
    """The demo's kinds × positions table is rendered from docs/demo-ablation-kinds.json (what `celtk ablations`
    wrote for the demo), and the conclusions the page draws still hold in that JSON."""
    module = _script("demo_ablations", monkeypatch)
    committed = json.loads(module.DATA.read_text())
    assert _passage(module) == module.passage(committed), \
        "docs/selection-holds.md's demo ablation-kinds table differs from docs/demo-ablation-kinds.json"
    rows = {(r["kind"], r["positions"]): r for r in committed["rows"]}
    assert rows[("zero", "all")]["gain"] == committed["test_gain"]  # the look reproduced the test
    assert rows[("zero", "example")]["gain"] >= rows[("zero", "all")]["gain"] > 4 * rows[("zero", "prefix")]["gain"]
    assert rows[("mean", "example")]["gain"] > 10 * abs(rows[("mean", "prefix")]["gain"])
    resample = rows[("resample", "example")]
    assert resample["draws"] >= 5 and resample["gain_ci"][0] < 0 < resample["gain_ci"][1]
    assert rows[("resample", "prefix")]["gain"] == 0 and rows[("resample", "prefix")]["fixes"] == 0
