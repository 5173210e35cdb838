"""The screen document answers the racing questions itself: which rows are complete, which a
racing screen dropped, and the ranking of the complete ones by the one ranking key."""

from __future__ import annotations

import numpy as np

from celtk.heads import Head, HeadSet
from celtk.search.scores import HeadScore, rank
from celtk.store.documents import Correctness, ModelRecord, ScreenDocument, ScreenRow, TaskRecord
from celtk.tasks import SplitManifest


def _row(head: str, correct: str, intact: str) -> ScreenRow:
    scored = [i for i, c in enumerate(correct) if c != "-"]
    ok = np.array([correct[i] == "1" for i in scored])
    base = np.array([intact[i] == "1" for i in scored])
    fixes, damage = int((ok & ~base).sum()), int((~ok & base).sum())
    n_scored = None if len(scored) == len(correct) else len(scored)
    return ScreenRow(head=Head.parse(head), accuracy=float(ok.mean()), gain=(fixes - damage) / len(scored),
                     gain_count=fixes - damage, damage=damage, fixes=fixes, correct=Correctness(correct),
                     n_scored=n_scored)


def _document(rows: list[ScreenRow], intact: str) -> ScreenDocument:
    return ScreenDocument(model=ModelRecord({"n_layers": 11, "n_heads": 2, "name": "m", "weight_hash": "h"}),
                          task=TaskRecord({"task": "t"}),
                          n=len(intact), intact_accuracy=intact.count("1") / len(intact),
                          intact_correct=Correctness(intact),
                          discovery_ids=[str(i) for i in range(len(intact))], discovery_hashes=[],
                          splits=SplitManifest(source="s", n_discovery=4, n_heldout=0, discovery_hash="h",
                                               heldout_hash="g", shot_ids=[]),
                          shard=None, config={}, heads=rows)


def test_ranked_rows_follow_the_one_ranking_key_and_leave_dropped_heads_out():
    intact = "0000110011"
    rows = [_row("L2H0", "1100110011", intact), _row("L10H0", "1100110011", intact),  # tied: L2 before L10
            _row("L0H1", "1000110011", intact), _row("L1H1", "0000010011", intact),
            _row("L3H0", "11--------", intact)]  # dropped by a race after two examples, where it looks best
    doc = _document(rows, intact)
    assert [str(r.head) for r in doc.dropped_rows()] == ["L3H0"]
    assert [str(r.head) for r in doc.complete_rows()] == ["L2H0", "L10H0", "L0H1", "L1H1"]
    # the same order as the search's key on the same scores (Algorithm 1's pool)
    base = np.array([c == "1" for c in intact])
    scores = [HeadScore.compare(HeadSet((r.head,)), r.correct.outcomes(), base) for r in doc.complete_rows()]
    expected = [s.heads.heads[0] for s in rank(scores)]
    assert [r.head for r in doc.ranked_rows()] == expected == [Head(2, 0), Head(10, 0), Head(0, 1), Head(1, 1)]
    assert doc.pool(2) == [Head(2, 0), Head(10, 0)] and doc.pool(10) == expected
