"""The defaults of every stage's options, in one place.

A stage is reached three ways: a ``celtk`` command, a :class:`celtk.Run` method and a ``run_*`` function. All
three take their defaults from the objects below (``default=ABLATIONS.draws`` on the flag, ``draws: int =
ABLATIONS.draws`` in both signatures), so a default is changed here or nowhere;
``tests/unit/test_option_sources.py`` reads the three surfaces (and the help texts that name a default) and fails
on a default that differs from these.

What a run is made with is :class:`~celtk.run.config.RunConfig`. The settings of it that other surfaces share
(model, seed, shots, batch size, device, ``p``, ``k``, ...) take their defaults from :data:`RUN` here, so that a
command can show them in its help without importing the settings' checks; a stage on an existing run reads them
from the run's ``config.json`` (:func:`celtk.run.select.search_settings` for ``p``, ``k`` and the tie-break, which
``select`` and ``stability`` share), and a free evaluation (:data:`EVAL`) defaults to them. What a stage keeps from
the run's frozen state (the held-out size a selection froze) is not a default at all.

This module imports nothing of celtk's (nor torch, numpy or beartype), so ``celtk --help`` builds every flag from it
at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunDefaults:
    """:class:`~celtk.run.config.RunConfig`'s defaults for the settings a run shares with the other surfaces."""

    model: str = "smollm2-135m"
    task: str = "arithmetic:2da"
    discovery: int = 200
    heldout: int = 500
    seed: int = 0
    fewshot: int = 3
    chat: bool = False
    chat_date: str = "2024-07-26"  # the date chat templates that write "today" see (celtk.evaluation.prompts')
    batch_size: int = 32
    device: str = "cpu"
    dtype: str = "float32"
    p: int = 10
    k: int = 3
    ablation: str = "zero"
    tie_break: str = "numeric"


RUN = RunDefaults()


@dataclass(frozen=True)
class StageOptions:
    """What every stage's options are: a frozen record of defaults (:data:`STAGE_OPTIONS`)."""


@dataclass(frozen=True)
class SelectOptions(StageOptions):
    """``celtk select`` / ``Run.select`` / ``run_select`` (``p``, ``k`` and the tie-break are the run's)."""

    strategy: str = "algorithm1"
    width: int = 3  # beam width (beam only)


@dataclass(frozen=True)
class TestOptions(StageOptions):
    """``celtk test`` / ``Run.test`` / ``run_test`` (the held-out size is the one frozen with the selection)."""

    __test__ = False  # not a pytest test class, whatever its name
    n_boot: int = 10_000  # bootstrap resamples of the gain's interval


@dataclass(frozen=True)
class TransferOptions(StageOptions):
    shots_seeds: tuple[int, ...] = (1, 2, 3, 4, 5)  # other few-shot draws
    zero_shot: bool = True
    chat: bool = False
    n_boot: int = TestOptions.n_boot  # as the test's interval


@dataclass(frozen=True)
class CalibrateOptions(StageOptions):
    null: str = "search"
    repeats: int = 200
    seed: int = 0


@dataclass(frozen=True)
class AblationsOptions(StageOptions):
    kinds: tuple[str, ...] = ("zero", "mean", "resample")
    alphas: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25, 0.0, -0.5)  # the scale sweep
    positions: tuple[str, ...] = ("all", "prefix", "example")
    draws: int = 5  # resample draws per example
    reference_shots: str = "fixed"
    n_boot: int = TestOptions.n_boot


@dataclass(frozen=True)
class AltscreenOptions(StageOptions):
    method: str = "gradient"
    p: int = 10  # the pool compared with the exhaustive screen's
    masks: int = 200
    rate: float = 0.05
    seed: int = 0


@dataclass(frozen=True)
class StabilityOptions(StageOptions):
    """(``p`` and ``k`` are the run's, as ``select`` takes them.)"""

    resamples: int = 20
    method: str = "bootstrap"
    fraction: float = 0.5
    strategy: str = SelectOptions.strategy
    width: int = SelectOptions.width
    seed: int = 0
    n_boot: int = 2000  # the held-out rows' intervals (library only)


@dataclass(frozen=True)
class AttributesOptions(StageOptions):
    length: int = 40  # tokens of each synthetic sequence
    seed: int = 0
    batch: int = 8  # sequences per forward pass (library only)


@dataclass(frozen=True)
class CompareOptions(StageOptions):
    top: int = 10


@dataclass(frozen=True)
class ReplicateOptions(StageOptions):
    alpha: float = 0.05  # Holm over seeds, and the mean gain's interval


@dataclass(frozen=True)
class EvalOptions(StageOptions):
    """A free evaluation (``celtk eval`` / ``run_eval``) defaults to what a run is made with, split aside."""

    split: str = "discovery"
    model: str = RUN.model
    seed: int = RUN.seed
    chat: bool = RUN.chat
    chat_date: str = RUN.chat_date
    batch_size: int = RUN.batch_size
    device: str = RUN.device
    dtype: str = RUN.dtype
    ablation: str = RUN.ablation


SELECT = SelectOptions()
TEST = TestOptions()
TRANSFER = TransferOptions()
CALIBRATE = CalibrateOptions()
ABLATIONS = AblationsOptions()
ALTSCREEN = AltscreenOptions()
STABILITY = StabilityOptions()
ATTRIBUTES = AttributesOptions()
COMPARE = CompareOptions()
REPLICATE = ReplicateOptions()
EVAL = EvalOptions()

STAGE_OPTIONS: dict[str, StageOptions] = {"select": SELECT, "test": TEST, "transfer": TRANSFER, "calibrate": CALIBRATE,
                 "ablations": ABLATIONS, "altscreen": ALTSCREEN, "stability": STABILITY, "attributes": ATTRIBUTES,
                 "compare": COMPARE, "replicate": REPLICATE, "eval": EVAL}
"""Each stage's options by the command's name."""
