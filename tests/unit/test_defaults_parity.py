"""One convention on every verb: the options a run shares (p, k, shots, batch size, device, dtype, discovery and
held-out sizes, seed, ablation, tie-break) default alike on the CLI verbs, the ``celtk.Run`` methods and the ``run_*``
stage functions — to ``RunConfig``'s default, or to ``None``, which means the run's recorded value (else that
default). A default that drifts on any of them fails here."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator

import click
import pytest

import celtk
import celtk.run.ablations
import celtk.run.altscreen
import celtk.run.analyses
import celtk.run.calibrate
import celtk.run.eval
import celtk.run.full
import celtk.run.replicate
import celtk.run.screen
import celtk.run.select
import celtk.run.stability
import celtk.run.test
import celtk.run.transfer
from celtk.cli import main
from celtk.run.config import RunConfig
from celtk.run.select import search_settings

SHARED = ("p", "k", "fewshot", "batch_size", "device", "dtype", "discovery", "heldout", "seed", "ablation", "tie_break")
DEFAULT = RunConfig()
STAGES = (celtk.run.select, celtk.run.test, celtk.run.stability, celtk.run.altscreen, celtk.run.calibrate,
          celtk.run.transfer, celtk.run.eval, celtk.run.ablations, celtk.run.screen, celtk.run.full,
          celtk.run.replicate, celtk.run.analyses)
# On a run that exists, these take the run's value unless given: a literal default there would ignore the run
RUN_BOUND = ("p", "k", "tie_break", "heldout", "device", "batch_size")
ON_A_RUN = {"select", "test", "stability", "transfer", "run_select", "stored_selection", "run_test", "stored_test",
            "run_stability", "run_transfer"}
# A known difference, kept visible: strict, so the test fails once it is gone and this line must go too
DRIFT: dict[tuple[str, str], str] = {}


def defaults() -> Iterator[tuple[str, str, str, object]]:
    """(where, name, option, default) of every shared option on a CLI verb, a Run method or a stage function."""
    for name, command in sorted(main.commands.items()):
        for param in command.params:
            if isinstance(param, click.Option) and param.name in SHARED:
                yield "celtk", name, param.name, param.default
    functions: list[tuple[str, str, Callable]] = [("Run", n, f) for n, f in inspect.getmembers(celtk.Run,
                                                                                             inspect.isfunction)]
    functions += [("stage", n, f) for module in STAGES for n, f in inspect.getmembers(module, inspect.isfunction)
                  if n.startswith(("run_", "stored_")) and f.__module__ == module.__name__]
    for where, name, function in functions:
        for option, argument in inspect.signature(function).parameters.items():
            if option in SHARED and argument.default is not inspect.Parameter.empty:
                yield where, name, option, argument.default


CASES = [pytest.param(*case, marks=pytest.mark.xfail(strict=True, reason=DRIFT[case[1:3]]))
         if case[1:3] in DRIFT else pytest.param(*case) for case in defaults()]


def test_the_table_covers_the_verbs_methods_and_stages():
    seen = {(where, name) for where, name, *_ in defaults()}
    for expected in [("celtk", verb) for verb in ("run", "screen", "select", "test", "replicate", "stability",
                                                  "transfer", "eval", "plan")] + [
            ("Run", "select"), ("Run", "stability"), ("Run", "test"), ("stage", "run_select"), ("stage", "run_test"),
            ("stage", "run_stability"), ("stage", "run_eval")]:
        assert expected in seen, expected


@pytest.mark.parametrize("where, name, option, default", CASES)
def test_every_shared_default_is_the_runs(where, name, option, default):
    if name in ON_A_RUN and option in RUN_BOUND:
        assert default is None, f"{where} {name}: {option} defaults to {default!r}, not to the run's value (None)"
    else:
        assert default is None or default == getattr(DEFAULT, option), (
            f"{where} {name}: {option} defaults to {default!r}, but a run's default is {getattr(DEFAULT, option)!r}")


def test_none_means_the_runs_recorded_value_else_the_default(tmp_path):
    assert search_settings(tmp_path) == (DEFAULT.p, DEFAULT.k, DEFAULT.tie_break)
    (tmp_path / "config.json").write_text(json.dumps(RunConfig(p=4, k=2, tie_break="paper").recorded()))
    assert search_settings(tmp_path) == (4, 2, "paper")
    assert search_settings(tmp_path, 5, None, "numeric") == (5, 2, "numeric")


# verbs whose Run method takes the run's own settings instead of the verb's (model, task, device: the Run holds them;
# Run.replicate runs them over other seeds)
RUN_SETTINGS_VERBS = ("eval", "screen", "select", "test", "report", "compare", "merge", "replicate")


def test_a_verb_on_a_run_takes_no_option_its_run_method_lacks():
    """`celtk ablations --draws 3` and `Run(out).ablations(draws=3)` are the same call: every option of a verb that
    analyses a finished run is a parameter of the Run method of that name."""
    checked = []
    for name, command in sorted(main.commands.items()):
        method = getattr(celtk.Run, name, None)
        if method is None or name in RUN_SETTINGS_VERBS:
            continue
        options = {p.name for p in command.params if isinstance(p, click.Option)}
        missing = options - set(inspect.signature(method).parameters)
        assert not missing, f"celtk {name} takes {sorted(missing)}, which Run.{name} lacks"
        checked.append(name)
    assert {"ablations", "stability", "transfer", "calibrate", "altscreen"} <= set(checked)
