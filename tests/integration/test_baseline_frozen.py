"""One baseline and a frozen held-out set, on the planted tiny run: the null ablation equals the
intact pass, a changed baseline or prompt is refused, select after test is refused unless forced,
every held-out evaluation is logged, and the streamed test equals the cached path."""

import json
import shutil

import numpy as np
import pytest
from _support import edit_document, forget_documents, logprobs, not_none, planted_config

from celtk.errors import RunStoreError
from celtk.evaluation.prompts import prepare
from celtk.heads import HeadSet, all_heads
from celtk.run import run_screen, run_select, run_stability, run_test
from celtk.screening.cached import CachedScreener
from celtk.screening.plain import screen_plain
from celtk.store.documents import SelectionDocument
from celtk.store.heldout import HeldoutLog
from celtk.tasks import get_task, make_splits


@pytest.fixture(scope="module")
def tested_run(planted, tmp_path_factory):
    """A screened, selected and tested planted run (copy it before changing it)."""
    model, task = planted
    out = tmp_path_factory.mktemp("tested")
    run_screen(planted_config(task), out, model=model)
    run_select(out, p=4, k=2, model=model)
    run_test(out, model=model, n_boot=200)
    return out


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("share_prefix", [False, True])
def test_null_ablation_is_the_intact_result_through_the_ablated_path(tiny_model, share_prefix):
    task = get_task("arithmetic")
    splits = make_splits(task, 12, 0, fewshot=2, seed=5)
    prepared = prepare(tiny_model, task, splits.discovery, splits.shots)
    screener = CachedScreener(tiny_model, prepared, batch_size=5, rows_per_pass=10, share_prefix=share_prefix)
    sets = [HeadSet(), HeadSet((all_heads(tiny_model.n_layers, tiny_model.n_heads)[1],))]
    intact, results = screener.run(sets)
    null = results[HeadSet()]
    assert null is not intact  # scored by the replay, not copied from the intact pass
    assert np.array_equal(null.correct, intact.correct)
    np.testing.assert_allclose(logprobs(null), logprobs(intact), atol=1e-6, rtol=0)
    # the intact log-probabilities of the cached and the plain path agree
    plain, _ = screen_plain(tiny_model, prepared, [], batch_size=5)
    np.testing.assert_allclose(logprobs(intact), logprobs(plain), atol=1e-5, rtol=0)


def test_screen_reports_the_null_control(tested_run):
    null = json.loads((tested_run / "screen.json").read_text())["null_ablation"]
    assert null["fixes"] == 0 and null["damage"] == 0 and null["max_abs_logprob_diff"] < 1e-6


def test_select_refuses_a_tampered_intact_baseline(planted, tested_run, tmp_path):
    model, _ = planted
    out = _copy(tested_run, tmp_path / "run")
    forget_documents(out, "test.json", "heldout_log.jsonl", "heldout_log.head")  # an untested run, as before the test

    def flip(screen):
        return {**screen,
                "intact_correct": ("1" if screen["intact_correct"][0] == "0" else "0") + screen["intact_correct"][1:]}

    edit_document(out, "screen.json", flip)
    with pytest.raises(RunStoreError, match="1 of 40 discovery examples differently from the intact result stored"):
        run_select(out, p=4, k=2, model=model)


def test_select_after_test_refused_unless_forced_and_recorded(planted, tested_run, tmp_path):
    model, _ = planted
    out = _copy(tested_run, tmp_path / "run")
    assert run_select(out, p=4, k=2, model=model) == SelectionDocument.load(out)  # the frozen selection, as stored
    with pytest.raises(RunStoreError, match="already been looked at on its held-out set \\(test at .*--force"):
        run_select(out, p=3, k=2, model=model)
    forced = run_select(out, p=4, k=2, model=model, force=True)
    assert forced.forced_after_test is True and [r.what for r in not_none(forced.prior_looks)] == ["test"]
    assert json.loads((out / "selection.json").read_text())["forced_after_test"] is True
    log = HeldoutLog(out)
    assert [look.what for look in log.looks()] == ["test"]
    assert [e["after_looks"] for e in log.events("select-forced")] == [[0]]
    from celtk.report import write_report

    assert "Selected again after the held-out set was looked at" in write_report(out).read_text()


def test_every_heldout_evaluation_is_logged_and_stability_is_exploratory(planted, tested_run, tmp_path):
    model, _ = planted
    out = _copy(tested_run, tmp_path / "run")
    (entry,) = HeldoutLog(out).looks()
    test = json.loads((out / "test.json").read_text())
    assert entry.what == "test" and entry.heads == [HeadSet.of(test["heads"])]
    assert entry.heldout_hash == test["heldout_hash"]
    assert entry.complete and entry.result == "test.json" and not entry.exploratory and entry.frozen
    before = (out / "heldout_log.jsonl").read_text()
    doc = run_stability(out, resamples=3, p=4, k=2, model=model, n_boot=100)
    assert (out / "heldout_log.jsonl").read_text().startswith(before)  # appended, never rewritten
    last = HeldoutLog(out).looks()[-1]
    assert last.what == "stability" and last.exploratory is True and last.result == "stability.json"
    assert sorted(map(tuple, last.heads)) == sorted(tuple(r.heads) for r in doc.selections)
    for row in doc.selections:
        # the tested selection's row repeats its test
        assert row.exploratory == (row.heads != HeadSet.of(test["heads"]))


def test_test_refuses_changed_shots_or_discovery(planted, tested_run, tmp_path):
    model, _ = planted
    out = _copy(tested_run, tmp_path / "run")
    for name in ("test.json", "heldout_log.jsonl", "heldout_log.head"):
        (out / name).unlink()  # untested, so that test runs up to its checks
    selection = json.loads((out / "selection.json").read_text())
    edit_document(out, "selection.json", lambda sel: dict(sel, shots=["x-1"]))
    with pytest.raises(RunStoreError, match="few-shot examples drawn now \\(none\\) differ.*x-1"):
        run_test(out, model=model, n_boot=50)
    edit_document(out, "selection.json", lambda _: dict(selection, discovery_hash="0" * 16))
    # the run-directory integrity check (selection vs screen) now names the disagreeing hash first
    with pytest.raises(RunStoreError, match="discovery hash: '[0-9a-f]{16}' in screen.json, '0{16}' in selection.json"):
        run_test(out, model=model, n_boot=50)


def test_streamed_test_equals_the_cached_path(planted, tested_run):
    """test.json's per-example outcomes from the two streamed plain passes equal the cached
    screener's on the same held-out set."""
    from celtk.run.session import session_for
    from celtk.store.documents import SelectionDocument

    model, _ = planted
    test = json.loads((tested_run / "test.json").read_text())
    session = session_for(SelectionDocument.load(tested_run), model)
    heads = HeadSet.parse(",".join(test["heads"]))
    intact, results = session.screener("heldout").run([heads])
    assert [e["intact_correct"] for e in test["examples"]] == [bool(c) for c in intact.correct]
    assert [e["ablated_correct"] for e in test["examples"]] == [bool(c) for c in results[heads].correct]
    for name, result in (("intact_logprob", intact), ("ablated_logprob", results[heads])):
        np.testing.assert_allclose([e[name] for e in test["examples"]], logprobs(result), atol=1e-5, rtol=0)


def test_a_changed_prompt_or_chat_date_refuses_the_run_directory(planted, tested_run, tmp_path, monkeypatch):
    import celtk.evaluation.prompts as evaluator

    model, task = planted
    out = tmp_path / "run"
    shutil.copytree(tested_run, out)
    with pytest.raises(RunStoreError, match="different configuration .*chat_date"):
        run_screen(planted_config(task, chat_date="2025-01-01"), out, model=model)
    from celtk.tasks import build_context as original  # what the prompts module calls
    monkeypatch.setattr(evaluator, "build_context", lambda *a: original(*a) + " ")  # same settings, another prompt
    with pytest.raises(RunStoreError, match="different configuration .*prompt_hash"):
        run_screen(planted_config(task), out, model=model)


class _BosTokenizer:
    """Adds BOS (id 1) by default, like Llama's and Gemma's; "<s>" in text encodes to BOS."""

    bos_token, bos_token_id = "<s>", 1

    def __call__(self, text, add_special_tokens=True):
        from types import SimpleNamespace

        ids = [1 if part == "<s>" else ord(part) for part in _pieces(text)]
        return SimpleNamespace(input_ids=([1] if add_special_tokens else []) + ids)


def _pieces(text):
    out, i = [], 0
    while i < len(text):
        out.append("<s>" if text.startswith("<s>", i) else text[i])
        i += 3 if out[-1] == "<s>" else 1
    return out


def test_generation_prompts_get_one_bos_when_the_template_writes_it(tiny_llama):
    """generate_greedy encodes prompts with prompt_ids: a chat template that begins with BOS
    must not get a second one; a plain prompt still gets the tokenizer's."""
    from dataclasses import replace

    from celtk.evaluation.prompts import prompt_ids

    model = replace(tiny_llama, tokenizer=_BosTokenizer())
    templated, plain = prompt_ids(model, ["<s>user: hi", "hi"])
    assert templated[:2] == [1, ord("u")] and templated.count(1) == 1
    assert plain == [1, ord("h"), ord("i")]


def test_the_session_resolves_batch_size_once_for_every_stage(planted, tested_run):
    """Session.batch_sizes is the one place a batch size is resolved: the configured size, or under "auto" what
    auto_batch fits; the cached screener and the streamed test passes take it from there."""
    from celtk.evaluation.memory import auto_batch
    from celtk.run.session import session_for
    from celtk.store.documents import SelectionDocument

    model, _ = planted
    selection = SelectionDocument.load(tested_run)
    session = session_for(selection, model)
    prepared = session.prepared("discovery")
    assert session.batch_sizes(prepared) == (8, None)  # the planted runs configure 8
    auto = session_for(selection, model, batch_size="auto")
    fits = auto_batch(model, prepared)
    assert auto.batch_sizes(prepared) == fits and fits[0] != 8
    screener = auto.screener_on(prepared)
    assert (screener.batch_size, screener.rows_per_pass) == fits
