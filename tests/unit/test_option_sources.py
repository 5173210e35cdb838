"""Every stage option has one default: the ``celtk`` command's flag, the ``Run`` method and the ``run_*`` function
all take it from ``celtk.run.options``. Each surface's defaults are read (the flag's as the command would parse
it) and compared with the options object; a default written on one surface only, outside the options, is caught
too. The settings a run is made with (p, k, shots, sizes, ...) are RunConfig's, checked in
test_defaults_parity.py."""

import inspect
import re
from collections.abc import Callable
from dataclasses import asdict, fields
from typing import Any

import click
import pytest

from celtk.cli import main
from celtk.run import Run
from celtk.run.ablations import run_ablation_kinds
from celtk.run.altscreen import run_altscreen
from celtk.run.analyses import run_attributes, run_compare
from celtk.run.calibrate import run_calibration
from celtk.run.config import RunConfig
from celtk.run.eval import run_eval
from celtk.run.options import EVAL, RUN, STAGE_OPTIONS, TRANSFER
from celtk.run.replicate import run_replicate
from celtk.run.select import run_select
from celtk.run.stability import run_stability
from celtk.run.test import run_test
from celtk.run.transfer import run_transfer, variant_grid

STAGE_FUNCTIONS: dict[str, list[Callable[..., Any]]] = {
    "select": [run_select], "test": [run_test], "transfer": [variant_grid, run_transfer],
    "calibrate": [run_calibration], "ablations": [run_ablation_kinds], "altscreen": [run_altscreen],
    "stability": [run_stability], "attributes": [run_attributes], "compare": [run_compare],
    "replicate": [run_replicate], "eval": [run_eval]}
"""The library functions behind each command (the transfer's grid of variants and its scoring)."""

RUN_BOUND = {"eval"}
"""Commands whose ``Run`` method takes what the command's flags set from the run instead (``Run.eval`` scores
the run's own held-out set with the run's model and ablation kind)."""

NOT_GIVEN = (None, (), False, "")
"""Defaults that mean "not given" or "off" (the value is read from the run, the variant is not added, no heads)."""

NONE_DRAWS_THE_DEFAULT = {("transfer", "shots_seeds")}
"""Options whose library default is ``None`` for "the options' value, unless the run cannot use it" (a run without
shots skips the default shot draws, and refuses seeds given by name); the command passes ``None`` when the flag is
left out. Checked below to draw the options' value."""

ALIASES = {("transfer", "shot_seeds"): "shots_seeds"}
"""A parameter named otherwise in one signature."""


def _signature_defaults(function: Callable[..., Any]) -> dict[str, Any]:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _flag_defaults(command: click.Command) -> dict[str, Any]:
    """The value each option has when the flag is left out, as the command parses it (type and callback)."""
    ctx = click.Context(command)
    found = {}
    for param in command.params:
        if isinstance(param, click.Option) and not param.required:
            value = param.process_value(ctx, param.get_default(ctx))
            found[param.name] = tuple(value) if isinstance(value, list) else value
    return found


def _surfaces(stage: str) -> dict[str, dict[str, Any]]:
    surfaces = {f"celtk {stage}": _flag_defaults(main.commands[stage])}
    if stage not in RUN_BOUND and hasattr(Run, stage):
        surfaces[f"Run.{stage}"] = _signature_defaults(getattr(Run, stage))
    for function in STAGE_FUNCTIONS[stage]:
        surfaces[function.__name__] = {ALIASES.get((stage, name), name): value
                                       for name, value in _signature_defaults(function).items()}
    return surfaces


@pytest.mark.parametrize("stage", sorted(STAGE_OPTIONS))
def test_each_surface_takes_its_defaults_from_the_stage_options(stage):
    options = asdict(STAGE_OPTIONS[stage])
    for surface, defaults in _surfaces(stage).items():
        for name, value in defaults.items():
            if name in options and value is None and (stage, name) in NONE_DRAWS_THE_DEFAULT:
                continue
            if name in options:
                assert value == options[name], (f"{surface}: {name} defaults to {value!r}, the options "
                                                 f"say {options[name]!r}")
            elif stage == "eval" and surface == "celtk eval" and name in ("task", "data", "fewshot", "limit"):
                continue  # the task's own (None: the task decides)
            else:
                holder = type(STAGE_OPTIONS[stage]).__name__
                assert value in NOT_GIVEN, (f"{surface}: {name} defaults to {value!r}, which celtk.run.options."
                                            f"{holder} does not hold: a default must live there (or mean 'not given')")


@pytest.mark.parametrize("stage", sorted(STAGE_OPTIONS))
def test_every_option_reaches_the_library(stage):
    """Each option is a parameter of the stage's library function (or of the grid it builds); a command may leave a
    library-only option out (n_boot of the stability rows, the attributes' batch)."""
    library = {name for function in STAGE_FUNCTIONS[stage] for name in _signature_defaults(function)}
    library = {ALIASES.get((stage, name), name) for name in library}
    missing = [f.name for f in fields(STAGE_OPTIONS[stage]) if f.name not in library]
    assert not missing, f"{stage}: options no library function takes: {missing}"


def test_the_shared_run_defaults_are_runconfigs():
    config = RunConfig()
    for name, value in asdict(RUN).items():
        assert getattr(config, name) == value, name


def test_a_free_evaluation_defaults_to_what_a_run_is_made_with():
    config = RunConfig()
    assert (EVAL.model, EVAL.seed, EVAL.chat, EVAL.chat_date, EVAL.batch_size, EVAL.device, EVAL.dtype,
            EVAL.ablation) == (config.model, config.seed, config.chat, config.chat_date, config.batch_size,
                               config.device, config.dtype, config.ablation)


def test_the_transfer_grid_draws_the_default_shot_seeds_when_none_are_named():
    drawn = [v.shot_seed for v in variant_grid("arithmetic:2da") if v.kind == "shots"]
    assert tuple(drawn) == TRANSFER.shots_seeds
    flag = next(p for p in main.commands["transfer"].params if p.name == "shots_seeds")
    assert flag.default == ",".join(map(str, TRANSFER.shots_seeds))  # what --help shows


def test_help_texts_state_the_run_defaults():
    """A flag that leaves a run setting to the run's default (``default=None``) and names that default in its help
    names the one in RUN: the help is built from it, not written beside it."""
    checked = 0
    for name, command in sorted(main.commands.items()):
        for param in command.params:
            if not isinstance(param, click.Option) or param.name not in asdict(RUN) or param.default is not None:
                continue
            text = param.help or ""
            if "(default " not in text and not re.search(r"default: the run's \w+, ", text):
                continue  # no default named, or only described ("default: as configured", "default: the run's")
            value = getattr(RUN, str(param.name))
            shown = ("on" if value else "off") if isinstance(value, bool) else str(value)
            assert re.search(rf"default[^.;)]*\b{re.escape(shown)}\b", text), (
                f"celtk {name} --{param.name}: help {text!r} does not state the default {shown!r}")
            checked += 1
    assert checked >= 20  # run, replicate, screen and plan's shared flags at least
