"""Every task on fixtures (hub schema), the offline generator, JSONL errors and split disjointness."""

import json
import re
from pathlib import Path

import pytest

from celtk.errors import DataFormatError, SplitError, TaskError
from celtk.tasks import get_task, make_splits, task_names
from celtk.tasks._base import Example, Pools, Task
from celtk.tasks._splits import check_disjoint
from celtk.tasks.arithmetic import OFFICIAL_FILES, SUBTASKS, generate, normalize_context

FIX = Path(__file__).parent.parent / "fixtures"


def test_registry_lists_tasks_and_suggests():
    assert {"arithmetic", "boolq", "hellaswag", "mbpp", "jsonl"} <= set(task_names())
    with pytest.raises(TaskError, match="Did you mean: 'hellaswag'"):
        get_task("helaswag")
    with pytest.raises(TaskError, match="Did you mean: .*'2da'"):
        get_task("arithmetic:2dx")


@pytest.mark.parametrize("sub", SUBTASKS)
def test_generator_formats_and_ranges(sub):
    examples = generate(sub, 300, seed=0)
    for e in examples:
        assert e.target is not None
        assert e.context.startswith("Question: What is ") and e.context.endswith("?\nAnswer:")
        assert e.target.startswith(" ") and not e.target.startswith("  ")
        question = e.context[len("Question: What is "):-len("?\nAnswer:")]
        if sub == "1dc":
            assert eval(question) == int(e.target)  # noqa: S307 - our own generated arithmetic
            continue
        x, word, y = question.split(" ")
        digits = int(sub[0])
        assert 0 <= int(x) < 10**digits and 0 <= int(y) < 10**digits
        assert int(e.target) == {"plus": int(x) + int(y), "minus": int(x) - int(y), "times": int(x) * int(y)}[word]
    if sub != "1dc":  # operands cover the whole range [0, 10**N), small values included
        firsts = [int(e.context.split()[3]) for e in generate(sub, 2000, 0)]
        assert max(firsts) >= 0.95 * 10 ** int(sub[0]) and min(firsts) < 0.05 * 10 ** int(sub[0])


def test_generator_is_seeded():
    assert generate("3ds", 20, 0) == generate("3ds", 20, 0)
    assert generate("3ds", 20, 0) != generate("3ds", 20, 1)


def test_arithmetic_hub_schema_fixture():
    task = get_task("arithmetic:2da", data_path=str(FIX / "arithmetic"))
    pools = task.load_pools()
    assert len(pools.discovery) + len(pools.fewshot) == 6
    assert pools.discovery[0].context == "Question: What is 1 plus 2?\nAnswer:" and pools.discovery[0].target == " 3"


def test_raw_gpt3_context_is_normalised_as_lm_eval_does():
    # lm-eval 0.4.13 tasks/arithmetic/utils.py: strip, "\n\n" -> "\n", "Q:" -> "Question:", "A:" -> "Answer:"
    assert normalize_context("\n\nQ: What is 98 plus 45?\n\nA:") == "Question: What is 98 plus 45?\nAnswer:"
    assert normalize_context("Question: What is 1 plus 2?\nAnswer:") == "Question: What is 1 plus 2?\nAnswer:"


def test_official_raw_files_are_normalised_and_shots_come_from_them():
    raw = FIX / "arithmetic" / "raw"
    lines = [json.loads(x) for x in (raw / "data" / "two_digit_addition.jsonl").read_text().splitlines()]
    task = get_task("arithmetic:2da", data_path=str(raw))
    pools = task.load_pools()
    assert pools.source == "file" and len(pools.discovery) + len(pools.fewshot) == len(lines) == 12
    official = {normalize_context(x["context"]): x["completion"] for x in lines}
    for e in pools.discovery + pools.fewshot:
        assert official[e.context] == e.target and e.context.startswith("Question: What is ")
    assert (pools.fewshot
            and {e.content_hash for e in pools.fewshot}.isdisjoint({e.content_hash for e in pools.discovery}))
    splits = make_splits(task, 4, 4, fewshot=2)
    assert all(s.context in official for s in splits.shots)  # shots are official rows, not generated ones


def test_official_files_for_every_subtask_are_named_as_on_the_hub():
    assert set(OFFICIAL_FILES) == set(SUBTASKS) and OFFICIAL_FILES["1dc"] == "single_digit_three_ops"
    task = get_task("arithmetic:3da", data_path=str(FIX / "arithmetic" / "raw"))
    with pytest.raises(TaskError, match="three_digit_addition.jsonl"):
        task.load_pools()


ONE_DC = re.compile(r"^Question: What is \((\d) ([-+*]) (\d)\) ([-+*]) (\d)\?\nAnswer:$")


def test_generator_1dc_reads_like_the_official_data():
    official = get_task("arithmetic:1dc", data_path=str(FIX / "arithmetic" / "raw")).load_pools()
    for e in official.discovery + generate("1dc", 200, seed=0):
        match = ONE_DC.match(e.context)
        assert match, e.context
        a, o1, b, o2, c = match.groups()
        assert e.target is not None
        assert eval(f"({a} {o1} {b}) {o2} {c}") == int(e.target)  # noqa: S307 - our own arithmetic


def test_script_dataset_is_a_clear_error(tmp_path):
    from celtk.tasks._hub import load_rows

    (tmp_path / f"{tmp_path.name}.py").write_text("import datasets\n")
    with pytest.raises(TaskError, match="cannot read .*loading script.*--data PATH"):
        load_rows(str(tmp_path), None, "train", None)


def test_malformed_local_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "data"
    bad.mkdir()
    (bad / "two_digit_addition.jsonl").write_text('{"context": "Q: 1", "completion": " 2"}\n{not json\n')
    with pytest.raises(TaskError, match="two_digit_addition.jsonl"):
        get_task("arithmetic:2da", data_path=str(tmp_path)).load_pools()
    (bad / "two_digit_addition.jsonl").write_text('{"question": "Q: 1"}\n')
    with pytest.raises(DataFormatError, match="lacks string 'context'/'completion'"):
        get_task("arithmetic:2da", data_path=str(tmp_path)).load_pools()


def test_boolq_fixture():
    task = get_task("boolq", data_path=str(FIX / "boolq"))
    splits = make_splits(task, 4, 3, fewshot=1)
    ex = splits.heldout[0]
    assert ex.context.endswith("?\nAnswer:") and "\nQuestion: " in ex.context and ex.choices == ("no", "yes")
    assert task.target_delimiter == " "
    assert {s.content_hash for s in splits.shots}.isdisjoint({e.content_hash for e in splits.discovery})


def test_hellaswag_fixture_preprocessing():
    task = get_task("hellaswag", data_path=str(FIX / "hellaswag"))
    pools = task.load_pools()
    ex = pools.discovery[0]
    assert ex.context == "Making tea: A person boils water in a kettle. (0) They"
    assert ex.choices is not None and pools.heldout is not None
    assert ex.choices[0] == "pour the water into a cup. with a tea bag."  # ' [title]' -> '. ', brackets removed
    assert ex.label == 0 and len(pools.heldout) == 5


def test_mbpp_fixture_prompt():
    task = get_task("mbpp", data_path=str(FIX / "mbpp"))
    splits = make_splits(task, 2, 3, fewshot=3)
    assert [s.id for s in splits.shots] == ["prompt-2", "prompt-3", "prompt-4"]  # lm-eval's first_n
    ex = splits.heldout[0]
    assert ex.context.startswith("You are an expert Python programmer, and here is your task: ")
    assert ex.context.endswith("[BEGIN]\n") and "Your code should pass these tests:\n\n" in ex.context
    assert splits.shots[0].shot_text is not None
    assert splits.shots[0].shot_text.endswith("\n[DONE]")


def _write(tmp_path, lines):
    path = tmp_path / "task.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return f"jsonl:{path}"


def test_jsonl_generative_and_choice(tmp_path):
    task = get_task(_write(tmp_path,
                           ['{"prompt": "2+2=", "target": "4"}', '{"id": "b", "prompt": "3+3=", "target": "6"}']))
    pools = task.load_pools()
    assert task.kind == "target" and [e.id for e in pools.discovery] == ["1", "b"]
    task = get_task(_write(tmp_path, ['{"prompt": "Sky?", "choices": ["red", "blue"], "label": 1}']))
    assert task.kind == "choice" and task.load_pools().discovery[0].label == 1


@pytest.mark.parametrize("line,message", [
    ("{not json", r"task.jsonl:2: not valid JSON"),
    ('["a"]', r":2: each line must be a JSON object"),
    ('{"target": "x"}', r":2: missing or non-string field 'prompt'"),
    ('{"prompt": "p"}', r":2: a line needs either 'target'"),
    ('{"prompt": "p", "choices": ["a", "b"], "label": "1"}', r":2: 'label' must be an integer"),
    ('{"prompt": "p", "choices": ["a", "b"], "label": 2}', r":2: label 2 is out of range; it must be 0..1"),
    ('{"prompt": "p", "choices": "ab", "label": 0}', r":2: 'choices' must be a list"),
    ('{"prompt": "p", "target": ""}', r":2: 'target' must be a non-empty string"),
    ('{"prompt": "p", "choices": ["", ""], "label": 0}', r":2: choice 0 is the empty string"),
    ('{"prompt": "p", "choices": ["a", ""], "label": 0}', r":2: choice 1 is the empty string"),
    ('{"prompt": "a\\ud800b", "target": "1"}', r":2: 'prompt' holds a lone surrogate '\\ud800' at character 1"),
    ('{"prompt": "p", "target": "\\udfff"}', r":2: 'target' holds a lone surrogate"),
    ('{"prompt": "p", "choices": ["a", "\\ud800"], "label": 0}', r":2: 'choices\[1\]' holds a lone surrogate"),
    ('{"prompt": "p", "target": "1", "split": ["fewshot"]}', r":2: 'split' must be a string .* got list"),
    ('{"prompt": "p", "target": "1", "split": "few-shot"}', r":2: 'split' is 'few-shot'; write \"fewshot\""),
])
def test_jsonl_errors_name_file_and_line(tmp_path, line, message):
    with pytest.raises(DataFormatError, match=message):
        get_task(_write(tmp_path, ['{"prompt": "ok", "target": "1"}', line]))


def test_jsonl_empty_missing_and_duplicates(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TaskError, match="has no examples"):
        get_task(f"jsonl:{tmp_path / 'empty.jsonl'}")
    with pytest.raises(TaskError, match="does not exist"):
        get_task(f"jsonl:{tmp_path / 'nope.jsonl'}")
    with pytest.raises(DataFormatError, match="repeats an earlier line"):
        get_task(_write(tmp_path,
                        ['{"id": 1, "prompt": "a", "target": "1"}', '{"id": 1, "prompt": "b", "target": "2"}']))


def test_splits_disjoint_reproducible_and_prefix_stable():
    task = get_task("arithmetic:2da")
    a = make_splits(task, 100, 200, seed=3, fewshot=3)
    b = make_splits(task, 100, 200, seed=3, fewshot=3)
    assert [e.id for e in a.discovery] == [e.id for e in b.discovery] and a.shots == b.shots
    assert {e.content_hash for e in a.discovery}.isdisjoint({e.content_hash for e in a.heldout})
    assert {e.content_hash for e in a.shots}.isdisjoint({e.content_hash for e in a.discovery + a.heldout})
    # held-out does not depend on the discovery size, and vice versa
    c = make_splits(task, 50, 200, seed=3, fewshot=3)
    assert [e.id for e in c.heldout] == [e.id for e in a.heldout]
    assert [e.id for e in c.discovery] == [e.id for e in a.discovery[:50]]
    assert [e.id for e in make_splits(task, 100, 200, seed=4).discovery] != [e.id for e in a.discovery]


def test_split_sizes_checked():
    task = get_task("arithmetic:2da")
    with pytest.raises(SplitError, match="at most"):
        make_splits(task, 1500, 1500)
    boolq = get_task("boolq", data_path=str(FIX / "boolq"))
    with pytest.raises(SplitError, match="only 6 are available"):
        make_splits(boolq, 2, 7)


class _Overlapping(Task):
    name = "overlap"
    kind = "target"

    def load_pools(self):
        shared = Example("d1", "Q: same", " 1")
        return Pools(discovery=[shared, Example("d2", "Q: two", " 2")], heldout=[Example("h1", "Q: same", " 1")],
                     fewshot=[], source="test")


def test_overlap_by_content_is_removed_from_discovery_and_checked():
    splits = make_splits(_Overlapping(), None, None)
    assert [e.id for e in splits.discovery] == ["d2"]
    with pytest.raises(SplitError, match=r"d1 \(discovery\) = h1 \(held-out\)"):
        check_disjoint([Example("d1", "Q: same", " 1")], [Example("h1", "Q: same", " 1")])


def test_test_stage_refuses_heldout_that_repeats_discovery():
    from celtk.store.directory import check_no_overlap as _check_no_overlap

    held = [Example("h1", "Q: same", " 1"), Example("h2", "Q: other", " 2")]
    with pytest.raises(SplitError, match=r"shares 1 example\(s\) .*d7 \(discovery\) = h1 \(held-out\)"):
        _check_no_overlap([Example("d7", "Q: same", " 1").content_hash], ["d7"], held)
    _check_no_overlap([Example("d8", "Q: new", " 3").content_hash], ["d8"], held)


def test_one_arithmetic_file_stands_for_its_own_subtask_only():
    """A single --data file holds one subtask: refused for the whole family (it would be read as all
    ten, mislabelled), and refused as another subtask than the one its questions belong to."""
    from celtk.errors import DataFormatError, TaskError

    file = str(FIX / "arithmetic" / "raw" / "data" / "two_digit_addition.jsonl")
    assert len(get_task("arithmetic:2da", data_path=file).load_pools().discovery) > 0
    with pytest.raises(TaskError, match="one file, which holds one arithmetic subtask; name it"):
        get_task("arithmetic", data_path=file).load_pools()
    with pytest.raises(DataFormatError, match="is not a question of arithmetic subtask 2ds"):
        get_task("arithmetic:2ds", data_path=file).load_pools()
    with pytest.raises(DataFormatError, match="is not a question of arithmetic subtask 3da"):
        get_task("arithmetic:3da", data_path=file.replace("two_digit_addition", "single_digit_three_ops")).load_pools()


def _official_rows(n: int) -> list[str]:
    return [json.dumps({"context": f"\n\nQ: What is {i} plus {i + 7}?\n\nA:", "completion": f" {2 * i + 7}"})
            for i in range(n)]


def test_splits_name_the_rows_no_split_holds_and_why(tmp_path):
    """The official files' few-shot reserve is held back whatever the shot count (so discovery and
    held-out do not move with --fewshot); Splits.held_back names it and repeated rows."""
    path = tmp_path / "two_digit_addition.jsonl"
    path.write_text("\n".join(_official_rows(80)) + "\n")
    task = get_task("arithmetic:2da", data_path=str(path))
    every = {f"2da-{i}" for i in range(80)}
    zero, three = make_splits(task, None, None, fewshot=0), make_splits(task, None, None, fewshot=3)
    assert (zero.discovery, zero.heldout) == (three.discovery, three.heldout) and not zero.shots
    scored = {e.id for e in zero.discovery + zero.heldout}
    held = dict(zero.held_back)
    assert len(scored) == 60 and len(held) == 20 and scored | set(held) == every and not scored & set(held)
    assert set(held.values()) == {"few-shot pool"}
    shot_text = {e.context for e in task.load_pools().fewshot}  # the held-back rows are the shots' source
    assert ({e.context for e in task.load_pools().reserved} == shot_text
            and {e.id for e in task.load_pools().reserved} == set(held))
    assert held == dict(three.held_back)

    # a jsonl file: a row repeating another, and one equal to a few-shot line
    spec = _write(tmp_path,
                  ['{"id": "a", "prompt": "1+1=", "target": "2"}', '{"id": "b", "prompt": "2+2=", "target": "4"}',
                   '{"id": "c", "prompt": "1+1=", "target": "2"}', '{"id": "d", "prompt": "5+5=", "target": "10"}',
                   '{"id": "s", "prompt": "5+5=", "target": "10", "split": "fewshot"}'])
    splits = make_splits(get_task(spec), None, None)
    assert sorted(e.id for e in splits.discovery + splits.heldout) == ["a", "b"]
    assert dict(splits.held_back) == {"c": "same content as a", "d": "few-shot pool"}
