"""celtk's ledger on its own: append-only and hash-chained, nothing created by a read, and a run's log checked
line for line against what it recorded."""

import json

import pytest

from celtk.errors import RunStoreError
from celtk.store.ledger import Ledger


def test_entries_chain_and_an_edit_is_refused(tmp_path):
    ledger = Ledger(tmp_path / "cache" / "ledger.jsonl")
    assert ledger.entries() == [] and not (tmp_path / "cache").exists()  # reading creates nothing
    ledger.record_line(tmp_path / "run", 0, '{"seq": 0}', {"event": "look", "what": "test", "heldout_hash": "h"})
    ledger.record_frozen(tmp_path / "run", weights="w", task="t", heldout_hash="h", examples=["b", "a", "a"],
                         heads="L0H1")
    first, second = ledger.entries()
    assert (first["seq"], second["seq"]) == (0, 1) and second["examples"] == ["a", "b"]
    lines = ledger.path.read_text().splitlines()
    ledger.path.write_text("\n".join([lines[0].replace('"test"', '"eval"'), lines[1]]) + "\n")
    with pytest.raises(RunStoreError, match="line 2 does not follow the line before it"):
        ledger.entries()


def test_a_log_is_checked_against_the_lines_recorded_for_its_run(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    texts = [json.dumps({"seq": 0}), json.dumps({"seq": 1})]
    for seq, text in enumerate(texts):
        ledger.record_line(tmp_path / "run", seq, text, {"event": "look", "what": "test"})
    ledger.check_log(tmp_path / "run", texts + ['{"seq": 2}'])  # a newer line the ledger has not seen yet is fine
    ledger.check_log(tmp_path / "other", [])  # another run: nothing recorded for it
    with pytest.raises(RunStoreError, match="does not hold the line 1 .*a test line"):
        ledger.check_log(tmp_path / "run", texts[:1])
    with pytest.raises(RunStoreError, match="does not hold the line 0"):
        ledger.check_log(tmp_path / "run", ['{"seq": 0, "x": 1}', texts[1]])


def test_the_same_heldout_set_tested_elsewhere_and_frozen_examples_are_found(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl")
    for run in ("a", "b"):
        ledger.record_frozen(tmp_path / run, weights="w", task="t", heldout_hash="h", examples=["x", "y"], heads="L0H0")
    ledger.record_line(tmp_path / "a", 0, "{}", {"event": "look", "what": "test", "heldout_hash": "h"})
    seen = ledger.tested_elsewhere(tmp_path / "b", weights="w", task="t", heldout_hash="h")
    assert [e["run"] for e in seen] == [str((tmp_path / "a").resolve())]
    assert ledger.tested_elsewhere(tmp_path / "a", weights="w", task="t", heldout_hash="h") == []
    assert ledger.tested_elsewhere(tmp_path / "b", weights="other", task="t", heldout_hash="h") == []
    assert ledger.frozen_among(weights="w", task="t", examples=["y", "z"]) == [
        (str((tmp_path / "a").resolve()), 1), (str((tmp_path / "b").resolve()), 1)]
    assert ledger.frozen_among(weights="w", task="other", examples=["y"]) == []
