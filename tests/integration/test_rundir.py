"""A run directory cannot mix results: a screen merged from shards of other settings, a document copied in from
another run, a stage rerun under other settings; each is refused with the file that disagrees named, or (stored
subset outcomes) kept apart by settings."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from _support import copy_document, edit_document, planted_config

from celtk.errors import RunStoreError
from celtk.run import RunConfig, merge_shards, run_screen, run_select, run_test
from celtk.store.files import locked

SCREEN_FILES = ("screen.json", "screen.csv", "fingerprint.json", "config.json", "intact.json", "timing.json")


def _lines(n: int, offset: int = 0) -> str:
    return "".join(json.dumps({"prompt": f"{i} plus {offset} is", "target": f" {i + offset}"}) + "\n" for i in range(n))


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("tasks")
    (root / "a.jsonl").write_text(_lines(40, 1))
    (root / "b.jsonl").write_text(_lines(40, 2))
    return f"jsonl:{root / 'a.jsonl'}", f"jsonl:{root / 'b.jsonl'}"


def _config(task: str, **kw) -> RunConfig:
    return RunConfig(model="tiny", task=task, discovery=12, heldout=12, fewshot=0, batch_size=8, **kw)


@pytest.fixture(scope="module")
def runs(tasks, tiny_llama, tmp_path_factory) -> dict[str, Path]:
    """Two finished runs (screen, select, test) of the same tiny model on two tasks."""
    out = {}
    for name, task in zip("ab", tasks, strict=True):
        out[name] = tmp_path_factory.mktemp(f"run-{name}")
        run_screen(_config(task), out[name], model=tiny_llama)
        run_select(out[name], p=3, k=2, model=tiny_llama, force=True)  # a tiny random model gains nothing
        run_test(out[name], model=tiny_llama, n_boot=200)
    return out


def _copy(src: Path, tmp: Path, name: str = "run") -> Path:
    return Path(shutil.copytree(src, tmp / name))


def test_merge_refuses_shards_of_other_settings_over_a_finished_run(runs, tasks, tiny_llama, tmp_path):
    out = _copy(runs["a"], tmp_path)
    before = (out / "screen.json").read_bytes()
    for i in range(2):
        run_screen(_config(tasks[0], seed=1), out, shard=(i, 2), model=tiny_llama)
    with pytest.raises(RunStoreError,
                       match=r"different configuration \(settings of the shards vs fingerprint\.json\)"
                             r".*seed: stored 0, now 1"):
        merge_shards(out)
    assert (out / "screen.json").read_bytes() == before  # the finished run is untouched


def test_merge_takes_the_lock(runs, tasks, tiny_llama, tmp_path):
    out = tmp_path / "sharded"
    for i in range(2):
        run_screen(_config(tasks[0]), out, shard=(i, 2), model=tiny_llama)
    with locked(out), pytest.raises(RunStoreError, match="in use by celtk pid"):
        merge_shards(out)
    assert not (out / "screen.json").exists()
    assert len(merge_shards(out).heads) == 12  # and merges once the directory is free


def test_merge_refuses_shards_that_do_not_cover_every_head_once(tasks, tiny_llama, tmp_path):
    out = tmp_path / "sharded"
    for i in range(2):
        run_screen(_config(tasks[0]), out, shard=(i, 2), model=tiny_llama)
    def rename(doc):
        doc["heads"][0]["head"] = "L7H7"  # same count of heads, but one is not the model's
        return doc

    edit_document(out / "shard-1-of-2", "screen.json", rename)
    (out / "shard-9-of-2.txt").write_text("an odd file beside the shards is ignored")
    with pytest.raises(RunStoreError, match=r"covers 11 of the model's 12 heads .*unexpected or repeated L7H7"):
        merge_shards(out)
    assert not (out / "screen.json").exists()


def test_partial_screen_is_refused(runs, tiny_llama, tmp_path):
    out = _copy(runs["a"], tmp_path)
    edit_document(out, "screen.json", lambda doc: doc | {"heads": doc["heads"][:5]})
    with pytest.raises(RunStoreError, match=r"screen\.json covers 5 of the model's 12 heads"):
        run_select(out, p=3, k=2, model=tiny_llama, force=True)  # past the frozen-set refusal, to the integrity check


def test_screen_of_another_task_copied_into_a_run_is_refused(runs, tiny_llama, tmp_path):
    out = _copy(runs["a"], tmp_path)
    shutil.copy(runs["b"] / "screen.json", out / "screen.json")
    with pytest.raises(RunStoreError, match=r"screen\.json was changed after celtk wrote it"):  # caught by its digest
        run_select(out, p=3, k=2, model=tiny_llama, force=True)
    copy_document(runs["b"], out, "screen.json")  # and, behind the digest, by the same-run check
    with pytest.raises(RunStoreError, match=r"screen\.json does not belong to the run of fingerprint\.json \(task: "):
        run_select(out, p=3, k=2, model=tiny_llama, force=True)  # past the frozen-set refusal, to the integrity check


def test_selection_of_another_run_is_refused_by_test(runs, tiny_llama, tmp_path):
    out = _copy(runs["a"], tmp_path)
    copy_document(runs["b"], out, "selection.json")
    # refused before any model loads: the selection was searched on another screen than this directory's
    with pytest.raises(RunStoreError, match=r"selection\.json was searched on another screen\.json than the one in"):
        run_test(out, model=tiny_llama, n_boot=200, force=True)  # past the second-test refusal, to the same-run check


def test_report_refuses_documents_of_two_runs(runs, tmp_path):
    from celtk.report import write_report

    out = _copy(runs["a"], tmp_path, "old-test")
    shutil.copy(runs["b"] / "test.json", out / "test.json")  # the held-out log recorded another test.json
    with pytest.raises(RunStoreError, match=r"test\.json differs from the test\.json the held-out log recorded"):
        write_report(out)
    out = _copy(runs["a"], tmp_path, "new-screen")
    copy_document(runs["b"], out, "screen.json")
    with pytest.raises(RunStoreError, match=r"screen\.json does not belong to the run of fingerprint\.json"):
        write_report(out)
    assert write_report(runs["a"]).exists()  # one run's documents still make a report


def test_stored_subset_outcomes_are_never_reused_under_other_settings(planted, tmp_path):
    """Start over in a directory that keeps select_parts/ from a seed-0 search: the seed-1 search
    must score its own subsets (the old code took seed-0 outcomes and ranked different sets)."""
    from _support import planted_config

    model, task = planted
    out = tmp_path / "reused"
    run_screen(planted_config(task), out, model=model)
    run_select(out, p=4, k=2, model=model)
    for name in SCREEN_FILES + ("selection.json",):
        (out / name).unlink()
    shutil.rmtree(out / "screen_parts")
    seed1 = replace(planted_config(task), seed=1)
    run_screen(seed1, out, model=model)
    reused = run_select(out, p=4, k=2, model=model)
    fresh_dir = tmp_path / "fresh"
    run_screen(seed1, fresh_dir, model=model)
    fresh = run_select(fresh_dir, p=4, k=2, model=model)
    assert ([(r.heads, r.fixes, r.damage) for r in reused.ranking]
            == [(r.heads, r.fixes, r.damage) for r in fresh.ranking])
    assert list((out / "select_parts").glob("sets-stale-*/*.json"))  # the old outcomes were moved aside, not lost


def _count_reads(out: Path, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count every read-only open of a file in ``out`` (each of celtk's bounded reads opens its file once; a directory
    opened to sync it is not a read)."""
    reads: Counter[str] = Counter()
    real, out = os.open, out.resolve()

    def counted(path, flags, *args, **kwargs):
        file = Path(os.fsdecode(path)).resolve()
        if flags & os.O_ACCMODE == os.O_RDONLY and file.parent == out and not file.is_dir():  # a sync opens dirs
            reads[file.name] += 1
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counted)
    return reads


def test_a_stage_reads_each_file_of_its_run_once(planted, tmp_path, monkeypatch):
    """A stage opens one RunDirectory, which keeps what it read while its lock is held: select's require, its racing
    tie-break check, load_screen and admit share one read of screen.json, digests.json and fingerprint.json, and
    what select and test write is not read back."""
    model, task = planted
    out = tmp_path / "run"
    run_screen(planted_config(task), out, model=model)
    with monkeypatch.context() as patch:
        reads = _count_reads(out, patch)
        run_select(out, p=4, k=2, model=model)
    assert (reads["screen.json"], reads["digests.json"]) == (1, 1), reads
    assert set(reads.values()) == {1}, reads
    with monkeypatch.context() as patch:
        reads = _count_reads(out, patch)
        run_test(out, model=model, n_boot=50)
    assert set(reads.values()) == {1}, reads
    assert "test.json" not in reads, reads
