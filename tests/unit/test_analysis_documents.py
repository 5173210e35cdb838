"""The compare and head-attribute documents (celtk.analysis) on constructed inputs: each round-trips
through its file, keeps the keys the files had before they were typed, and refuses a file it cannot read."""

import json

import pytest
from _support import single_head_score

from celtk.analysis import AttributeProbe, CompareDocument, HeadAttributesDocument
from celtk.circuits import compare_with_circuit, critical_and_enhancing, load_circuit
from celtk.errors import RunStoreError
from celtk.heads import Head
from celtk.store.documents import ModelName
from celtk.store.files import dumps

RANKING = ["L9H9", "L0H0", "L10H7", "L1H1"] + [f"L{l}H{h}" for l in range(12) for h in range(12)
                                                if f"L{l}H{h}" not in ("L9H9", "L0H0", "L10H7", "L1H1")]
ROWS = [single_head_score("L0H0", -9, 9, 0), single_head_score("L0H1", 4, 1, 5), single_head_score("L2H0", 7, 0, 7)]


def compare_fields(top: int) -> dict:
    """What run_compare decodes: the circuit helpers' JSON, critical/enhancing heads and the selection."""
    return {**compare_with_circuit(load_circuit("ioi-gpt2-small"), 12, 12, [Head.parse("L9H9"), Head.parse("L3H3")],
                                [Head.parse(h) for h in RANKING], top=top),
            "critical_vs_enhancing": critical_and_enhancing(ROWS, n=2), "run_selection": ["L9H9", "L3H3"]}


def test_compare_document_round_trips_with_its_screen_top_key():
    fields = compare_fields(4)
    doc = CompareDocument.from_json(fields)
    assert doc.top == 4 and doc.screen_top.overlap == 2 and doc.selection.shared[0].role == "name mover"
    movers = doc.by_role["name mover"]
    assert dict(zip(movers.heads, movers.ranks, strict=True))[Head.parse("L9H9")] == 1  # ranked first
    assert doc.critical_vs_enhancing is not None
    assert (doc.critical_vs_enhancing.critical_layers == {0: 1}
            and doc.critical_vs_enhancing.enhancing_layers == {0: 1, 2: 1})
    # the same keys, in the same order, as the dicts the file was written from
    assert dumps(doc.to_json()) == dumps(fields)
    text = dumps(doc.to_json())
    assert "screen_top4" in json.loads(text) and "top" not in json.loads(text) and "schema_version" not in text
    again = CompareDocument.from_json(json.loads(text))  # layer keys come back as ints, by_role as records
    assert again.critical_vs_enhancing is not None
    assert again == doc and again.critical_vs_enhancing.critical_layers == {0: 1}
    assert CompareDocument.file("packaged_circuit") == "compare-packaged-circuit.json"
    assert CompareDocument.file("/some/dir/my_circuit.json") == "compare-my-circuit.json"


def test_compare_document_refuses_a_file_without_one_screen_top():
    fields = compare_fields(4)
    without = {k: v for k, v in fields.items() if k != "screen_top4"}
    with pytest.raises(RunStoreError, match=r"compare-x.json needs one screen_top<N> field, found none"):
        CompareDocument.from_json(without, "compare-x.json")
    with pytest.raises(RunStoreError, match=r"found screen_top4, screen_top5"):
        CompareDocument.from_json({**fields, "screen_top5": fields["screen_top4"]}, "compare-x.json")


def test_head_attributes_document_round_trips(tmp_path):
    doc = HeadAttributesDocument(
        model=ModelName("m"), n_layers=2, n_heads=2,
        probe=AttributeProbe(sequence="random tokens repeated once", length=4, batch=1, seed=0),
        scores={"previous_token": [[0.5, 0.25], [0.0, 1.0]], "induction": [[0.0, 0.125], [0.75, 0.0]]},
        selected={Head(1, 0): {"previous_token": 0.0, "induction": 0.75}})
    assert doc.score("induction", Head(1, 0)) == 0.75 and doc.score("previous_token", Head(0, 1)) == 0.25
    text = dumps(doc.to_json())
    assert list(json.loads(text)) == ["model", "n_layers", "n_heads", "probe", "scores", "selected"]
    (tmp_path / HeadAttributesDocument.FILE).write_text(text)
    assert HeadAttributesDocument.load(tmp_path) == doc
    with pytest.raises(RunStoreError, match="unknown field"):
        HeadAttributesDocument.from_json({**doc.to_json(), "extra": 1})
