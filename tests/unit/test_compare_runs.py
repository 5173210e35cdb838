"""benchmarks/compare_runs.py: the check behind "a refactor changed no result" tolerates only added and renamed
keys, never a changed or removed value."""
import importlib.util
import json
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location("compare_runs",
                                               Path(__file__).parents[2] / "benchmarks" / "compare_runs.py")
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


def test_an_added_csv_column_is_tolerated_only_when_named(tmp_path):
    old = "head,gain_count\nL0H0,3\nL0H1,-1\n"
    assert compare_runs.csv_matches(old, "head,gain_count,n_scored\nL0H0,3,40\nL0H1,-1,12\n", {"n_scored"})
    assert not compare_runs.csv_matches(old, "head,gain_count,n_scored\nL0H0,3,40\nL0H1,-1,12\n", set())
    assert not compare_runs.csv_matches(old, "head,gain_count,n_scored\nL0H0,3,40\nL0H1,-2,12\n", {"n_scored"})
    assert not compare_runs.csv_matches(old, "head,n_scored\nL0H0,40\nL0H1,12\n", {"n_scored"})  # a column removed
    assert not compare_runs.csv_matches(old, "head,gain_count\nL0H0,3\n", {"n_scored"})  # a row removed
    for run, text in (("old", old), ("new", "head,gain_count,n_scored\nL0H0,3,40\nL0H1,-1,12\n")):
        (tmp_path / run).mkdir()
        (tmp_path / run / "screen.csv").write_text(text)
    assert compare_runs.compare(tmp_path / "old", tmp_path / "new", {"n_scored"}, {}) == [
        ("screen.csv", "identical-modulo-added")]
    assert compare_runs.compare(tmp_path / "old", tmp_path / "new", set(), {}) == [("screen.csv", "DIFFERENT")]
