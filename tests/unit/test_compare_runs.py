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
        (run / "altscreen-gradient-timing.json").write_text(json.dumps({"seconds": len(str(run))}))  # likewise
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


def test_the_held_out_log_is_compared_without_its_clock(tmp_path):
    """Two runs that looked at the same held-out set the same way, at different times: the log matches once the
    times and the hash chain over them are dropped; a look that differs in anything else does not."""
    look = {"seq": 1, "what": "test", "heads": [["L1H2"]], "heldout_hash": "f7ca", "n": 300}
    logs = {"old": [{**look, "when": "2026-12-04T21:09:12Z", "prev": "3255"}],
            "new": [{**look, "when": "2026-12-05T09:06:27Z", "prev": "a7a2"}],
            "other": [{**look, "n": 30, "when": "2026-12-04T21:09:12Z", "prev": "3255"}]}
    for name, lines in logs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "heldout_log.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        (tmp_path / name / "heldout_log.head").write_text(lines[-1]["prev"])
    same = compare_runs.compare(tmp_path / "old", tmp_path / "new", set(), {})
    assert same == [("heldout_log.jsonl", "identical-modulo-clock")]
    assert compare_runs.compare(tmp_path / "old", tmp_path / "other", set(), {}) == [("heldout_log.jsonl", "DIFFERENT")]
