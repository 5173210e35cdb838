"""The set memo's parts (select_parts/sets) are reused only as celtk wrote them: a part whose
outcomes were edited by hand no longer matches its digest and is refused, not trusted."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from celtk.errors import RunStoreError
from celtk.heads import HeadSet
from celtk.store.memo import SetMemo

INTACT = np.array([True, False, True, False])


class _Screener:
    """Scores every set as 'example 1 fixed', layer by layer; counts what it scored."""

    def __init__(self) -> None:
        self.scored: list[HeadSet] = []

    def run(self, sets, on_layer, on_work=None):  # as the screeners' run: on_work is theirs to call
        self.scored += sets
        on_layer(0, {s: SimpleNamespace(correct=np.array([True, True, True, False])) for s in sets})


def _memo(directory, screener):
    return SetMemo(directory, INTACT, lambda: screener, key="k")


def test_parts_are_reused_as_written_and_refused_once_edited(tmp_path):
    sets = [HeadSet.parse("L0H1"), HeadSet.parse("L0H1,L1H0")]
    first = _Screener()
    outcomes = _memo(tmp_path / "sets", first)(sets)
    again = _Screener()
    assert {s: list(v) for s, v in _memo(tmp_path / "sets", again)(sets).items()} == {
        s: list(v) for s, v in outcomes.items()}
    assert again.scored == []  # reused, not scored again
    (part,) = (tmp_path / "sets").glob("*.json")
    doc = json.loads(part.read_text())
    doc["subsets"][0]["correct"] = doc["subsets"][1]["correct"].replace("1", "0", 1)  # a hand-edited outcome
    part.write_text(json.dumps(doc))
    with pytest.raises(RunStoreError, match=r"does not match its digest: its outcomes changed .* Delete it and rerun"):
        _memo(tmp_path / "sets", _Screener())
    del doc["digest"]  # editing the digest away is no way around it
    part.write_text(json.dumps(doc))
    with pytest.raises(RunStoreError, match=r"does not match its digest"):
        _memo(tmp_path / "sets", _Screener())
