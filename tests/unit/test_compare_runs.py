"""benchmarks/compare_runs.py: the check behind "a refactor changed no result" tolerates only added and renamed
keys, never a changed or removed value."""
import importlib.util
import json
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location("compare_runs", Path(__file__).parents[2] / "benchmarks" / "compare_runs.py")
assert _SPEC and _SPEC.loader
compare_runs = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(compare_runs)

OLD = {"heads": [{"head": "L0H1", "gain": 3, "accuracy": 0.5}], "strategy": "algorithm1"}


def test_added_and_renamed_keys_tolerated_only_when_named():
    new = {"heads": [{"head": "L0H1", "gain_count": 3, "accuracy": 0.5}], "strategy": "algorithm1", "schema_version": 1}
    assert compare_runs.matches(OLD, new, {"schema_version"}, {"gain_count": "gain"})
    assert not compare_runs.matches(OLD, new, set(), {"gain_count": "gain"})  # the added key was not named
    assert not compare_runs.matches(OLD, new, {"schema_version"}, {})  # the rename was not named


def test_changed_or_removed_values_are_different():
    changed = {"heads": [{"head": "L0H1", "gain": 4, "accuracy": 0.5}], "strategy": "algorithm1"}
    removed = {"heads": [{"head": "L0H1", "gain": 3}], "strategy": "algorithm1"}
    # a key the old document has is never dropped, even if it is listed as added
    dropped = {"heads": [{"head": "L0H1", "gain": 3, "accuracy": 0.5}], "strategy": "greedy"}
    for new in (changed, removed, dropped):
        assert not compare_runs.matches(OLD, new, {"strategy"}, {})


def test_directory_verdicts(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    for run in (old, new):
        run.mkdir()
        (run / "timing.json").write_text(json.dumps({"s": str(run)}))  # always differs: skipped
    (old / "a.json").write_text(json.dumps(OLD))
    (new / "a.json").write_text(json.dumps(OLD | {"schema_version": 1}))
    (old / "b.csv").write_text("x\n")
    (new / "extra.json").write_text("{}")
    rows = dict(compare_runs.compare(old, new, {"schema_version"}, {}))
    assert rows == {"a.json": "identical-modulo-added", "b.csv": "MISSING-IN-NEW", "extra.json": "ONLY-IN-NEW"}
