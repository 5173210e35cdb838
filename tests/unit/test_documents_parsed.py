"""Documents hold parsed values: heads are :class:`Head` / :class:`HeadSet`, per-example outcomes a
:class:`Correctness`; ``from_json`` decodes them once, ``to_json`` writes the same file as before, and nothing outside
the boundaries that read files or user input parses a head name or a bit string."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from celtk.errors import RunStoreError
from celtk.heads import Head, HeadSet
from celtk.store.documents import (
    CalibrationDocument,
    Correctness,
    DiagnosticsDocument,
    Interaction,
    LookRecord,
    ModelRecord,
    RacingRecord,
    ScreenDocument,
    ScreenRow,
    SelectionDocument,
    StabilityDocument,
    StableSelection,
    TaskRecord,
)
from celtk.tasks import SplitManifest

CELTK = Path(__file__).resolve().parents[2] / "celtk"


def _row(head: str, bits: str) -> ScreenRow:
    return ScreenRow(head=Head.parse(head), accuracy=0.5, gain=0.0, gain_count=0, damage=1, fixes=1,
                     correct=Correctness(bits), n_scored=None if "-" not in bits else bits.count("0") + bits.count("1"))


def _screen() -> ScreenDocument:
    racing = RacingRecord(mode="exact", p=1, delta=None, schedule=[2, 2], racing_after=[2, 1], order=None,
                          pool=[Head(10, 0)], uncertified=[], evaluations=6, exhaustive_evaluations=8,
                          saved_fraction=0.25)
    return ScreenDocument(model=ModelRecord({"name": "m", "n_layers": 11, "n_heads": 1, "weight_hash": "w"}),
                          task=TaskRecord({"task": "t"}),
                          n=4, intact_accuracy=0.5, intact_correct=Correctness("0101"), discovery_ids=list("abcd"),
                          discovery_hashes=list("wxyz"), shard=None, config={},
                          splits=SplitManifest(source="s", n_discovery=4, n_heldout=0, discovery_hash="h",
                                               heldout_hash="g", shot_ids=[]),
                          heads=[_row("L10H0", "1101"), _row("L2H0", "10--")], racing=racing)


def test_screen_document_holds_heads_and_bits_and_writes_the_same_file():
    doc = _screen()
    data = doc.to_json()
    assert [r["head"] for r in data["heads"]] == ["L10H0", "L2H0"] and data["heads"][1]["correct"] == "10--"
    assert data["intact_correct"] == "0101" and data["racing"]["pool"] == ["L10H0"]
    back = ScreenDocument.from_json(json.loads(json.dumps(data)))
    assert back == doc and back.heads[0].head == Head(10, 0) and back.racing is not None
    assert back.racing.pool == [Head(10, 0)] and back.heads[1].correct.n_unscored == 2
    assert back.pool(1) == [Head(10, 0)]  # the dropped L2H0 is not a candidate


def test_selection_diagnostics_stability_calibration_and_looks_round_trip():
    a, b = HeadSet.parse("L1H2"), HeadSet.parse("L1H2,L14H8")
    interaction = Interaction(heads=b, gain_count=3, additive_gain_count=1, gap=2, noise=1.0, kind="super-additive")
    diagnostics = DiagnosticsDocument(strategy="algorithm1", rounds=[[a, HeadSet.parse("L14H8")]],
                                      pool=[Head(1, 2), Head(14, 8)], subsets=[interaction])
    assert diagnostics.to_json()["rounds"] == [["L1H2", "L14H8"]] and diagnostics.to_json()["pool"] == ["L1H2", "L14H8"]
    assert diagnostics.to_json()["subsets"][0]["heads"] == ["L1H2", "L14H8"]
    assert DiagnosticsDocument.from_json(diagnostics.to_json()) == diagnostics
    stability = StabilityDocument(
        strategy="greedy", p=2, k=2, resampling="bootstrap", n_resamples=2, fraction=None, seed=0,
        reference_selection=b, reference_frequency=0.5, head_frequency={Head(1, 2): 1.0}, mean_pairwise_jaccard=0.5,
        n_distinct_selections=2, heldout_gain_over_resamples={}, heldout_intact_accuracy=0.5, n_heldout=4,
        selections=[StableSelection(heads=a, frequency=0.5, is_reference=False, discovery_gain=0.1, heldout_gain=0.0,
                                    heldout_gain_ci=[0.0, 0.0], heldout_mcnemar_p=1.0)],
        per_resample=[a, b])
    data = stability.to_json()
    assert data["per_resample"] == [["L1H2"], ["L1H2", "L14H8"]] and data["reference_selection"] == ["L1H2", "L14H8"]
    assert data["head_frequency"] == {"L1H2": 1.0}
    assert StabilityDocument.from_json(data) == stability
    # an object keyed by heads keeps its order (most often chosen first) and refuses keys that are not head names
    ordered = replace(stability, head_frequency={Head(14, 8): 1.0, Head(2, 0): 0.5, Head(10, 0): 0.5})
    assert list(ordered.to_json()["head_frequency"]) == ["L14H8", "L2H0", "L10H0"]
    assert list(StabilityDocument.from_json(ordered.to_json()).head_frequency) == [Head(14, 8), Head(2, 0), Head(10, 0)]
    for bad in ({"layer one": 1.0}, ["L1H2"]):
        with pytest.raises(RunStoreError, match=r"field 'head_frequency' should hold a head name .*\(as object keys\)"):
            StabilityDocument.from_json({**data, "head_frequency": bad})
    object.__setattr__(ordered, "head_frequency", {"L1H2": 1.0})
    with pytest.raises(TypeError, match=r"head_frequency holds parsed values \(Head, as object keys\), got"):
        ordered.__post_init__()
    calibration = CalibrationDocument(null="random-heads", repeats=1, seed=0, n_candidates=3, set_size=2,
                                      null_discovery_gains=[0.1], null_heldout_gains=[0.0], observed_discovery_gain=0.2,
                                      observed_heldout_gain=None, p_value=0.5, validity="valid", null_sets=[b])
    assert calibration.to_json()["null_sets"] == [["L1H2", "L14H8"]]
    assert CalibrationDocument.from_json(calibration.to_json()) == calibration
    look = LookRecord(seq=0, what="test", heads=[b], n=4, heldout_hash="h", frozen=True, exploratory=False,
                      forced=False, complete=True, result="test.json", chained=True)
    assert LookRecord.from_json(look.to_json()) == look and look.to_json()["heads"] == [["L1H2", "L14H8"]]


def test_a_record_built_with_the_files_form_is_refused_naming_the_field():
    """Under pytest jaxtyping's runtime checker refuses the wrong type at ``__init__`` first; the records' own check
    (what a user without it meets) is called here on a row whose field was replaced after construction."""
    with pytest.raises(TypeError):
        ScreenRow(head="L1H2", accuracy=0.5, gain=0.0, gain_count=0, damage=0, fixes=0,  # type: ignore[arg-type]
                  correct=Correctness("01"))
    row = _row("L1H2", "01")
    object.__setattr__(row, "head", "L1H2")
    with pytest.raises(TypeError, match=r"ScreenRow.head holds parsed values \(Head\), got 'L1H2'.*from_json"):
        row.__post_init__()
    row = _row("L1H2", "01")
    object.__setattr__(row, "correct", "01")
    with pytest.raises(TypeError, match=r"ScreenRow.correct holds parsed values \(Correctness\)"):
        row.__post_init__()
    look = LookRecord(seq=0, what="test", heads=[], n=4, heldout_hash="h", frozen=True, exploratory=False,
                      forced=False, complete=True, result=None, chained=True)
    object.__setattr__(look, "heads", [["L1H2"]])
    with pytest.raises(TypeError, match=r"LookRecord.heads holds parsed values \(HeadSet, in lists\)"):
        look.__post_init__()


@pytest.mark.parametrize(("field", "value", "shape"), [
    ("heads", "L1H2", "a list of head names"),
    ("heads", ["L1H2", "layer one"], "a list of head names"),
    ("rounds", [["L1H2,", 3]], "a head set written as one string"),
])
def test_a_malformed_value_in_a_file_names_the_file_and_the_field(tmp_path, field, value, shape):
    selection = {"schema_version": 1, "heads": ["L1H2"], "rounds": [["L1H2"]]}
    data = {**selection, field: value}
    with pytest.raises(RunStoreError, match=rf"{tmp_path}/selection.json: field '{field}' should hold {shape}"):
        SelectionDocument.from_json(data, f"{tmp_path}/selection.json")


@pytest.mark.parametrize(("field", "value", "shape"), [
    ("intact_correct", "01x1", "per-example bits"),
    ("model", {"name": "m", "n_layers": 11, "n_heads": 1}, "an object of model facts"),  # no weight hash
    ("task", ["t"], "an object of task settings"),
    ("splits", {"source": "s"}, "a split manifest"),
])
def test_a_malformed_value_in_a_screen_names_the_field(field, value, shape):
    data = _screen().to_json()
    data[field] = value
    with pytest.raises(RunStoreError, match=f"screen.json: field '{field}' should hold {shape}"):
        ScreenDocument.from_json(data, "screen.json")


def test_model_and_task_records_keep_every_key_and_read_the_common_ones():
    facts = {"name": "m", "source": "gguf", "n_layers": 11, "n_heads": 1, "weight_hash": "w", "quantization": "q4"}
    doc = _screen()
    data = doc.to_json() | {"model": facts, "task": {"task": "jsonl:x", "kind": "target", "grading": "teacher"}}
    back = ScreenDocument.from_json(data)
    assert back.to_json() == data and back.model.get("quantization") == "q4" and back.model.n_layers == 11
    assert back.task.name == "jsonl:x" == back.task_name and back.model.name == "m" == back.model_name
    assert back.splits.heldout_hash == "g" and back.splits.to_json() == data["splits"]


def test_a_document_that_names_its_model_and_task_holds_them_parsed_and_writes_the_same_strings():
    """test.json, transfer.json, eval.json, replicate.json and head_attributes.json name the model and task that
    screen.json and selection.json carry whole: as a ModelName / TaskName, written as the string it always was, equal
    to the record's own reference, and refused when the file holds anything but a non-empty string."""
    from celtk.store.documents import EvalDocument, EvalExample, ModelName, TaskName

    doc = EvalDocument(model=ModelName("tiny-llama"), task=TaskName("arithmetic:2da"), heads=HeadSet.parse("L1H2"),
                       n=1, accuracy=1.0, examples=[EvalExample(id="a", correct=True, logprob=-0.5)], config={},
                       held_back=[])
    data = doc.to_json()
    assert (data["model"], data["task"]) == ("tiny-llama", "arithmetic:2da")
    back = EvalDocument.from_json(data)
    assert back == doc and back.task.family == "arithmetic" and str(back.model) == "tiny-llama"
    screen = _screen()
    assert screen.model.ref == ModelName(screen.model.name) and screen.task.ref == TaskName(screen.task.name)
    assert TaskName("boolq").family == "boolq"
    for bad, shape in [(["tiny-llama"], "a model's name"), ("", "a model's name")]:
        with pytest.raises(RunStoreError, match=f"eval.json: field 'model' should hold {shape}"):
            EvalDocument.from_json({**data, "model": bad}, "eval.json")
    with pytest.raises(RunStoreError, match="eval.json: field 'task' should hold a task's full name"):
        EvalDocument.from_json({**data, "task": {"task": "arithmetic:2da"}}, "eval.json")
    built = replace(doc)
    object.__setattr__(built, "model", "tiny-llama")  # the file's form, not the parsed value
    with pytest.raises(TypeError, match=r"EvalDocument.model holds parsed values \(ModelName\)"):
        built.__post_init__()


def test_correctness_writes_and_reads_its_bits():
    c = Correctness.of(np.array([True, False, True, True]), scored=[True, True, False, True])
    assert c.bits == "10-1" and len(c) == 4 and c.n_scored == 3 and c.n_unscored == 1
    assert c.outcomes().tolist() == [True, False, False, True] and c.scored().tolist() == [True, True, False, True]
    assert Correctness.of([0, 1]) == Correctness("01") != Correctness("10")
    with pytest.raises(RunStoreError, match="malformed correctness"):
        Correctness("0120")
    with pytest.raises(ValueError, match="3 outcomes but 2 scored flags"):
        Correctness.of([1, 0, 1], scored=[1, 1])


def test_a_head_set_answers_membership_of_a_head_or_its_name():
    heads = HeadSet.parse("L1H2,L14H8")
    assert Head(1, 2) in heads and "L14H8" in heads and "L2H1" not in heads and Head(2, 1) not in heads


# modules that read heads or per-example bits from outside the library: files celtk writes (the documents, the
# held-out log, the racing and search part caches), circuit files, and a user's argument
BOUNDARIES = {"celtk/heads.py", "celtk/store/documents/codecs.py", "celtk/store/heldout.py", "celtk/run/racescreen.py",
              "celtk/store/memo.py", "celtk/circuits/__init__.py", "celtk/probe.py"}


def test_nothing_outside_the_boundaries_parses_heads_or_bits():
    """``Head.parse``, ``HeadSet.parse`` / ``HeadSet.of`` and ``Correctness(...)`` from a string are the parsers;
    the rest of the library receives their results."""
    found = []
    for path in sorted(CELTK.rglob("*.py")):
        name = path.relative_to(CELTK.parent).as_posix()
        if name in BOUNDARIES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                    and (f.value.id, f.attr) in {("Head", "parse"), ("HeadSet", "parse"), ("HeadSet", "of")}):
                found.append(f"{name}:{node.lineno} {f.value.id}.{f.attr}")
            if isinstance(f, ast.Name) and f.id in ("Correctness", "unbits"):
                found.append(f"{name}:{node.lineno} {f.id}(...)")
    assert found == []


def test_the_eval_document_reads_the_file_it_writes():
    from celtk.store.documents import EvalDocument, EvalExample, HeldBack, ModelName, TaskName

    doc = EvalDocument(model=ModelName("m"), task=TaskName("t"), heads=HeadSet.parse("L1H2"), n=2, accuracy=0.5,
                       examples=[EvalExample(id="a", correct=True, logprob=-0.5),
                                 EvalExample(id="b", correct=False, logprob=None, extra={"generation": "x"})],
                       config={"split": "heldout"}, held_back=[HeldBack(id="c", reason="few-shot pool")])
    data = doc.to_json()
    assert list(data) == ["schema_version", "model", "task", "heads", "n", "accuracy", "examples", "config",
                          "held_back"]
    assert data["heads"] == ["L1H2"] and data["examples"][1] == {"id": "b", "correct": False, "logprob": None,
                                                                 "extra": {"generation": "x"}}
    assert EvalDocument.from_json(data) == doc and doc.correct().tolist() == [True, False]
