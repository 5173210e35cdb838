"""Screen, select (Algorithm 1) and test in one call: the library side of ``celtk run``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from celtk.models import Model, load_model
from celtk.run.config import RunConfig
from celtk.run.documents import ScreenDocument, SelectionDocument, TestDocument
from celtk.run.frozen import tested
from celtk.run.screen import run_screen
from celtk.run.select import run_select
from celtk.run.test import run_test
from celtk.runstore import write_json
from celtk.strategies import get_strategy
from celtk.validation import check_fields


@dataclass(frozen=True)
class RunResult:
    screen: ScreenDocument
    selection: SelectionDocument
    test: TestDocument
    seconds: float

    def __post_init__(self) -> None:
        check_fields(self)


def run_all(config: RunConfig, out: Path, *, model: Model | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> RunResult:
    """Every stage of Algorithm 1 on ``out`` with ``config`` (each resumes if interrupted);
    ``config.p`` and ``config.k`` are checked before the model loads. Writes ``run_timing.json``."""
    get_strategy("algorithm1").check(k=config.k, p=config.p)
    started = time.time()
    model = model or load_model(config.model, device=config.device, dtype=config.dtype)
    screen = run_screen(config, Path(out), model=model, progress=progress)
    if _finished(Path(out), config):  # a tested run is not reselected or retested: its held-out set stays frozen
        selection, test = SelectionDocument.load(out), TestDocument.load(out)
    else:
        selection = run_select(Path(out), p=config.p, k=config.k, model=model, progress=progress)
        test = run_test(Path(out), model=model, progress=progress)
    seconds = time.time() - started
    write_json(Path(out) / "run_timing.json", {"wall_seconds": round(seconds, 1)})
    return RunResult(screen, selection, test, seconds)


def _finished(out: Path, config: RunConfig) -> bool:
    """Whether ``out`` holds a tested Algorithm 1 selection with ``config``'s p and k (else
    run_select decides: a different p or k after the test is refused there)."""
    if not (tested(out) and (out / SelectionDocument.FILE).exists() and (out / TestDocument.FILE).exists()):
        return False
    selection = SelectionDocument.load(out)
    return selection.strategy == "algorithm1" and (selection.p, selection.k) == (config.p, config.k)
