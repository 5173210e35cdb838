"""Screen, select (Algorithm 1) and test in one call: the library side of ``celtk run``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from celtk.models import Model, load_model
from celtk.run.config import RunConfig
from celtk.run.documents import ScreenDocument, SelectionDocument, TestDocument
from celtk.run.screen import run_screen
from celtk.run.select import run_select
from celtk.run.test import run_test
from celtk.runstore import write_json
from celtk.search.strategies import get_strategy
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
    # a frozen selection is not searched again, and a tested run not tested again: its held-out set was looked at once
    out = Path(out)
    selection = SelectionDocument.load(out) if _selected(out, config) else None
    if selection is None:
        selection = run_select(out, p=config.p, k=config.k, model=model, progress=progress)
    test = (TestDocument.load(out) if (out / TestDocument.FILE).exists()
            else run_test(out, model=model, progress=progress))
    seconds = time.time() - started
    write_json(Path(out) / "run_timing.json", {"wall_seconds": round(seconds, 1)})
    return RunResult(screen, selection, test, seconds)


def _selected(out: Path, config: RunConfig) -> bool:
    """Whether ``out`` holds an Algorithm 1 selection with ``config``'s p and k (else run_select decides:
    another p or k after a look at the held-out set is refused there)."""
    if not (out / SelectionDocument.FILE).exists():
        return False
    selection = SelectionDocument.load(out)
    fresh = selection.screen_digest in (None, ScreenDocument.load(out).results_digest())  # None: an older celtk's
    return fresh and selection.strategy == "algorithm1" and (selection.p, selection.k) == (config.p, config.k)
