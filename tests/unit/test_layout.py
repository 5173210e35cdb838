"""The library's shape: pure logic imports without torch, registries with "did you mean",
each strategy checks its own options, result documents round-trip, and a notebook sees the API."""

import importlib
import re
import subprocess
import sys

import numpy as np
import pytest

import celtk.analysis
import celtk.run
from celtk.errors import ConfigError, RunStoreError
from celtk.heads import Head, HeadSet
from celtk.search.scores import HeadScore

_BLOCK_TORCH = """
import sys


class _NoTorch:  # any `import torch` now raises ImportError (sys.modules["torch"] = None confuses scipy)
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"torch is blocked in this process ({name})")


sys.meta_path.insert(0, _NoTorch())
"""

_NO_TORCH = _BLOCK_TORCH + """
import celtk.search.scores, celtk.search.selection, celtk.search.strategies, celtk.search.stability, celtk.search.nulls
import celtk.registry, celtk.search.registry, celtk.screening.registry, celtk.run.registry, celtk.run.config
import celtk.store.documents
import numpy as np
from celtk.heads import HeadSet
from celtk.search.scores import HeadScore
from celtk.search.registry import get_strategy
intact = np.zeros(6, bool)
singles = [HeadScore.compare(HeadSet.parse(f"L0H{i}"), np.eye(6, dtype=bool)[i] | intact, intact) for i in range(3)]
result = get_strategy("greedy")(singles, intact, lambda sets: {s: np.zeros(6, bool) for s in sets}, k=2)
print("ok", result.best.heads)
"""


def test_search_logic_imports_and_runs_without_torch():
    out = subprocess.run([sys.executable, "-c", _NO_TORCH], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok L0H0"


def test_the_no_torch_shim_does_block_torch():
    code = _BLOCK_TORCH + "import celtk.screening.cached"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0 and "torch" in out.stderr  # so the test above would fail on a torch import


def test_registries_suggest_and_cli_choices_come_from_them():
    from click import Choice

    from celtk.cli.pipeline_cmds import run_cmd, screen_cmd, select_cmd
    from celtk.cli.search_cmds import altscreen_cmd, stability_cmd
    from celtk.run.registry import SCREENS
    from celtk.screening.registry import RANKERS, SCREENERS
    from celtk.search.registry import STRATEGIES

    assert STRATEGIES.names() == ["algorithm1", "greedy", "beam"] and RANKERS.names() == ["gradient", "lasso"]
    assert SCREENERS.names() == ["cached", "generation"]
    with pytest.raises(ConfigError, match="Unknown ranker 'lasso2'. Did you mean: 'lasso'"):
        RANKERS.get("lasso2")
    with pytest.raises(ConfigError, match="Unknown search strategy 'bem'.*Did you mean: 'beam'"):
        STRATEGIES.get("bem")

    def choices(command, name):
        option = next(p for p in command.params if p.name == name)
        assert isinstance(option.type, Choice)
        return list(option.type.choices)

    assert choices(select_cmd, "strategy") == choices(stability_cmd, "strategy") == STRATEGIES.names()
    assert choices(altscreen_cmd, "method") == RANKERS.names()
    assert choices(screen_cmd, "screen") == choices(run_cmd, "screen") == SCREENS.names() == ["exhaustive", "racing"]
    assert callable(SCREENS.get("racing")) and callable(SCREENS.get("exhaustive"))
    with pytest.raises(ConfigError, match="Unknown screen 'racng'. Did you mean: 'racing'"):
        SCREENS.get("racng")
    assert callable(RANKERS.get("gradient")) and STRATEGIES.get("beam").name == "beam"
    from celtk.screening.cached import CachedScreener
    from celtk.screening.generation import GenerationScreener

    assert SCREENERS.get("cached") is CachedScreener and SCREENERS.get("generation") is GenerationScreener


def test_each_strategy_checks_its_own_options():
    from celtk.search.registry import get_strategy

    algorithm1, greedy, beam = (get_strategy(n) for n in ("algorithm1", "greedy", "beam"))
    with pytest.raises(ConfigError, match="k = 12 exceeds p = 10; Algorithm 1 draws subsets from the pool"):
        algorithm1.check(k=12, p=10, n_heads=270)
    with pytest.raises(ConfigError, match="p = 300 exceeds the 270 screened heads"):
        algorithm1.check(k=3, p=300, n_heads=270)
    greedy.check(k=12, p=10, n_heads=270)  # no pool: p is not its option
    beam.check(k=12, p=1, width=4, n_heads=270)
    with pytest.raises(ConfigError, match="k = 13 exceeds the 12 screened heads"):
        greedy.check(k=13, n_heads=12)
    with pytest.raises(ConfigError, match="Beam width must be at least 1, got 0"):
        beam.check(k=2, width=0)


def test_greedy_searches_past_p_where_algorithm1_refuses():
    """k = 4 > p = 2: greedy adds four heads from all eight; Algorithm 1 refuses."""
    from celtk.search.registry import get_strategy

    n = 20
    intact = np.zeros(n, bool)
    singles = [HeadScore.compare(HeadSet.parse(f"L0H{i}"), np.arange(n) == i, intact) for i in range(8)]

    def evaluate(sets):
        return {s: np.isin(np.arange(n), [h.head for h in s.heads]) for s in sets}

    result = get_strategy("greedy")(singles, intact, evaluate, k=4, p=2)
    assert len(result.best.heads) == 4 and result.best.gain == 4
    with pytest.raises(ConfigError, match="k = 4 exceeds p = 2"):
        get_strategy("algorithm1")(singles, intact, evaluate, k=4, p=2)


def _screen_doc():
    from celtk.store.documents import Correctness, ModelRecord, ScreenDocument, ScreenRow, TaskRecord
    from celtk.tasks import SplitManifest

    row = ScreenRow(head=Head(0, 1), accuracy=0.5, gain=0.25, gain_count=1, damage=0, fixes=1,
                    correct=Correctness("0110"))
    model = ModelRecord({"name": "m", "n_layers": 1, "n_heads": 2, "weight_hash": "abc"})
    splits = SplitManifest(source="s", n_discovery=4, n_heldout=0, discovery_hash="h", heldout_hash="g", shot_ids=[])
    return ScreenDocument(model=model, task=TaskRecord({"task": "t", "kind": "target", "data_path": None}), n=4,
                          intact_accuracy=0.25, intact_correct=Correctness("0100"), discovery_ids=list("abcd"),
                          discovery_hashes=list("wxyz"), splits=splits, shard=None, config={"seed": 0}, heads=[row])


def test_documents_round_trip_and_carry_their_schema(tmp_path):
    from celtk.store.documents import SCHEMA_VERSION, DiagnosticsDocument, Interaction, ScreenDocument

    doc = _screen_doc()
    data = doc.to_json()
    assert list(data)[:2] == ["schema_version", "model"] and data["schema_version"] == SCHEMA_VERSION
    assert data["heads"][0] == {"head": "L0H1", "accuracy": 0.5, "gain": 0.25, "gain_count": 1, "damage": 0,
                                "fixes": 1, "correct": "0110"}
    assert ScreenDocument.from_json(data) == doc
    doc.save(tmp_path)
    assert ScreenDocument.load(tmp_path) == doc and doc.n_layers == 1 and doc.weight_hash == "abc"
    greedy = DiagnosticsDocument(strategy="greedy", rounds=[[HeadSet.parse("L0H1")]])
    assert greedy.to_json() == {"schema_version": SCHEMA_VERSION, "strategy": "greedy", "rounds": [["L0H1"]]}
    flagged = Interaction(heads=HeadSet.parse("L0H0,L0H1"), gain_count=5, additive_gain_count=1, gap=4, noise=1.2,
                          kind="super-additive")
    assert Interaction.from_json(flagged.to_json()) == flagged
    assert "kind" not in Interaction(heads=HeadSet(), gain_count=0, additive_gain_count=0, gap=0, noise=0.0).to_json()


def test_documents_refuse_unknown_fields_and_other_versions():
    from celtk.store.documents import ScreenDocument

    data = _screen_doc().to_json()
    with pytest.raises(RunStoreError, match="unknown field\\(s\\) extra"):
        ScreenDocument.from_json(data | {"extra": 1})
    with pytest.raises(RunStoreError, match="schema version 99; this celtk reads version 1"):
        ScreenDocument.from_json(data | {"schema_version": 99})
    with pytest.raises(RunStoreError, match="lacks n, which celtk writes in every ScreenDocument"):
        ScreenDocument.from_json({k: v for k, v in data.items() if k != "n"})
    with pytest.raises(RunStoreError, match="has no schema_version, which celtk writes in every run document"):
        ScreenDocument.from_json({k: v for k, v in data.items() if k != "schema_version"})


def test_gain_means_a_fraction_and_gain_count_a_count_in_every_document():
    """One unit per field name: every dataclass field named ``gain`` is a float (fraction), every
    ``gain_count`` an int (examples)."""
    import dataclasses

    from celtk.store import documents

    seen: dict[str, set[str]] = {}
    for value in vars(documents).values():
        if isinstance(value, type) and dataclasses.is_dataclass(value):
            for f in dataclasses.fields(value):
                if f.name.endswith("gain") or f.name.endswith("gain_count"):
                    # None: undefined, same unit
                    seen.setdefault(f.name, set()).add(str(f.type).removesuffix(" | None"))
    assert seen["gain"] == {"float"} and seen["gain_count"] == {"int"} and seen["additive_gain_count"] == {"int"}
    assert seen["discovery_gain"] == seen["heldout_gain"] == {"float"}


def test_notebook_surface_without_torch():
    code = ("import sys, celtk; names = dir(celtk); "
            "assert {'Run', 'RunConfig', 'HeadSet', 'probe', 'run', 'tasks'} <= set(names), names; "
            "assert not any(n in names for n in ('importlib', 'TYPE_CHECKING', 'Any')); "
            "r = celtk.run; t = celtk.tasks; c = celtk.RunConfig; "
            "assert 'run_select' in dir(r) and c is r.RunConfig; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
    import celtk

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        celtk.nope


# Names the top level held before it became the notebook surface, and the package each lives in now.
LEFT_THE_TOP_LEVEL = {
    "EvalConfig": "celtk.evaluation", "EvalResult": "celtk.evaluation", "ExampleResult": "celtk.evaluation",
    "ablation_for": "celtk.evaluation", "merge_shards": "celtk.run", "open_run": "celtk.run",
    "resolve_config": "celtk.run", "run_all": "celtk.run", "run_altscreen": "celtk.run", "run_eval": "celtk.run",
    "run_screen": "celtk.run", "run_select": "celtk.run", "run_stability": "celtk.run", "run_test": "celtk.run",
    "CachedScreener": "celtk.screening.cached", "HeadScore": "celtk.search.scores", "rank": "celtk.search.scores",
    "ranking_key": "celtk.search.scores", "select": "celtk.search.selection", "mcnemar_exact": "celtk.stats",
    "task_names": "celtk.tasks",
}


def test_the_top_level_is_the_notebook_surface_and_what_left_it_stays_in_its_package():
    import importlib

    import celtk

    names = dir(celtk)
    assert 15 <= len(names) <= 25, names
    assert {"Run", "RunConfig", "ScreenDocument", "SelectionDocument", "TestDocument", "Head", "HeadSet",
            "load_model", "get_task", "ablate", "evaluate", "CeltkError"} <= set(names)
    for name in names:
        assert getattr(celtk, name) is not None  # every listed name resolves
    for name, package in LEFT_THE_TOP_LEVEL.items():
        assert name not in names
        assert getattr(importlib.import_module(package), name) is not None, f"{name} is gone from {package}"
        with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
            getattr(celtk, name)
    with pytest.raises(AttributeError, match=r"it is celtk\.run\.run_screen \(or a method of celtk\.Run\)"):
        celtk.run_screen
    assert celtk.circuits.__name__ == "celtk.circuits"  # an unlisted submodule still loads as celtk.NAME


def test_every_name_celtk_run_exports_resolves_and_every_stage_is_there():
    import celtk.run

    for name in celtk.run.__all__:
        assert getattr(celtk.run, name) is not None, name
    verbs = {"run_screen", "merge_shards", "run_select", "run_test", "run_transfer", "run_calibration",
             "run_ablation_kinds", "run_altscreen", "run_stability", "run_eval", "run_attributes", "run_compare",
             "run_all", "Run"}
    assert verbs <= set(celtk.run.__all__) and verbs <= set(dir(celtk.run))
    assert celtk.Run is celtk.run.Run


def test_dead_eval_config_fields_are_gone():
    from celtk.evaluation.results import EvalConfig

    with pytest.raises(TypeError):
        EvalConfig(fewshot=3)  # type: ignore[call-arg]  # deliberately: the removed field must be refused
    with pytest.raises(TypeError):
        EvalConfig(seed=1)  # type: ignore[call-arg]  # deliberately: the removed field must be refused


def test_a_registry_takes_plugins_by_path_or_object_and_refuses_clashes():
    from celtk.registry import Registry

    reg: Registry[object] = Registry("ranker", {"a": "celtk.search.scores:head_order"})
    reg.register("b", "celtk.search.scores:ranking_key")
    reg.register("c", len)
    from celtk.search.scores import head_order, ranking_key

    assert reg.names() == ["a", "b", "c"] and reg.get("a") is head_order and reg.get("b") is ranking_key
    assert reg.get("c") is len
    with pytest.raises(ConfigError, match="ranker named 'a' is already registered"):
        reg.register("a", len)
    with pytest.raises(ConfigError, match="'module:attribute'"):
        reg.register("d", "celtk.search.scores.head_order")
    reg.unregister("c")
    with pytest.raises(ConfigError, match="Unknown ranker 'c'"):
        reg.get("c")


# What each test tier may need (docs/testing.md): a unit test builds no model, tiny or real, so the tier runs
# with nothing but .venv; test modules share helpers through tests/_support.py, never by importing conftest.
MODEL_FIXTURES = {"tiny_llama", "tiny_model", "smollm2", "planted", "null_run", "ctx", "run_dir"}
MODEL_BUILDERS = {"make_tiny", "tiny_hf_model", "wrap_hf_model", "self_consistent_task"}


def _tier_offences(path) -> list[str]:
    import ast

    tree, found = ast.parse(path.read_text()), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if "conftest" in modules:
                found.append(f"{path.name}:{node.lineno} imports conftest (import from _support instead)")
            if path.parent.name == "unit" and isinstance(node, ast.ImportFrom):
                found += [f"{path.name}:{node.lineno} imports {a.name}, which builds a model"
                          for a in node.names if a.name in MODEL_BUILDERS]
        if path.parent.name == "unit" and isinstance(node, ast.FunctionDef):
            found += [f"{path.name}:{node.lineno} {node.name} takes the model fixture {a.arg}"
                      for a in node.args.args if a.arg in MODEL_FIXTURES]
    return found


def test_unit_tests_build_no_model_and_no_test_imports_conftest():
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    files = sorted({*tests.glob("unit/*.py"), *tests.glob("integration/*.py"),
                    *tests.glob("*.py")} - {tests / "conftest.py"})
    offences = [o for f in files for o in _tier_offences(f)]
    assert not offences, "\n".join(offences)


def test_the_tier_check_finds_a_model_in_a_unit_file(tmp_path):
    unit = tmp_path / "unit"
    unit.mkdir()
    (unit / "test_x.py").write_text("from conftest import planted_config\nfrom _support import make_tiny\n\n"
                                    "def test_a(tiny_llama):\n    pass\n")
    offences = _tier_offences(unit / "test_x.py")
    assert len(offences) == 3 and "imports conftest" in offences[0] and "make_tiny" in offences[1], offences
    assert "tiny_llama" in offences[2]



@pytest.mark.parametrize("name", sorted(celtk.run.MOVED))
def test_a_module_that_moved_to_the_store_says_where(name):
    """``from celtk.run import documents`` (a module now in the run store) names its new home, which imports."""
    home = celtk.run.MOVED[name]
    with pytest.raises(ImportError, match=re.escape(f"moved to {home}")):
        exec(f"from celtk.run import {name}", {})
    assert importlib.import_module(home).__name__ == home


@pytest.mark.parametrize("name", sorted(celtk.analysis.MOVED))
def test_an_analysis_stage_that_moved_says_where(name):
    """``from celtk.analysis import run_compare`` (a stage now beside the others) names its new home, where it is."""
    home = celtk.analysis.MOVED[name]
    with pytest.raises(ImportError, match=re.escape(f"moved to {home}.{name}")):
        exec(f"from celtk.analysis import {name}", {})
    assert callable(getattr(importlib.import_module(home), name))
