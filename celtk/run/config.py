"""What a run depends on, and where its settings come from: defaults < preset < config file < overrides.

The CLI, notebooks and batch scripts resolve settings with the same :func:`resolve_config`,
so a TOML/JSON file written for one works for the others.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import date
from pathlib import Path
from typing import Any, cast

import tomllib

from celtk.boundary import check_fields, field_hints, public
from celtk.boundary import check_type as check_hint
from celtk.errors import ConfigError, ModelSourceError, RunStoreError, TaskError, suggest
from celtk.models import ALIASES, alias_available
from celtk.run.options import RUN
from celtk.run.presets import check_paper_data, preset_names, preset_values
from celtk.run.registry import SCREENS
from celtk.search.registry import TIE_BREAKS
from celtk.store.files import JsonObject
from celtk.tasks import get_task, task_names

CHAT_DATE = RUN.chat_date  # celtk.evaluation.prompts.CHAT_DATE's value (evaluation sits below run; a test compares)
POSITIONS = ("all", "prefix", "example")  # celtk.ablation_kinds.POSITIONS, repeated for the same reason


PATH_KEYS = ("model", "data")  # settings that may be given as a pathlib.Path (kept as text)


class _PresetFills(type):
    """How a :class:`RunConfig` is built: its ``preset`` fills the settings the call leaves out (defaults <
    preset < the arguments given), as :func:`resolve_config` fills what neither a config file nor the flags
    set; the preset is chosen for the task the call gives. :func:`dataclasses.replace` gives every field, so
    a copy keeps its values (a recorded config is never filled again)."""

    def __call__(cls, *args: object, **kwargs: object) -> object:
        names = [f.name for f in fields(cast("type[RunConfig]", cls))]
        given = dict(zip(names, args, strict=False)) | kwargs
        preset, task = given.get("preset"), given.get("task")
        if isinstance(preset, str) and preset in preset_names():  # another is refused by validated(), naming them
            filled = preset_values(preset, task if isinstance(task, str) else None)
            kwargs = kwargs | {key: value for key, value in filled.items() if key not in given}
        return super().__call__(*args, **kwargs)


@dataclass(frozen=True)
class RunConfig(metaclass=_PresetFills):
    """Everything a run depends on. Precedence: defaults < preset < config file < overrides.

    ``RunConfig(preset="paper", task="boolq")`` has the preset's sizes and shots, as ``celtk run
    --preset paper --task boolq`` has: the preset fills what the arguments leave out.

    A new setting is one typed field here (with its default) plus, if it has a range, one
    line in :meth:`validated`."""

    model: str = RUN.model
    task: str = RUN.task
    data: str | None = None
    discovery: int = RUN.discovery
    heldout: int = RUN.heldout
    seed: int = RUN.seed
    fewshot: int = RUN.fewshot
    chat: bool = RUN.chat
    chat_date: str = RUN.chat_date  # the date chat templates that write "today" see (ISO)
    batch_size: int | str = RUN.batch_size  # or "auto": fit the device's free memory
    device: str = RUN.device
    dtype: str = RUN.dtype
    p: int = RUN.p
    k: int = RUN.k
    # stage 1's screen (celtk.run.registry.SCREENS): "exhaustive" or "racing" (top-p pool only)
    screen: str = "exhaustive"
    racing_mode: str = "exact"  # racing screens: "exact" (the exhaustive pool) or "confidence" (celtk.screening.racing)
    share_prefix: bool = True
    grading: str = "teacher"  # "generate": jsonl tasks graded on the greedy generation
    stop: list[str] | None = None  # generation stop strings (jsonl generate grading; default a newline)
    max_new_tokens: int | None = None  # generation token limit (jsonl generate grading; default 32)
    allow_code: bool = False  # let code tasks (mbpp, humaneval) run generated code in the sandbox
    ablation: str = RUN.ablation  # what replaces an ablated head's z: zero (the paper's), mean, resample, scale:α
    # heads tied in gain, damage, accuracy and size: "numeric" ids, L2H0 before L10H0, or the paper's string order
    tie_break: str = RUN.tie_break
    # where an ablated head's z is replaced: "all" positions (the paper's), the shared few-shot "prefix" only, or the
    # "example"'s own positions only (celtk.ablation_kinds.POSITIONS)
    positions: str = "all"
    preset: str | None = None  # which preset (celtk.run.presets) filled the settings not given; recorded
    synthetic: bool = False  # a paper preset run on generated data instead of the official rows, said out loud

    def __post_init__(self) -> None:
        """Checked at construction, however built (a file, the CLI or ``RunConfig(...)`` directly): a
        model or data path may be a ``pathlib.Path`` (kept as its string, as the config files hold it)."""
        for name in PATH_KEYS:
            if isinstance(getattr(self, name), os.PathLike):
                object.__setattr__(self, name, os.fspath(getattr(self, name)))
        check_fields(self, ranges=False)
        if self.ablation != "zero":  # one spelling (scale:0.50 → scale:0.5); parsed only when set, so that a default
            from celtk.ablation_kinds import AblationKind  # config does not import torch

            object.__setattr__(self, "ablation", str(AblationKind.parse(self.ablation)))
        self.validated()

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "config") -> RunConfig:
        """Defaults updated with ``values`` (a ``preset`` among them fills the keys they lack, as in
        ``RunConfig(...)``); unknown keys are refused, naming the valid ones."""
        # values untyped: each is checked against its field's annotation (check_type) before RunConfig(**values)
        known = set(cls.keys())
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"Unknown key(s) {', '.join(unknown)} in {where}; valid keys: "
                              f"{', '.join(sorted(known))}.")
        annotations = {f.name: f.type for f in fields(cls)}
        values = {k: os.fspath(v) if k in PATH_KEYS and isinstance(v, os.PathLike) else v for k, v in values.items()}
        for key, value in values.items():
            check_type(key, value, str(annotations[key]), where)
        return cls(**values).validated()

    def validated(self) -> RunConfig:
        """Range checks of single settings (a search strategy checks its own options, e.g. k ≤ p)."""
        if self.batch_size != "auto" and not isinstance(self.batch_size, int):
            raise ConfigError(f"batch_size must be a positive integer or 'auto', got {self.batch_size!r}.")
        for name in ("discovery", "heldout", "p", "k") + (() if self.batch_size == "auto" else ("batch_size",)):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}.")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ConfigError("max_new_tokens must be at least 1 (or unset for the default 32), got "
                              f"{self.max_new_tokens}.")
        for name in ("fewshot", "seed"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be non-negative, got {getattr(self, name)}.")
        if self.screen not in SCREENS:
            raise ConfigError(f"Unknown screen {self.screen!r}; choose one of {', '.join(SCREENS.names())}.")
        if self.racing_mode not in ("exact", "confidence"):
            raise ConfigError(f"racing_mode must be 'exact' or 'confidence', got {self.racing_mode!r}.")
        if self.tie_break not in TIE_BREAKS:
            raise ConfigError(f"tie_break must be 'numeric' (head ids by their numbers, L2H0 before L10H0) or 'paper' "
                              f"(the ids as strings, L10H0 before L2H0), got {self.tie_break!r}.")
        if self.positions not in POSITIONS:
            raise ConfigError(f"positions must be 'all' (every position, the paper's), 'prefix' (the shared few-shot "
                              f"prefix only) or 'example' (the example's own positions only), got {self.positions!r}.")
        if self.preset is not None and self.preset not in preset_names():
            raise ConfigError(f"Unknown preset {self.preset!r}; choose one of {', '.join(preset_names())}.")
        check_paper_data(self.preset, self.task, self.data, self.synthetic)
        try:
            date.fromisoformat(self.chat_date)
        except (TypeError, ValueError):
            raise ConfigError(f"chat_date must be an ISO date (YYYY-MM-DD) such as {CHAT_DATE!r}, "
                              f"got {self.chat_date!r}.") from None
        return self

    def recorded(self) -> JsonObject:
        """The settings as written beside results (``config.json``, ``screen.json``, ...): every field, except
        ``ablation`` when it is the paper's zero, ``tie_break`` when it is the default numeric and ``positions`` when
        it is all, so that such runs' files stay as they were before the setting."""
        values = asdict(self)
        for key, default in (("ablation", "zero"), ("tie_break", "numeric"), ("positions", "all")):
            if values[key] == default:
                del values[key]
        return values


# Settings that never change a result (the run's fingerprint leaves them out): a run reopened or rerun may give
# other values. ``preset`` only names where unset values came from; the values themselves are compared.
NEUTRAL_SETTINGS = ("batch_size", "device", "preset", "celtk_version")
# Settings the screen does not read (an exhaustive screen ignores p; no screen reads k). The tie-break is a run's
# setting all the same: a run resumed with another is refused, and `select --tie-break` is where a search takes another.
SEARCH_SETTINGS = ("p", "k")


def differing_settings(stored: Mapping[str, object], now: Mapping[str, object],
                       ignore: tuple[str, ...] = NEUTRAL_SETTINGS) -> list[str]:
    """The keys of two recorded settings (:meth:`RunConfig.recorded`) whose values differ, ``ignore`` aside."""
    return sorted(k for k in set(stored) | set(now) if k not in ignore and stored.get(k) != now.get(k))


def as_flags(values: Mapping[str, object], keys: list[str]) -> str:
    """``keys`` of recorded settings as the command-line flags that give them (``--discovery 100 --no-chat``)."""
    shown = []
    for key in keys:
        value, flag = values.get(key, getattr(RunConfig(), key, None)), "--" + key.replace("_", "-")
        if isinstance(value, bool):
            shown.append(flag if value else "--no-" + key.replace("_", "-"))
        elif isinstance(value, list):
            shown.extend(f"{flag} {v}" for v in value)
        elif value is not None:
            shown.append(f"{flag} {value}")
    return " ".join(shown)


def describe_differences(stored: Mapping[str, object], now: Mapping[str, object], keys: list[str], *,
                         then: str = "stored", given: str = "now") -> str:
    """``"discovery: stored 100, now 200; seed: stored 1, now 0"`` for ``keys`` (a setting the record leaves out is
    its default, as :meth:`RunConfig.recorded` leaves out the default ablation and tie-break)."""
    default = RunConfig()
    return "; ".join(f"{k}: {then} {stored.get(k, getattr(default, k, None))!r}, "
                     f"{given} {now.get(k, getattr(default, k, None))!r}" for k in keys)


def check_type(key: str, value: object, annotation: str, where: str = "config") -> None:
    """Refuse ``value`` of setting ``key`` unless it has the type its field is annotated with
    (``annotation``, written as in :class:`RunConfig`), by beartype (:func:`celtk.boundary.check_type`).

    A bool is not an int here (``discovery = true`` is a mistake, not 1), and a string is never
    read as a bool (``chat = "no"`` is refused, not taken as true)."""
    check_hint(f"{key} in {where}", value, field_hints(RunConfig)[key], annotation)


@public
def load_config_file(path: str | Path | None) -> dict[str, Any]:
    """The settings in a TOML (``.toml``) or JSON file; ``{}`` for ``None``."""
    if path is None:
        return {}
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"Cannot read config file {path}: {error.strerror}.") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"Config file {path} is not UTF-8 text (byte {error.start}); save it as UTF-8.") from None
    try:
        data = tomllib.loads(text) if file.suffix == ".toml" else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"Config file {path} is not valid {'TOML' if file.suffix == '.toml' else 'JSON'}: "
                          f"{error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {path} must hold a table/object of settings.")
    return data


@public
def resolve_config(config_file: str | Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """defaults < preset < ``config_file`` < ``overrides`` (an override of ``None`` means "not given").

    The preset (``preset`` in the file or overrides) fills only what neither sets; it is chosen
    for the task the file and overrides give (by :class:`RunConfig`'s construction, so
    ``RunConfig(**settings)`` resolves a preset the same way)."""
    values = load_config_file(config_file)
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return RunConfig.from_dict(values, where=str(config_file) if config_file else "overrides")


def recorded_config(out: Path) -> RunConfig | None:
    """The settings a run directory recorded (``config.json``, else ``screen.json``'s), or ``None`` for a new one."""
    for name, key in (("config.json", None), ("screen.json", "config")):
        path = Path(out) / name
        if path.exists():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                raise RunStoreError(f"{path} cannot be read as JSON ({error}); it is not a run's settings file. "
                                    "Point Run at a run directory celtk wrote, or at a new directory.") from None
            values = data.get(key) if key else data
            if not isinstance(values, dict):
                raise RunStoreError(f"{path} holds no settings object; point Run at a run directory celtk wrote.")
            return RunConfig.from_dict({k: v for k, v in values.items() if k != "celtk_version"}, str(path))
    return None


def preflight(config: RunConfig, out: str | Path | None = None, *, shard: tuple[int, int] | None = None) -> None:
    """What can be refused before torch loads and before any directory is made: the task's name (and an
    arithmetic subtask), the model's name (an alias's typo or missing package, a path that is not a model), and
    the settings a run directory (``out``, or its ``shard``) recorded. Each raises the error the later stage
    would, with the same advice, in well under a second."""
    check_task_name(config.task)
    check_model_name(config.model)
    if out is not None:
        directory = Path(out) if shard is None else Path(out) / f"shard-{shard[0]}-of-{shard[1]}"
        check_recorded_settings(directory, config)


def check_task_name(spec: str) -> None:
    """Refuse a task that is not registered, and an arithmetic subtask that does not exist."""
    name = spec.partition(":")[0]
    if name not in task_names():
        raise TaskError(f"Unknown task {spec!r}.{suggest(name, task_names())}")
    if name == "arithmetic":  # cheap to build: it checks its subtask
        get_task(spec)


def check_model_name(source: str) -> None:
    """Refuse, without loading anything, a model that cannot load: a packaged alias whose package is missing, a
    name one typo away from an alias, a ``.gguf`` path that is no file, a path that is neither an HF model directory
    nor a ``.gguf`` file. Anything else (a hub id, a TransformerLens name) is left to the loader."""
    if source in ALIASES:
        alias = ALIASES[source]
        if not (alias.available() if alias.available is not None else alias_available(alias)):
            raise ModelSourceError(f"Model alias {source!r} needs its package, which is not installed: {alias.install}")
        return
    path = Path(source).expanduser()
    if source.endswith(".gguf"):
        if not path.is_file():
            raise ModelSourceError(f"No GGUF file {source!r}; give the path of a .gguf file, or a packaged alias "
                                   f"({', '.join(sorted(ALIASES))}).")
        return
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelSourceError(f"Directory {source!r} has no config.json; give an HF model directory "
                                   "(config.json + weights).")
        return
    if path.exists() or source.startswith((".", "/", "~")):
        raise ModelSourceError(f"Model path {source!r} is neither an HF model directory nor a .gguf file.")
    close = difflib.get_close_matches(source, ALIASES, n=1, cutoff=0.8)
    if "/" not in source and close:
        raise ModelSourceError(f"Unknown model {source!r}. Did you mean the packaged alias {close[0]!r}? Packaged "
                               f"aliases: {', '.join(sorted(ALIASES))} (`celtk models` lists them).")


def check_recorded_settings(directory: Path, config: RunConfig) -> None:
    """Refuse ``config`` for a run directory that recorded other settings for its screen (``screen.json``'s, else
    ``config.json``'s), naming each setting with its stored and given value and the flags that give the stored
    ones; batch size, device and the preset's name may differ, and so may p and k, which an exhaustive screen
    does not read. Reads the recorded settings as text, before any model loads (the documents' digests are
    checked when a stage loads them)."""
    stored = None
    for name, key in (("screen.json", "config"), ("config.json", None)):
        path = directory / name
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return  # unreadable: the stage that loads it refuses it, naming the file
            stored = data.get(key) if key and isinstance(data, dict) else data
            break
    if not isinstance(stored, dict):
        return
    now = config.recorded()
    unread = ("k",) if stored.get("screen") == "racing" == config.screen else SEARCH_SETTINGS
    keys = differing_settings(stored, now, NEUTRAL_SETTINGS + unread)
    if keys:
        detail, flags = describe_differences(stored, now, keys), as_flags(stored, keys)
        raise RunStoreError(f"{directory} holds results of a different configuration ({detail}). Results are never "
                            f"mixed, and nothing was changed: rerun with the stored settings ({flags}), "
                            "or give these settings a new run directory (--out).")


@public
def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``"i/N"`` → ``(i, N)`` with ``0 ≤ i < N``; ``None`` → ``None`` (no sharding)."""
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ConfigError(f"Malformed shard {text!r}; write 'i/N' with 0 ≤ i < N, e.g. '0/4'.") from None
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"Shard {text}: need 0 ≤ i < N, e.g. 0/{max(n, 1)} … {max(n, 1) - 1}/{max(n, 1)}.")
    return i, n
