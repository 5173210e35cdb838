"""A standing net under the bad-input table: generated CLI arguments, config
files and JSONL files end either in success or in one line — a CeltkError or a usage error —
never a traceback, and never leave a partial file behind.

The examples stay cheap: every generated command fails (or succeeds) before a model loads, so
the suite runs in well under a minute (``max_examples`` below)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celtk.cli import main
from celtk.errors import CeltkError

FAST = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# numeric options of each verb, with the CLI's own range (None: no bound)
NUMERIC: dict[str, dict[str, int | None]] = {
    "screen": {"--discovery": 1, "--heldout": 1, "--seed": 0, "--fewshot": 0, "--batch-size": 1},
    "run": {"--discovery": 1, "--heldout": 1, "--seed": 0, "--fewshot": 0, "--p": 1, "--k": 1},
    "select": {"--p": 1, "--k": 1, "--width": 1},
    "test": {"--heldout": 1},
    "altscreen": {"--p": 1, "--masks": 1, "--seed": 0, "--rate": None},
    "stability": {"--resamples": 1, "--p": 1, "--k": 1, "--width": 1, "--seed": 0, "--fraction": None},
    "eval": {"--limit": 1, "--seed": 0, "--fewshot": 0, "--batch-size": 1},
}
# arguments that make each verb stop before a model would load: a missing task file or an empty run
PREFIX = {
    "screen": ["--task", "jsonl:{tmp}/none.jsonl", "--model", "{tmp}/no-model", "--out", "{tmp}/out"],
    "run": ["--task", "jsonl:{tmp}/none.jsonl", "--model", "{tmp}/no-model", "--out", "{tmp}/out"],
    "eval": ["--task", "jsonl:{tmp}/none.jsonl", "--model", "{tmp}/no-model", "--out", "{tmp}/out"],
    "select": ["{tmp}/out"], "test": ["{tmp}/out"], "stability": ["{tmp}/out"],
    "altscreen": ["{tmp}/out", "--method", "lasso"],
}

values = st.one_of(st.integers(-3, 3), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from(["", "auto", "1e3", "0x10", "nan", "1/2", " 4", "٣"]), st.text(max_size=6))


def assert_one_line_outcome(result, out: Path) -> None:
    """Success, a one-line ``Error: …`` (exit 1), or a usage error (exit 2); no partial file."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert result.exit_code in (0, 1, 2), result.output
    if result.exit_code == 1:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for path in out.rglob("*") if out.exists() else []:
        assert not path.name.endswith(".partial"), path
        if path.suffix == ".json":
            json.loads(path.read_text())


@FAST
@given(verb=st.sampled_from(sorted(NUMERIC)), data=st.data())
def test_numeric_cli_options_give_one_line(verb, data):
    options = NUMERIC[verb]
    chosen = data.draw(st.lists(st.sampled_from(sorted(options)), min_size=1, max_size=3, unique=True))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "out").mkdir()
        args = [verb, *(a.format(tmp=tmp) for a in PREFIX[verb])]
        for option in chosen:
            args += [option, str(data.draw(values))]
        result = CliRunner().invoke(main, args)
        assert_one_line_outcome(result, Path(tmp) / "out")
        below = [o for o in chosen if (bound := options[o]) is not None
                 and (given := _as_int(args[args.index(o) + 1])) is not None and given < bound]
        if below:  # an out-of-range number is refused by the CLI layer (a usage error, before any work)
            assert result.exit_code == 2 and "Invalid value for '--" in result.output, result.output


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


# The declared type of each setting, written out independently of RunConfig's annotations.
TYPES = {"model": (str,), "task": (str,), "data": (str, type(None)), "discovery": (int,), "heldout": (int,),
         "seed": (int,), "fewshot": (int,), "chat": (bool,), "batch_size": (int, str), "device": (str,),
         "dtype": (str,), "p": (int,), "k": (int,), "share_prefix": (bool,)}
config_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 600), st.floats(allow_nan=True),
                          st.text(max_size=8), st.sampled_from(["no", "yes", "true", "auto", "0"]),
                          st.lists(st.integers(), max_size=2))


@FAST
@given(settings_=st.dictionaries(st.sampled_from(sorted(TYPES) + ["discovry", "Seed"]), config_values, max_size=5),
       as_toml=st.booleans())
def test_config_files_are_typed_before_any_work(settings_, as_toml):
    from celtk.run import resolve_config

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("run.toml" if as_toml else "run.json")
        if as_toml:
            if any(v is None for v in settings_.values()):
                return  # TOML has no null
            path.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in settings_.items()))
        else:
            path.write_text(json.dumps(settings_))
        try:
            config = resolve_config(path)
        except CeltkError as error:
            assert "\n" not in str(error)
            return
    for key, value in settings_.items():
        stored = getattr(config, key)
        assert type(stored) in TYPES[key] and stored == value, (key, value)  # a bool is never taken as an int
    assert config.seed >= 0 and config.fewshot >= 0 and min(config.discovery, config.heldout, config.p, config.k) >= 1


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float):
        return "nan" if value != value else {float("inf"): "inf", float("-inf"): "-inf"}.get(value, repr(value))
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False),
                                     st.text(max_size=5)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                           max_leaves=6)
line = st.one_of(
    st.fixed_dictionaries({"prompt": st.one_of(st.text(max_size=8), json_values),
                           "target": st.one_of(st.text(max_size=4), json_values)},
                          optional={"id": json_values, "split": st.sampled_from(["fewshot", "eval", 3])}),
    st.fixed_dictionaries({"prompt": st.text(max_size=8),
                           "choices": st.one_of(st.lists(st.text(max_size=3), max_size=3), json_values),
                           "label": st.one_of(st.integers(-1, 3), json_values)}),
    json_values,
).map(lambda row: json.dumps(row).encode())
raw_line = st.one_of(line, line, st.binary(max_size=12))


@FAST
@given(lines=st.lists(raw_line, max_size=6), discovery=st.integers(0, 4), fewshot=st.integers(0, 2))
def test_jsonl_files_load_or_give_one_line(lines, discovery, fewshot):
    from celtk.tasks import get_task, make_splits

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "task.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        try:
            splits = make_splits(get_task(f"jsonl:{path}"), discovery, 0, fewshot=fewshot)
        except CeltkError as error:
            assert "\n" not in str(error)
            return
    assert len(splits.discovery) == discovery and len(splits.shots) == fewshot
    assert all(isinstance(e.context, str) for e in splits.discovery)


@pytest.mark.parametrize("verb,option,value", [("select", "--k", "0"), ("altscreen", "--masks", "0"),
                                               ("eval", "--limit", "0"), ("screen", "--seed", "-1"),
                                               ("stability", "--fraction", "0")])
def test_the_cli_refuses_each_out_of_range_number_in_one_line(verb, option, value, tmp_path):
    (tmp_path / "out").mkdir()
    args = [verb, *(a.format(tmp=tmp_path) for a in PREFIX[verb]), option, value]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output, result.output
    assert "Traceback" not in result.output


def _numeric_params():
    """(verb, option, type) for every numeric option of every verb, found by walking the CLI."""
    import click

    from celtk.cli.pipeline_cmds import _BatchSize

    found = []
    for verb, command in sorted(main.commands.items()):
        for param in command.params:
            if isinstance(param, click.Option) and isinstance(param.type, (click.types.IntParamType,
                                                                              click.types.FloatParamType, _BatchSize)):
                found.append((verb, param.opts[0], param.type))
    return found


def _required_args(command, tmp: Path) -> list[str]:
    """Values for a verb's required arguments and options, so that parsing reaches the numeric option."""
    import click

    args: list[str] = []
    for param in command.params:
        if not param.required:
            continue
        value = param.type.choices[0] if isinstance(param.type, click.Choice) else str(tmp)
        args += [value] if isinstance(param, click.Argument) else [param.opts[0], value]
    return args


def _out_of_range(kind) -> list[str]:
    """Values outside ``kind``'s range: below its minimum (or -1), above its maximum, nan and ±inf for floats."""
    import click

    low = getattr(kind, "min", None)
    values = ["-1" if low is None else str(low if getattr(kind, "min_open", False) else low - 1)]
    if getattr(kind, "max", None) is not None:
        values.append(str(kind.max + 1))
    if isinstance(kind, click.types.FloatParamType):
        values += ["nan", "inf", "-inf"]
    return values


def test_every_numeric_option_of_every_verb_has_a_range():
    """A numeric option without a lower bound lets -1 through to the library (plan's did, and --max-new-tokens)."""
    import click

    from celtk.cli.pipeline_cmds import _BatchSize

    params = _numeric_params()
    assert len(params) >= 40  # the walk found the verbs' options
    unbounded = [(verb, opt) for verb, opt, kind in params
                 if not isinstance(kind, _BatchSize) and getattr(kind, "min", None) is None]
    assert not unbounded, f"numeric options without a lower bound: {unbounded}"
    lets_nan_through = []
    for _, opt, kind in params:
        if isinstance(kind, click.FloatRange):
            try:
                kind.convert("nan", None, None)  # type: ignore[arg-type]  # click's stub: float; the CLI passes text
                lets_nan_through.append(opt)
            except click.BadParameter:
                pass
    assert not lets_nan_through, f"float options that take nan (a range check alone does): {lets_nan_through}"


@pytest.mark.parametrize("verb,option,kind", _numeric_params(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_numeric_option_refuses_out_of_range_values_in_one_line(verb, option, kind, tmp_path):
    """-1 (or below the minimum), above the maximum, nan and ±inf: a usage error naming the option, before any work."""
    for value in _out_of_range(kind):
        args = [verb, *_required_args(main.commands[verb], tmp_path), option, value]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output, (args, result.output)
        assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    assert not any(tmp_path.iterdir())  # nothing written
