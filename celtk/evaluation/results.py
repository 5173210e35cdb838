"""What an evaluation returns: per-example results (:class:`ExampleResult`), their list (:class:`EvalResult`),
and the settings recorded with them (:class:`EvalConfig`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from jaxtyping import Bool

from celtk.boundary import check_fields
from celtk.errors import ConfigError
from celtk.evaluation.prompts import CHAT_DATE


@dataclass(frozen=True)
class EvalConfig:
    """Settings that change what is scored; recorded with every result."""

    batch_size: int = 32
    chat: bool = False
    allow_code: bool = False
    chat_date: str = CHAT_DATE  # what a chat template that writes "today" sees

    def __post_init__(self) -> None:
        check_fields(self)
        if self.batch_size < 1:
            raise ConfigError(f"Batch size must be at least 1, got {self.batch_size}.")


@dataclass(frozen=True)
class ExampleResult:
    id: str
    correct: bool
    logprob: float | list[float] | None  # None: graded by generation, no log-probability
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EvalResult:
    examples: list[ExampleResult]

    @property
    def correct(self) -> Bool[np.ndarray, " example"]:
        return np.array([e.correct for e in self.examples], dtype=bool)

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if self.examples else float("nan")

    def to_json(self) -> list[dict[str, object]]:
        return [asdict(e) for e in self.examples]
