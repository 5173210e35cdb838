"""benchmarks/walk_select.py on constructed walks: steps, modules, returns into a module left earlier, checks, and the
modules that start a check outside the run directory's two entry points."""

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).parents[2] / "benchmarks" / "walk_select.py"
_SPEC = importlib.util.spec_from_file_location("walk_select", _PATH)
assert _SPEC and _SPEC.loader
walk_select = importlib.util.module_from_spec(_SPEC)
sys.modules["walk_select"] = walk_select
_SPEC.loader.exec_module(walk_select)


def test_summary_counts_returns_and_checks():
    steps = [("celtk.run.select", "run_select"), ("celtk.store.directory", "RunDirectory.require"),
             ("celtk.run.select", "_selection_document"),  # back into select: a return
             ("celtk.store.integrity", "_agree"),  # a check by module
             ("celtk.store.files", "write_json"), ("celtk.store.directory", "RunDirectory.file")]  # back into directory
    result = walk_select.summary(steps, {"celtk.run.session"})
    assert (result["steps"], result["modules"], result["returns"], result["checks"]) == (6, 4, 2, 2)
    # by package: run, store, run (a return), store (a return), store, store
    assert (result["wings"], result["wing_returns"]) == (2, 2)
    assert result["check_steps"] == ["celtk.store.directory.RunDirectory.require", "celtk.store.integrity._agree"]
    assert result["check_starters"] == ["celtk.run.session"]


def test_walk_follows_the_directory_and_records_who_starts_checks(tmp_path):
    out = tmp_path.resolve()

    def check_thing(path):  # a check, started here (this test module) rather than through require/admit
        return path

    def uses(path, other=None):
        return check_thing(path)

    def unrelated(x):
        return x

    # the profiler records functions of modules named celtk*; run these under such a name
    for f in (check_thing, uses, unrelated):
        f.__globals__["__name__"] = "celtk.fake"
    try:
        steps, starters = walk_select.walk(out, lambda: (uses(out / "screen.json"), unrelated(3)))
    finally:
        globals()["__name__"] = "test_walk_select"
    assert [f for _, f in steps] == [uses.__qualname__, check_thing.__qualname__]  # unrelated never saw the path
    assert starters == {"celtk.fake"}
    assert walk_select.holds(out / "a" / "b", out) and not walk_select.holds(tmp_path.parent, out)


def test_a_call_into_a_module_that_imports_the_callers_is_a_climb(tmp_path):
    """celtk.high imports celtk.low: high calling low with the run directory goes down, low calling high (a callback
    handed down) climbs back up, and is recorded once however often it happens."""
    out = tmp_path.resolve()
    high: dict[str, object] = {"__name__": "celtk.high"}
    low: dict[str, object] = {"__name__": "celtk.low"}
    exec("def stage(path, callback):\n    return helper(path, callback)\n"
         "def hook(path):\n    return path\n", high)
    exec("def helper(path, callback):\n    callback(path)\n    return callback(path)\n", low)
    high["helper"] = low["helper"]
    climbs: list[str] = []
    stage = high["stage"]
    walk_select.walk(out, lambda: stage(out / "screen.json", high["hook"]), climbs,  # type: ignore[operator]
                     above={"celtk.low": {"celtk.high"}, "celtk.high": set()})
    assert climbs == ["celtk.low.helper -> celtk.high.hook"]
    climbs.clear()
    walk_select.walk(out, lambda: stage(out / "screen.json", high["hook"]), climbs,  # type: ignore[operator]
                     above={"celtk.low": set(), "celtk.high": set()})  # no import between them: no climb
    assert climbs == []
