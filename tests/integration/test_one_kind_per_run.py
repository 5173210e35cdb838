"""A run directory holds one kind of everything: a screen of another kind is refused with nothing
changed on disk, a resumed screen checks its parts cover every head once, and a racing chunk's
intact pass must agree with the screen's."""

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
from _support import planted_config

from celtk.errors import RunStoreError
from celtk.heads import HeadSet, all_heads
from celtk.run import run_screen
from celtk.run.racescreen import ChunkScorer
from celtk.run.session import Session


def _config(task, **kw):
    return replace(planted_config(task), p=1, k=1, **kw)


@pytest.fixture(scope="module")
def screened(planted, tmp_path_factory):
    """An exhaustive and a racing screen of the planted run."""
    model, task = planted
    exhaustive, racing = tmp_path_factory.mktemp("exhaustive"), tmp_path_factory.mktemp("racing")
    run_screen(_config(task), exhaustive, model=model)
    run_screen(_config(task, screen="racing"), racing, model=model)
    return exhaustive, racing


def _files(directory):
    """Every file's bytes, except the lock (which names its latest holder)."""
    return {p.relative_to(directory): p.read_bytes() for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.mark.parametrize("into, kind", [(0, "racing"), (1, "exhaustive")])
def test_a_screen_of_another_kind_is_refused_and_nothing_changes(planted, screened, tmp_path, into, kind):
    model, task = planted
    out = tmp_path / "run"
    shutil.copytree(screened[into], out)
    before = _files(out)
    with pytest.raises(RunStoreError, match=f"screen: stored '[a-z]+', now '{kind}'.*nothing was changed.*--out"):
        run_screen(_config(task, screen=kind), out, model=model)
    assert _files(out) == before


def test_a_fingerprint_without_the_screen_kind_is_refused_naming_it(planted, screened, tmp_path):
    """The screen kind is in every fingerprint: one without it is not read as exhaustive, even by the screen that
    wrote it rerun with the same settings."""
    model, task = planted
    out = tmp_path / "run"
    shutil.copytree(screened[0], out)
    stored = json.loads((out / "fingerprint.json").read_text())
    assert stored.pop("screen") == "exhaustive"
    (out / "fingerprint.json").write_text(json.dumps(stored))
    before = _files(out)
    with pytest.raises(RunStoreError, match="fingerprint.json lacks screen, which celtk records in every run's "
                                            "fingerprint"):
        run_screen(_config(task), out, model=model)
    assert _files(out) == before


def _part(out, layer):
    return out / "screen_parts" / f"L{layer}.json"


@pytest.mark.parametrize("damage, message", [
    ("layer beyond the model", "holds layer 7, but the model has layers 0..2"),
    ("a head missing", r"missing: L1H3"),
    ("a head twice", r"repeated: L1H0"),
    ("a stranger head", r"heads not in this screen: L1H9"),
])
def test_a_resumed_screen_checks_its_parts_cover_every_head_once(planted, screened, tmp_path, damage, message):
    model, task = planted
    out = tmp_path / "run"
    shutil.copytree(screened[0], out)
    part = json.loads(_part(out, 1).read_text())
    if damage == "layer beyond the model":
        _part(out, 7).write_text(json.dumps({**part, "layer": 7}))
    elif damage == "a head missing":
        part["heads"] = part["heads"][:-1]
    elif damage == "a head twice":
        part["heads"] = part["heads"] + part["heads"][:1]
    else:
        part["heads"] = part["heads"] + [{**part["heads"][0], "head": "L1H9"}]
    _part(out, 1).write_text(json.dumps(part))
    (out / "screen.json").unlink()
    with pytest.raises(RunStoreError, match=message):
        run_screen(_config(task), out, model=model)
    assert not (out / "screen.json").exists()


def test_a_racing_chunk_whose_intact_pass_disagrees_is_refused(planted, tmp_path):
    """The chunk's own intact verdicts are compared with the screen's intact result on its examples."""
    model, task = planted
    session = Session.open(_config(task, screen="racing"), model)
    n = len(session.splits.discovery)
    intact, _ = session.screener("discovery").run([])
    heads = [HeadSet((all_heads(model.n_layers, model.n_heads)[5],))]
    (tmp_path / "parts").mkdir()
    good = ChunkScorer(session, tmp_path / "parts", None, n, intact.correct)
    good(heads, np.arange(8))
    wrong = intact.correct.copy()
    wrong[9] = not wrong[9]
    shutil.rmtree(tmp_path / "parts")
    (tmp_path / "parts").mkdir()
    bad = ChunkScorer(session, tmp_path / "parts", None, n, wrong)
    with pytest.raises(RunStoreError, match="scores 1 of chunk 0's 8 examples differently"):
        bad(heads, np.arange(8, 16))
