"""Progress lines for logs (celtk.cli._common.ProgressLines) on a fake clock, and the options that pick them."""

import json
import re

from _support import not_none
from click.testing import CliRunner

from celtk.cli import main
from celtk.cli._common import ProgressLines, ProgressSettings


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _lines(every: float, steps, json_lines: bool = False, **kw) -> list[str]:
    clock = Clock()
    out: list[str] = []
    progress = ProgressLines(out.append, every=every, json_lines=json_lines, clock=clock, **kw)
    for t, stage, done, total in steps:
        clock.now = float(t)
        progress(stage, done, total)
    return out


def test_a_stage_prints_its_first_line_then_at_most_one_per_interval_and_its_last():
    steps = [(0, "screen", 0, 10)] + [(t, "screen", t, 10) for t in range(1, 10)] + [(10.5, "screen", 10, 10)]
    lines = _lines(4.0, steps)
    assert [not_none(re.search(r"screen: (\d+)/10", l)).group(1) for l in lines] == ["0", "4", "8", "10"]
    assert len(_lines(0.0, steps)) == len(steps)  # --progress-every 0: every call
    assert len(_lines(100.0, steps)) == 2  # first and last only
    assert len(_lines(100.0, steps + [(11, "screen", 10, 10)])) == 2  # the end is reported once


def test_a_line_says_stage_count_unit_rate_examples_and_eta():
    lines = _lines(0.0, [(0, "screen", 0, 12), (10, "screen", 4, 12)], per_unit={"screen": 50})
    assert re.fullmatch(r"\S+Z screen: 0/12 heads \(0%\), - heads/s, elapsed 0:00, ETA -", lines[0]), lines[0]
    # 4 heads in 10 s: 0.4 heads/s, 20 examples/s, 8 heads left = 20 s
    assert lines[1].endswith("screen: 4/12 heads (33%), 0.4 heads/s, 20 examples/s, elapsed 0:10, ETA 0:20"), lines[1]


def test_a_stage_with_a_cost_weighted_work_count_leaves_its_eta_to_that_count():
    """The screen's heads cost unequal time (a head's replay starts at its layer), so the heads line points to the
    'screen work' line's ETA, which is weighted by cost, instead of printing a second, unweighted one."""
    lines = _lines(0.0, [(0, "screen", 0, 12), (1, "screen work", 0, 1000), (10, "screen work", 400, 1000),
                         (10, "screen", 2, 12), (25, "screen work", 1000, 1000), (25, "screen", 12, 12)])
    assert lines[3].endswith("screen: 2/12 heads (17%), 0.2 heads/s, elapsed 0:10, ETA: see screen work"), lines[3]
    assert lines[2].endswith("ETA 0:14"), lines[2]  # 400 of 1000 in 9 s: 600 more take 13.5 s
    assert lines[-1].endswith("ETA 0:00")  # the finished line says so
    json_line = json.loads(_lines(0.0, [(0, "screen work", 0, 10), (1, "screen", 1, 12)], json_lines=True)[-1])
    assert json_line["eta_s"] is None


def test_the_rate_counts_from_where_a_resumed_stage_started():
    lines = _lines(0.0, [(0, "screen", 6, 12), (3, "screen", 9, 12)])
    assert "screen: 6/12 heads (50%), - heads/s" in lines[0]
    assert lines[1].endswith("1 heads/s, elapsed 0:03, ETA 0:03"), lines[1]  # 3 heads in 3 s, not 9


def test_a_new_round_of_a_stage_restarts_its_rate():
    lines = _lines(100.0, [(0, "select", 0, 5), (5, "select", 5, 5), (6, "select", 0, 3), (9, "select", 3, 3)])
    assert [not_none(re.search(r"select: \S+", l)).group(0) for l in lines] == ["select: 0/5", "select: 5/5",
                                                                                 "select: 0/3", "select: 3/3"]
    assert "1 head sets/s" in lines[3]  # 3 sets in the 3 s since the round began


def test_json_lines_hold_the_same_figures():
    lines = _lines(0.0, [(0, "eval", 0, 8), (2, "eval", 4, 8)], json_lines=True, per_unit={"eval": 8})
    first, second = (json.loads(l) for l in lines)
    assert first["rate"] is None and first["eta_s"] is None and first["stage"] == "eval" and first["unit"] == "batches"
    assert {k: second[k] for k in ("done", "total", "rate", "examples_per_s", "elapsed_s", "eta_s")} == {
        "done": 4, "total": 8, "rate": 2.0, "examples_per_s": 16.0, "elapsed_s": 2.0, "eta_s": 2.0}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", second["time"])


def test_the_group_options_and_their_environment_variables_reach_the_verbs(monkeypatch):
    import click

    from celtk.cli._common import progress_settings

    for name in ("CELTK_QUIET", "CELTK_LOG_FORMAT", "CELTK_PROGRESS_EVERY"):
        monkeypatch.delenv(name, raising=False)
    seen = []

    @main.command("probe-settings", hidden=True)
    def probe() -> None:
        seen.append(progress_settings())

    try:
        runner = CliRunner()
        assert runner.invoke(main, ["probe-settings"]).exit_code == 0
        assert runner.invoke(main, ["--quiet", "--log-format", "json", "--progress-every", "5",
                                    "probe-settings"]).exit_code == 0
        monkeypatch.setenv("CELTK_LOG_FORMAT", "json")
        monkeypatch.setenv("CELTK_PROGRESS_EVERY", "2.5")
        monkeypatch.setenv("CELTK_QUIET", "1")
        assert runner.invoke(main, ["probe-settings"]).exit_code == 0
        bad = runner.invoke(main, ["--log-format", "xml", "probe-settings"])
    finally:
        main.commands.pop("probe-settings")
    assert seen == [ProgressSettings(), ProgressSettings(True, "json", 5.0), ProgressSettings(True, "json", 2.5)]
    assert bad.exit_code == 2 and "'xml' is not one of 'text', 'json'" in bad.output
    assert isinstance(main, click.Group)


def test_a_step_longer_than_the_interval_gets_still_working_lines():
    """The heartbeat (ProgressLines.beat, which a background thread calls) on a fake clock: a line once no line has
    been written for `every` seconds, naming the stage, where it stands, its elapsed time and its last step's age."""
    clock = Clock()
    out: list[str] = []
    progress = ProgressLines(out.append, every=30.0, clock=clock)
    clock.now = 31.0
    assert progress.beat() and re.fullmatch(r"\S+Z still working \(starting\), elapsed 0:31", out[-1]), out
    clock.now = 40.0
    progress("screen", 0, 12)  # a regular line: the silence starts again
    clock.now = 69.0
    assert not progress.beat() and len(out) == 2
    clock.now = 70.0
    assert progress.beat()
    assert re.fullmatch(r"\S+Z screen: still working, 0/12 heads \(0%\), elapsed 0:30, last step 0:30 ago",
                        out[-1]), out[-1]
    clock.now = 95.0
    assert not progress.beat()  # 25 s after the heartbeat's own line
    progress("screen", 4, 12)  # 55 s since the stage's last line: a regular line
    clock.now = 100.0
    progress("screen", 5, 12)  # throttled (5 s since the stage's last line): no line, but a step
    assert len(out) == 4
    clock.now = 126.0
    assert progress.beat() and out[-1].endswith("screen: still working, 5/12 heads (42%), elapsed 1:26, "
                                                "last step 0:26 ago"), out[-1]
    clock.now = 130.0
    progress("screen", 12, 12)
    clock.now = 161.0
    assert progress.beat() and "screen: 12/12 heads done, still working after it, elapsed 2:01" in out[-1], out[-1]


def test_every_zero_still_gets_a_heartbeat_and_json_lines_mark_it():
    clock = Clock()
    out: list[str] = []
    progress = ProgressLines(out.append, every=0.0, json_lines=True, clock=clock)
    progress("eval", 1, 8)
    clock.now = 29.0
    assert not progress.beat()  # every = 0 prints every step; a silent step still gets one after 30 s
    clock.now = 31.0
    assert progress.beat()
    record = json.loads(out[-1])
    assert {k: record[k] for k in ("stage", "still_working", "done", "total", "unit", "elapsed_s", "since_step_s")} == {
        "stage": "eval", "still_working": True, "done": 1, "total": 8, "unit": "batches", "elapsed_s": 31.0,
        "since_step_s": 31.0}


def test_the_search_null_reports_chunks_of_repeats_and_draws_the_same():
    """With a progress callback the search null runs in at least 50 chunks (so a line can come); its draws are the
    same as in one chunk, with sets' extra changes and unscored examples drawn too."""
    import numpy as np

    from celtk.search.nulls import search_null

    rng = np.random.default_rng(3)
    discordant = rng.random((12, 30)) < 0.2
    scored = np.ones_like(discordant)
    scored[2, 20:] = False
    steps: list[tuple[int, int]] = []
    rates = {2: 0.05, 3: 0.1}
    plain = search_null(discordant, 4, 3, 120, 9, n_held=40, extra_rate=rates, scored=scored)
    shown = search_null(discordant, 4, 3, 120, 9, n_held=40, extra_rate=rates, scored=scored,
                        progress=lambda done, total: steps.append((done, total)))
    assert all(np.array_equal(a, b) for a, b in zip(plain[:2], shown[:2], strict=True)) and plain[2] == shown[2]
    assert steps == [(done, 120) for done in range(2, 121, 2)]  # 60 chunks of 2
