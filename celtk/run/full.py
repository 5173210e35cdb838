"""Screen, select (Algorithm 1) and test in one call: the library side of ``celtk run``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from celtk.boundary import check_fields, public
from celtk.errors import RunStoreError
from celtk.models import Model, load_model
from celtk.run.config import RunConfig, preflight
from celtk.run.screen import run_screen, stored_screen
from celtk.run.select import run_select, stored_selection
from celtk.run.test import run_test, stored_test
from celtk.search.registry import get_strategy
from celtk.store.documents import ScreenDocument, SelectionDocument, TestDocument
from celtk.store.files import read_json, write_json


@dataclass(frozen=True)
class RunResult:
    screen: ScreenDocument
    selection: SelectionDocument
    test: TestDocument
    seconds: float
    stored: bool = False  # every stage was already finished with these settings: nothing was computed or written

    def __post_init__(self) -> None:
        check_fields(self)


@public
def run_all(config: RunConfig, out: Path, *, model: Model | None = None,
            progress: Callable[[str, int, int], None] | None = None) -> RunResult:
    """Every stage of Algorithm 1 on ``out`` with ``config`` (each resumes if interrupted);
    ``config.p`` and ``config.k`` are checked before the model loads. Writes ``run_timing.json``.

    A finished stage is not run again: a stored screen of the same settings, a selection frozen with
    ``config``'s p and k on it, and the test of that selection are read back. When all three are there the
    run is returned as stored (``stored=True``) without loading a model or writing a file."""
    get_strategy("algorithm1").check(k=config.k, p=config.p)
    preflight(config, out)
    started = time.time()
    out = Path(out)
    stored = stored_run(config, out, model=model)
    if stored is not None:
        return stored
    if model is None:
        if progress:
            progress("load", 0, 1)  # a GGUF's first load dequantizes it: the log says so before the wait
        model = load_model(config.model, device=config.device, dtype=config.dtype)
        if progress:
            progress("load", 1, 1)
    # each stage returns its stored result where there is one: a frozen selection is not searched again, and a
    # tested run not tested again (its held-out set was looked at once)
    screen = run_screen(config, out, model=model, progress=progress)
    selection = run_select(out, p=config.p, k=config.k, model=model, progress=progress, tie_break=config.tie_break)
    test = run_test(out, model=model, progress=progress)
    seconds = time.time() - started
    write_json(out / "run_timing.json", {"wall_seconds": round(seconds, 1)})
    return RunResult(screen, selection, test, seconds)


def stored_run(config: RunConfig, out: Path, *, model: Model | None = None) -> RunResult | None:
    """The run in ``out`` when every stage of ``run_all(config, out)`` is stored (screen, selection, test), read
    without loading a model; else ``None``."""
    screen = stored_screen(config, out, model=model)
    selection = (stored_selection(out, p=config.p, k=config.k, tie_break=config.tie_break)
                 if screen is not None else None)
    test = stored_test(out) if selection is not None else None
    if screen is None or selection is None or test is None:
        return None
    return RunResult(screen, selection, test, _stored_seconds(out), stored=True)


def _stored_seconds(out: Path) -> float:
    """The wall time the run recorded when it was computed (0 when it recorded none)."""
    path = out / "run_timing.json"
    try:
        return float(read_json(path)["wall_seconds"]) if path.exists() else 0.0
    except (RunStoreError, KeyError, TypeError, ValueError):
        return 0.0
