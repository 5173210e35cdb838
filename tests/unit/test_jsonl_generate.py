"""JSONL tasks graded on the generation: the ``?grading=generate`` spelling, its options, the
string grader, and the lines it refuses at load."""

from __future__ import annotations

import json

import pytest

from celtk.errors import DataFormatError, TaskError
from celtk.tasks import get_task
from celtk.tasks.jsonl import DEFAULT_MAX_NEW_TOKENS, jsonl_spec


def _file(tmp_path, rows, name="free.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


ROWS = [{"id": "a", "prompt": "2+2=", "target": "4"}, {"id": "b", "prompt": "Capital of France?", "target": " Paris "}]


def test_generate_grading_spelling_and_defaults(tmp_path):
    path = _file(tmp_path, ROWS)
    assert get_task(f"jsonl:{path}").kind == "target"  # teacher-forced stays the default
    spec = jsonl_spec(path, "generate")
    assert spec == f"jsonl:{path}?grading=generate"
    task = get_task(spec)
    assert task.kind == "generate" and task.stop_strings() == ["\n"] and task.max_new_tokens() == DEFAULT_MAX_NEW_TOKENS
    assert task.config()["grading"] == "generate" and task.config()["task"] == spec  # recorded in run fingerprints
    assert not task.runs_code


@pytest.mark.parametrize("stop", [("\n",), ("###", "\n\n"), ("a&b=c?",), ()])
def test_stop_strings_and_limit_round_trip(tmp_path, stop):
    task = get_task(jsonl_spec(_file(tmp_path, [{"prompt": "p", "target": "zz"}]), "generate", stop=stop,
                               max_new_tokens=7))
    assert task.stop_strings() == list(stop) and task.max_new_tokens() == 7


def test_string_grader_strips_surrounding_whitespace_only(tmp_path):
    task = get_task(jsonl_spec(_file(tmp_path, ROWS), "generate"))
    a, b = task.load_pools().discovery
    assert task.grade_generation(a, " 4 ", False) and task.grade_generation(b, "Paris\t", False)
    assert not task.grade_generation(a, "4.", False) and not task.grade_generation(b, "paris", False)
    assert not task.grade_generation(b, "Pa ris", False)


@pytest.mark.parametrize("query,message", [
    ("grading=sampled", r"grading 'sampled' unknown; use one of teacher, generate"),
    ("grading=generate&temperature=1", r"option\(s\) temperature unknown; valid: grading, stop, max_new_tokens"),
    ("grading=generate&max_new_tokens=0", r"max_new_tokens must be a positive integer, got '0'"),
    ("grading=generate&max_new_tokens=ten", r"max_new_tokens must be a positive integer, got 'ten'"),
    ("stop=%0A", r"apply only to grading=generate"),
])
def test_bad_options_are_refused(tmp_path, query, message):
    with pytest.raises(TaskError, match=message):
        get_task(f"jsonl:{_file(tmp_path, ROWS)}?{query}")


@pytest.mark.parametrize("row,message", [
    ({"prompt": "p", "target": "   "}, r"free.jsonl:2: 'target' is only whitespace"),
    ({"prompt": "p", "target": ""}, r"free.jsonl:2: 'target' must be a non-empty string"),
    ({"prompt": "p", "target": "two\nlines"}, r"free.jsonl:2: target 'two\\nlines' contains the stop string '\\n'"),
    ({"prompt": "p", "choices": ["a", "b"], "label": 0}, r"free.jsonl:2: grading=generate needs prompt\+target lines"),
])
def test_lines_that_cannot_be_graded_are_refused_naming_the_line(tmp_path, row, message):
    with pytest.raises(DataFormatError, match=message):
        get_task(jsonl_spec(_file(tmp_path, [ROWS[0], row]), "generate"))


def test_multiline_target_allowed_with_another_stop_and_question_mark_in_path(tmp_path):
    path = _file(tmp_path, [{"prompt": "p", "target": "two\nlines"}], name="what?.jsonl")
    assert get_task(f"jsonl:{path}").kind == "target"  # a '?' without options is part of the path
    assert get_task(jsonl_spec(path, "generate", stop=("###",))).kind == "generate"
