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


def test_a_climb_through_the_public_boundarys_wrapper_names_the_caller_below_it(tmp_path):
    """A public function is entered through a checking wrapper (one in celtk.boundary, and the one beartype builds
    under the function's own module and name, taking ``*args``): the climb is the call from below the wrappers."""
    out = tmp_path.resolve()
    real: dict[str, object] = {"__name__": "celtk.high"}
    exec("def hook(path):\n    return path\n", real)
    wrapped: dict[str, object] = {"__name__": "celtk.high", "real": real["hook"]}
    exec("def hook(*args, **kwargs):\n    return real(*args, **kwargs)\n", wrapped)
    boundary: dict[str, object] = {"__name__": "celtk.boundary", "wrapped": wrapped["hook"]}
    exec("def checked(*args, **kwargs):\n    return wrapped(*args, **kwargs)\n", boundary)
    low: dict[str, object] = {"__name__": "celtk.low", "hook": boundary["checked"]}
    exec("def helper(path):\n    return hook(path)\n", low)
    climbs: list[str] = []
    helper = low["helper"]
    walk_select.walk(out, lambda: helper(out / "screen.json"), climbs,  # type: ignore[operator]
                     above={"celtk.low": {"celtk.high"}, "celtk.high": set()})
    assert climbs == ["celtk.low.helper -> celtk.high.hook"]


def test_importers_follow_run_time_imports_through_other_modules_and_leave_type_checking_ones_out(tmp_path):
    files = {
        "__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import low\n",
        "high.py": "from pkg import mid\n",
        "mid.py": "def f():\n    from pkg import low\n    return low\n",  # a function-local import counts
        "low.py": "",
        "other.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.high\n",
    }
    for name, text in files.items():
        (tmp_path / "pkg").mkdir(exist_ok=True)
        (tmp_path / "pkg" / name).write_text(text)
    above = walk_select.importers(tmp_path / "pkg")
    assert above["pkg.low"] == {"pkg.mid", "pkg.high"}  # high imports low through mid
    assert above["pkg.mid"] == {"pkg.high"} and above["pkg.high"] == set() and above["pkg.other"] == set()
