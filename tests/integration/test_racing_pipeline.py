"""The racing screen (screen = "racing") on the planted tiny model: exact mode gives the
exhaustive screen's pool with the same rows, so select and the held-out test give identical
results, while skipping (head, example) evaluations; it resumes; a racing screen is refused
where it cannot stand in for an exhaustive one, and a genuinely partial screen is still refused."""

import csv
import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from _support import edit_document, not_none, planted_config

from celtk.errors import ConfigError, RunStoreError
from celtk.heads import Head, HeadSet
from celtk.report import screen_grids, write_report
from celtk.run import run_screen, run_select, run_test
from celtk.run.analyses import run_compare
from celtk.run.calibrate import screen_discordant
from celtk.run.screen import screen_row
from celtk.run.session import load_screen
from celtk.screening.racing import exhaustive_pool
from celtk.store.documents import Correctness

# the planted head alone leads; the eleven harmless heads tie behind it, so with p = 1 they are
# raced off once the examples left cannot close the gap (with p ≥ 2 a tie keeps them all racing)
P = 1


def config(task, **kw):
    return replace(planted_config(task), p=P, k=1, **kw)


@pytest.fixture(scope="module")
def screens(planted, tmp_path_factory):
    """The exhaustive and the exact racing screen of the same planted run, in two directories."""
    model, task = planted
    exhaustive, racing = tmp_path_factory.mktemp("exhaustive"), tmp_path_factory.mktemp("racing")
    full = run_screen(config(task), exhaustive, model=model)
    raced = run_screen(config(task, screen="racing"), racing, model=model)
    return full, raced, exhaustive, racing


def outcomes(doc):
    return {HeadSet((r.head,)): r.correct.outcomes() for r in doc.heads}


def test_exact_racing_returns_the_exhaustive_pool_with_the_same_rows(screens):
    full, raced, *_ = screens
    intact = full.intact_correct.outcomes()
    reference = [h.heads[0] for h in exhaustive_pool(outcomes(full), intact, P)]
    assert raced.racing.mode == "exact" and raced.racing.delta is None and raced.racing.order is None
    assert raced.racing.pool == reference and Head(1, 2) in reference
    assert raced.intact_correct == full.intact_correct and raced.null_ablation == full.null_ablation
    exhaustive_rows = {r.head: r for r in full.heads}
    assert [r.head for r in raced.heads] == [r.head for r in full.heads]
    for row in raced.heads:
        if row.n_scored is None:  # scored on every example: the exhaustive row itself
            assert row == exhaustive_rows[row.head]
        else:  # dropped early: its first n_scored outcomes are the exhaustive ones, the rest unscored
            assert row.correct == Correctness.of(exhaustive_rows[row.head].correct.outcomes(),
                                                 scored=np.arange(raced.n) < row.n_scored)
            assert row.head not in reference
    assert all(exhaustive_rows[h] in raced.heads for h in reference)


def test_exact_racing_saves_evaluations_and_records_them(screens):
    full, raced, *_ = screens
    racing = raced.racing
    scored = [row.n_scored or raced.n for row in raced.heads]
    assert racing.evaluations == sum(scored) and racing.exhaustive_evaluations == len(full.heads) * full.n
    assert racing.saved_fraction == pytest.approx(1 - sum(scored) / (len(full.heads) * full.n))
    assert racing.saved_fraction > 0 and any(row.n_scored for row in raced.heads)
    assert sum(racing.schedule) == raced.n and racing.racing_after[-1] >= P and racing.uncertified == []


def test_select_and_test_on_a_racing_screen_equal_the_exhaustive_run(planted, screens, monkeypatch, tmp_path):
    model, _ = planted
    _, _, exhaustive, racing = screens
    selections = [run_select(d, p=P, k=1, model=model) for d in (exhaustive, racing)]
    assert selections[0].heads == selections[1].heads and selections[0].pool == selections[1].pool
    assert selections[0].ranking == selections[1].ranking and Head(1, 2) in selections[1].heads
    assert selections[0].discovery_accuracy == selections[1].discovery_accuracy
    tests = [run_test(exhaustive, model=model, n_boot=300)]
    monkeypatch.setenv("CELTK_LEDGER", str(tmp_path / "racing-ledger.jsonl"))  # one held-out set, tested twice
    tests.append(run_test(racing, model=model, n_boot=300))
    assert tests[0].examples == tests[1].examples and tests[0].gain == tests[1].gain > 0
    assert tests[0].gain_ci == tests[1].gain_ci and tests[0].mcnemar_p == tests[1].mcnemar_p
    doc, _, scores = load_screen(racing)  # the search saw the heads scored on every example only
    assert len(scores) == sum(r.n_scored is None for r in doc.heads) < len(doc.heads)


def test_racing_refusals_come_before_any_model_loads(screens, monkeypatch):
    """The racing-use checks are the run directory's (``require``), made before a session loads its model."""
    from celtk.run import run_altscreen, run_stability

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the racing screen's use was checked")

    monkeypatch.setattr("celtk.run.session.load_model", no_model)
    racing = screens[3]
    with pytest.raises(ConfigError, match="greedy search needs every head's outcomes"):
        run_select(racing, k=2, strategy="greedy", force=True)
    with pytest.raises(ConfigError, match=r"raced for the top p = 1 heads"):
        run_select(racing, p=3, k=2, force=True)
    with pytest.raises(ConfigError, match="resampled discovery sets needs every head's outcomes"):
        run_stability(racing, p=P, k=1)
    with pytest.raises(ConfigError, match="gradient screener's ranking"):
        run_altscreen(racing, method="gradient", p=P)


def test_racing_screen_refuses_uses_that_need_every_head(planted, screens, tmp_path):
    model, task = planted
    racing = screens[3]
    # force: an earlier test of this module ran the held-out test here (the racing check comes first anyway)
    with pytest.raises(ConfigError, match=r"raced for the top p = 1 heads; select with p ≤ 1.*--p 3"):
        run_select(racing, p=3, k=2, model=model, force=True)
    with pytest.raises(ConfigError, match="greedy search needs every head's outcomes"):
        run_select(racing, k=2, strategy="greedy", model=model, force=True)
    from celtk.run import run_altscreen, run_stability

    with pytest.raises(ConfigError, match="resampled discovery sets needs every head's outcomes"):
        run_stability(racing, p=P, k=1, model=model)
    with pytest.raises(ConfigError, match="gradient screener's ranking"):
        run_altscreen(racing, method="gradient", p=P, model=model)
    with pytest.raises(ConfigError, match="cannot be sharded"):
        run_screen(config(task, screen="racing"), tmp_path, shard=(0, 2), model=model)
    with pytest.raises(ConfigError, match="Unknown screen 'race'; choose one of exhaustive, racing"):
        config(task, screen="race").validated()
    with pytest.raises(ConfigError, match="racing_mode must be 'exact' or 'confidence'"):
        config(task, racing_mode="fast").validated()


def _pool_row(data):
    return next(r for r in data["heads"] if r["head"] == data["racing"]["pool"][0])


def _edited(source, target, edit):
    """A copy of ``source`` whose screen.json was changed (and its digest recorded, to reach the checks behind it)."""
    shutil.copytree(source, target)

    def change(data):
        edit(data)
        return data

    edit_document(target, "screen.json", change)
    return target


@pytest.mark.parametrize("name, edit, message", [
    ("racing record removed", lambda d: d.pop("racing"), "is not a racing screen"),
    ("pool head cut short", lambda d: _pool_row(d).update(correct="-" + _pool_row(d)["correct"][1:]),
     "has 39 of 40 outcomes but its n_scored is None"),
    ("pool head marked dropped", lambda d: _pool_row(d).update(correct="-" + _pool_row(d)["correct"][1:], n_scored=39),
     "racing pool .* is not the top 1"),
    ("n_scored disagrees with the bits", lambda d: next(r for r in d["heads"] if r.get("n_scored")).update(n_scored=1),
     "its n_scored is 1"),
    ("pool edited", lambda d: d["racing"].update(pool=["L0H0"]), "racing pool .* is not the top 1"),
])
def test_a_partial_screen_is_still_refused(screens, tmp_path, name, edit, message):
    """Only a racing screen's own dropped heads may be partial; a cut-short or edited screen is refused."""
    target = _edited(screens[3], tmp_path / "run", edit)
    with pytest.raises(RunStoreError, match=message):
        load_screen(target)


def test_an_exhaustive_screen_with_an_unscored_example_is_refused(screens, tmp_path):
    def cut(data):
        data["heads"][3]["correct"] = "-" + data["heads"][3]["correct"][1:]

    target = _edited(screens[2], tmp_path / "run", cut)
    with pytest.raises(RunStoreError, match="has 39 of 40 outcomes but the screen is not a racing screen"):
        load_screen(target)


def test_an_interrupted_racing_screen_resumes_to_the_same_document(planted, screens, tmp_path):
    model, task = planted
    racing = screens[3]
    out = tmp_path / "resumed"
    shutil.copytree(racing, out)
    parts = sorted((out / "race_parts").glob("chunk*.json"))
    later = [p for p in parts if not p.name.startswith("chunk0-")]
    assert later  # the race went past its first chunk
    for p in later + [out / "screen.json"]:
        p.unlink()
    resumed = run_screen(config(task, screen="racing"), out, model=model)
    assert (out / "screen.json").read_text() == (racing / "screen.json").read_text()
    assert not_none(resumed.racing).pool == screens[1].racing.pool
    # the first chunk was served from its parts: every head, none scored again
    assert (json.loads((out / "timing.json").read_text())["heads"]
            < json.loads((racing / "timing.json").read_text())["heads"])


def test_confidence_racing_is_recorded_and_keeps_pool_heads_complete(planted, screens, tmp_path):
    model, task = planted
    doc = run_screen(config(task, screen="racing", racing_mode="confidence"), tmp_path, model=model)
    racing = doc.racing
    assert racing is not None and racing.order is not None  # a confidence race records its example order
    assert racing.mode == "confidence" and racing.delta == 0.05
    assert sorted(racing.order) == list(range(doc.n)) and racing.order != list(range(doc.n))
    rows = {r.head: r for r in doc.heads}
    assert all(rows[h].n_scored is None for h in racing.pool) and len(racing.pool) == P
    for row in doc.heads:  # scored examples are the first n_scored of the recorded order
        if row.n_scored:
            assert np.flatnonzero(row.correct.scored()).tolist() == sorted(racing.order[:row.n_scored])
    full = screens[0]
    reference = exhaustive_pool(outcomes(full), full.intact_correct.outcomes(), P)
    assert racing.pool == [h.heads[0] for h in reference]  # here the bound held (separated heads)


def test_screen_csv_counts_the_examples_each_head_was_scored_on(screens):
    """screen.csv's n_scored: n_scored of screen.json for a dropped head, the discovery size for the rest."""
    full, raced, exhaustive, racing = screens
    for doc, directory in ((raced, racing), (full, exhaustive)):
        with open(directory / "screen.csv", newline="") as f:
            lines = list(csv.DictReader(f))
        assert [line["head"] for line in lines] == [str(r.head) for r in doc.heads]
        assert [int(line["n_scored"]) for line in lines] == [r.n_scored or doc.n for r in doc.heads]
        assert [int(line["gain_count"]) for line in lines] == [r.gain_count for r in doc.heads]
    counts = [int(line["n_scored"]) for line in csv.DictReader((racing / "screen.csv").read_text().splitlines())]
    assert min(counts) < raced.n and counts.count(raced.n) == sum(r.n_scored is None for r in raced.heads) >= P


@pytest.mark.parametrize("seed", range(5))
def test_screen_row_on_a_mask_equals_the_row_of_the_scored_examples(seed):
    """A partial row's figures are those of the scored examples alone; an all-true mask is the full row."""
    rng = np.random.default_rng(seed)
    n, heads = 30, HeadSet.parse("L0H1")
    correct, intact, mask = rng.random(n) < 0.6, rng.random(n) < 0.5, rng.random(n) < 0.5
    mask[0] = True  # at least one example scored
    partial, alone = screen_row(heads, correct, intact, mask), screen_row(heads, correct[mask], intact[mask])
    assert (partial.accuracy, partial.gain, partial.gain_count, partial.damage, partial.fixes) == (
        alone.accuracy, alone.gain, alone.gain_count, alone.damage, alone.fixes)
    assert partial.n_scored == mask.sum() < n and alone.n_scored is None
    assert Correctness.of(partial.correct.outcomes()[mask]) == alone.correct
    assert (~partial.correct.scored()).tolist() == (~mask).tolist()
    full = screen_row(heads, correct, intact)
    assert screen_row(heads, correct, intact, np.ones(n, dtype=bool)) == full
    assert full.correct == Correctness.of(correct) and full.n_scored is None
    assert full.gain == (correct.sum() - intact.sum()) / n


def test_report_heatmaps_leave_dropped_heads_unmeasured_and_say_so(screens, tmp_path):
    """Dropped heads' cells are blank and hatched, with the n_scored range in the caption; an exhaustive
    screen's heatmaps are every head's measured figures, with no such caption."""
    full, raced, exhaustive, racing = screens
    gain, damage, dropped = screen_grids(raced)
    for row in raced.heads:
        head = row.head
        cell = (head.layer, head.head)
        assert dropped[cell] == (row.n_scored is not None)
        if row.n_scored is None:
            assert (gain[cell], damage[cell]) == (100 * row.gain, row.damage)
        else:
            assert np.isnan(gain[cell]) and np.isnan(damage[cell])
    counts = [r.n_scored for r in raced.heads if r.n_scored]
    scored = str(min(counts)) if min(counts) == max(counts) else f"{min(counts)}–{max(counts)}"
    text = write_report(racing, tmp_path / "racing").read_text()
    assert (f"hatched: {len(counts)} of {len(raced.heads)} heads the racing screen dropped early (scored on "
            f"{scored} of {raced.n} examples") in text
    gain, damage, dropped = screen_grids(full)
    assert not dropped.any() and np.isfinite(gain).all() and np.isfinite(damage).all()
    assert "dropped early" not in write_report(exhaustive, tmp_path / "exhaustive").read_text()


def test_circuit_comparison_ranks_only_the_raced_pool(screens, tmp_path):
    """On a racing screen the ranking is the pool: a dropped circuit head has no rank, the mean ranks and
    the critical heads (the bottom of the ranking) are left out, and a top beyond p is refused."""
    full, raced, exhaustive, racing = screens
    dropped = str(next(r.head for r in raced.heads if r.n_scored))
    circuit = tmp_path / "circuit.json"
    circuit.write_text(json.dumps({"name": "planted", "n_layers": raced.n_layers, "n_heads": raced.n_heads,
                                   "heads": [{"head": "L1H2", "role": "planted"}, {"head": dropped, "role": "other"}]}))
    report = run_compare(racing, str(circuit), top=P)
    pool = [str(h) for h in raced.racing.pool]
    assert report.circuit_head_ranks == {Head(1, 2): 1, Head.parse(dropped): None}
    assert not_none(report.racing).ranked == not_none(raced.racing).pool
    assert report.mean_rank_of_circuit_heads is None and report.critical_vs_enhancing is None
    assert report.screen_top.overlap == 1
    written = json.loads((racing / "compare-circuit.json").read_text())
    assert written[f"screen_top{P}"]["overlap"] == 1 and written["racing"]["ranked"] == pool
    with pytest.raises(ConfigError, match=r"raced for the top p = 1 heads.*--top 1"):
        run_compare(racing, str(circuit), top=3)
    exhaustive_report = run_compare(exhaustive, str(circuit), top=3)
    ranks = exhaustive_report.circuit_head_ranks
    assert ranks[Head(1, 2)] == 1 and not_none(ranks[Head.parse(dropped)]) > 1
    assert exhaustive_report.racing is None and exhaustive_report.critical_vs_enhancing is not None
    assert "racing" not in json.loads((exhaustive / "compare-circuit.json").read_text())


def test_calibration_counts_a_dropped_head_at_its_discordance_rate_on_the_whole_set(screens):
    """The permutation null reads each head's fixes + damage on all n examples; a dropped head's count
    on its n_scored examples is scaled to n, and a complete head's is the exhaustive count."""
    full, raced, *_ = screens
    intact = raced.intact_correct.outcomes()
    row = next(r for r in raced.heads if r.n_scored)
    mask = row.correct.scored()
    flipped = intact.copy()
    flipped[np.flatnonzero(mask)[:3]] ^= True  # three discordant examples among the scored ones
    edited = replace(raced, heads=[screen_row(HeadSet((r.head,)), flipped, intact, mask) if r is row else r
                                   for r in raced.heads])
    counts, exhaustive = screen_discordant(edited), screen_discordant(full)
    assert counts[HeadSet((row.head,))] == round(3 * raced.n / row.n_scored) > 3
    assert all(counts[HeadSet((r.head,))] == exhaustive[HeadSet((r.head,))] for r in raced.heads if r.n_scored is None)


def test_cached_scorer_race_equals_the_exhaustive_cached_screen(tiny_llama):
    """Chunks scored as sub-lists give the outcomes of one whole-list screen (tiny in-memory model)."""
    from celtk.evaluation.prompts import prepare
    from celtk.heads import all_heads
    from celtk.screening.cached import CachedScreener
    from celtk.screening.racing import cached_scorer, race
    from celtk.tasks import get_task, make_splits

    fixtures = Path(__file__).parent.parent / "fixtures"

    task = get_task("boolq", data_path=str(fixtures / "boolq"))
    splits = make_splits(task, 9, 0, fewshot=0, seed=0)
    prepared = prepare(tiny_llama, task, splits.discovery, splits.shots)
    sets = [HeadSet((h,)) for h in all_heads(tiny_llama.n_layers, tiny_llama.n_heads)]
    intact, full = CachedScreener(tiny_llama, prepared, batch_size=4).run(sets)
    outcomes = {s: full[s].correct for s in sets}
    assert len({r.correct.tobytes() for r in full.values()}) > 1  # heads differ, so the check has teeth
    result = race(cached_scorer(tiny_llama, prepared, batch_size=4), sets, 9, intact.correct, 1,
                  schedule=[4, 3, 2], order=list(range(8, -1, -1)))
    assert result.pool == exhaustive_pool(outcomes, intact.correct, 1)
    assert result.saved_fraction > 0  # some heads stopped early: their partial outcomes are checked too
    for s in sets:
        mask = result.scored_mask(s)
        assert np.array_equal(result.outcomes[s][mask], outcomes[s][mask]), s
