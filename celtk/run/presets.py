"""Named bundles of settings (``--preset``): the paper's sizes and splits, per task family.

A preset sits between the defaults and the config file (defaults < preset < config file <
flags), and the resolved config records its name. ``paper`` picks the entry of the configured
task's family; ``paper:FAMILY`` also sets the task.

The paper states sizes and splits (PAPER.md) but not shots or templates; we take
lm-evaluation-harness 0.4.x's task defaults: 0 shots for arithmetic, BoolQ and HellaSwag
(their YAMLs set no ``num_fewshot``), 3 shots (the first three of the ``prompt`` split) for MBPP.
Held-out is the full official split where the paper used it (BoolQ and HellaSwag validation,
MBPP test).
"""

from __future__ import annotations

from celtk.errors import ConfigError

PAPER: dict[str, dict[str, int | str]] = {
    # 2,000 / 1,000, disjoint, from the official validation rows (pass their local copy as data)
    "arithmetic": {"task": "arithmetic", "discovery": 2000, "heldout": 1000, "fewshot": 0},
    "boolq": {"task": "boolq", "discovery": 2000, "heldout": 3270, "fewshot": 0},  # full validation
    "hellaswag": {"task": "hellaswag", "discovery": 2000, "heldout": 10042, "fewshot": 0},  # full validation
    "mbpp": {"task": "mbpp", "discovery": 374, "heldout": 500, "fewshot": 3},  # full test
}


def preset_names() -> list[str]:
    return ["paper"] + [f"paper:{family}" for family in PAPER]


def preset_values(name: str, task: str | None) -> dict[str, int | str]:
    """The settings preset ``name`` gives a run of ``task`` (its ``task`` key only for ``paper:FAMILY``).

    Raises:
        ConfigError: unknown preset, or ``paper`` for a task the paper did not use.
    """
    if name not in preset_names():
        raise ConfigError(f"Unknown preset {name!r}; choose one of {', '.join(preset_names())}.")
    if ":" in name:
        return dict(PAPER[name.split(":", 1)[1]])
    family = (task or "arithmetic").split(":", 1)[0]
    if family not in PAPER:
        raise ConfigError(f"Preset 'paper' has no settings for task {task!r}; the paper used "
                          f"{', '.join(PAPER)}. Drop the preset (--preset) or choose one of those tasks.")
    values = dict(PAPER[family])
    values.pop("task")  # keep the configured task (e.g. one arithmetic subtask)
    return values


GENERATED = {"arithmetic"}  # families whose default data is celtk's generator, not the official rows


def check_paper_data(preset: str | None, task: str, data: str | None, synthetic: bool) -> None:
    """A paper preset is the paper's data: refuse it on generated data unless ``synthetic`` says so,
    and refuse ``synthetic`` beside a data source (it would mislabel official rows)."""
    family = task.split(":", 1)[0]
    generated = data is None or data == "generator"
    if synthetic and not generated:
        raise ConfigError(f"synthetic (--synthetic) says the run is on generated data, but data = {data!r} is given; "
                          "drop one of them.")
    if synthetic and family not in GENERATED:
        raise ConfigError("synthetic (--synthetic) applies to tasks celtk can generate "
                          f"({', '.join(sorted(GENERATED))}); {task} has no generator.")
    if preset is not None and preset.startswith("paper") and family in GENERATED and generated and not synthetic:
        raise ConfigError(f"Preset {preset!r} is the paper's setting, which draws {family} from the official GPT-3 "
                          "rows; without data (--data DIR with the official files, or --data hub) it would run on "
                          "celtk's generator instead. Give the data, or pass synthetic = true (--synthetic) to run the "
                          "paper's sizes on generated data, which config.json, the CLI and the report then show.")
