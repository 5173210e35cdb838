"""One run directory owns every same-run check: each stage driver makes one
``RunDirectory.require(stage)`` call before a model loads and one ``admit`` (directly, or through ``open_run(stage=…)``)
once its session is drawn; no driver compares weights, fingerprints, held-out sets or racing uses itself."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from celtk.errors import ConfigError
from celtk.store.directory import MODEL_CHECKS, STAGES, ModelChecks, RunDirectory
from celtk.store.rules import RULES, Stage

CELTK = Path(__file__).resolve().parents[2] / "celtk"

# each stage's driver: (module, function)
DRIVERS = {
    "select": ("run/select.py", "run_select"),
    "test": ("run/test.py", "run_test"),
    "stability": ("run/stability.py", "run_stability"),
    "transfer": ("run/transfer.py", "run_transfer"),
    "calibrate": ("run/calibrate.py", "run_calibration"),
    "ablations": ("run/ablations.py", "run_ablation_kinds"),
    "eval": ("run/eval.py", "_eval_run"),
    "altscreen": ("run/altscreen.py", "run_altscreen"),
    "attributes": ("run/analyses.py", "run_attributes"),
}

# the checks that belong to the run directory; only it (and, for its own documents, the report) calls them
SAME_RUN_CHECKS = {
    "check_fingerprint", "check_screen_complete", "check_screen_fingerprint", "check_racing_rows", "check_racing_use",
    "check_selection_matches_screen", "check_test_matches_selection", "check_heldout", "check_contract",
    "check_frozen", "check_no_overlap", "verify", "verify_intact", "refuse_second_test", "refuse_select_after_looks",
    "require_tested", "compare_fingerprint", "check_raced_tie_break"}
MAY_CALL = {"store/directory.py", "store/integrity.py", "store/files.py", "report/__init__.py",
            "run/screen.py"}  # the screen writes fingerprint.json, and its shards' merge compares them


def _calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _stage_arg(call: ast.Call, position: int) -> str | None:
    """The stage a ``require``/``admit`` call names (positional ``position``) or ``open_run`` names (``stage=``)."""
    for kw in call.keywords:
        if kw.arg == "stage" and isinstance(kw.value, ast.Constant):
            return str(kw.value.value)
    arg = call.args[position] if len(call.args) > position else None
    return str(arg.value) if isinstance(arg, ast.Constant) else None


def _function(path: Path, name: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text())
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"{path}: {name} defined {len(found)} times"
    return found[0]


def test_every_stage_has_a_driver_and_model_checks():
    assert set(DRIVERS) == set(STAGES) == set(MODEL_CHECKS)


@pytest.mark.parametrize("stage", list(DRIVERS))
def test_each_driver_requires_its_stage_once_and_admits_its_session(stage):
    module, name = DRIVERS[stage]
    path = CELTK / module
    driver = _function(path, name)
    # the driver's body plus the module's private helpers it calls (calibrate's random-heads null opens its run there)
    tree = ast.parse(path.read_text())
    helpers = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("_")}
    bodies = [driver] + [helpers[_name(c)] for c in _calls(driver) if _name(c) in helpers]
    calls = [c for body in bodies for c in _calls(body)]
    requires = [c for c in calls if _name(c) == "require"]
    assert [_stage_arg(c, 0) for c in requires] == [stage], f"{name} must call rd.require({stage!r}) once"
    admits = [_stage_arg(c, 0) for c in calls if _name(c) == "admit"]
    admits += [_stage_arg(c, 2) for c in calls if _name(c) == "open_run"]
    assert admits == [stage], f"{name} must admit its session once, as stage {stage!r}: {admits}"


def test_no_module_outside_the_run_directory_makes_a_same_run_check_itself():
    offenders = []
    for path in sorted(CELTK.rglob("*.py")):
        module = str(path.relative_to(CELTK))
        if module in MAY_CALL:
            continue
        for call in _calls(ast.parse(path.read_text())):
            if _name(call) in SAME_RUN_CHECKS:
                offenders.append(f"{module}:{call.lineno} {_name(call)}")
        if "weight_hash !=" in path.read_text():
            offenders.append(f"{module}: compares weight hashes")
    assert offenders == []


def test_the_model_checks_cover_what_each_stage_scores():
    looks = {s for s, checks in MODEL_CHECKS.items() if checks.heldout}
    assert looks == {"test", "stability", "transfer", "calibrate", "ablations", "eval"}  # every held-out look
    assert {s for s, c in MODEL_CHECKS.items() if c.frozen} == {"test", "ablations"}  # they score selection.json
    assert MODEL_CHECKS["select"].baseline == MODEL_CHECKS["stability"].baseline == "null"
    assert MODEL_CHECKS["altscreen"] == ModelChecks()
    assert {s for s, c in MODEL_CHECKS.items() if c.tested} == {"ablations"}  # it rescores the test's examples


def test_unknown_stage_is_refused_with_the_stages_named():
    # require and admit take a Stage (checked by mypy, and at run time under the tests' type checks); a name from
    # anywhere else is refused by the table's lookup, naming the stages
    with pytest.raises(ConfigError, match=r"Unknown stage 'tset'.*select, test.*Did you mean: 'test'"):
        RunDirectory.rule("tset")


def test_one_table_keys_every_stage_by_its_typed_name():
    assert STAGES == get_args(Stage) == tuple(RULES)
    assert MODEL_CHECKS == {stage: rule.model for stage, rule in RULES.items()}
    # a stage that reads the test names itself in its refusals
    assert all(rule.verb for rule in RULES.values() if {"tested", "tests-selection"} & set(rule.needs))
