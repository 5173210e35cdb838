"""Shared fixtures: tiny random models per architecture, the real packaged model, fixed seeds. The functions
behind them live in tests/_support.py, which test modules import; nothing imports this file."""

from __future__ import annotations

import atexit
import os
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from _support import TINY_ARCHS, load_smol_tokenizer, make_tiny, planted_model


@pytest.fixture(autouse=True)
def _fixed_seeds() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


# `make test` runs two pytest-xdist workers (one per core, each module on one worker: --dist loadscope): each
# worker, and every process it starts, computes on one thread, so the two do not fight over the cores.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


# celtk's ledger (celtk.store.ledger) records every frozen held-out set and look outside the runs: the module- and
# session-scoped fixtures write to one for the session, each test to its own, so that tests that copy a fixture's
# run and test each copy are not copies of one another's held-out set, and no test writes into a user's cache.
_SESSION_LEDGER = Path(tempfile.mkdtemp(prefix="celtk-ledger-")) / "ledger.jsonl"
os.environ["CELTK_LEDGER"] = str(_SESSION_LEDGER)
atexit.register(shutil.rmtree, _SESSION_LEDGER.parent, ignore_errors=True)  # nothing of the session left in /tmp


@pytest.fixture(autouse=True)
def _own_ledger(tmp_path_factory, monkeypatch) -> Path:
    path = tmp_path_factory.mktemp("ledger") / "ledger.jsonl"
    monkeypatch.setenv("CELTK_LEDGER", str(path))
    return path


@pytest.fixture(scope="session")
def smol_tokenizer():
    """The real SmolLM2 tokenizer (from the packaged GGUF); tiny models share it."""
    return load_smol_tokenizer()


@pytest.fixture(scope="session", params=TINY_ARCHS)
def tiny_model(request, smol_tokenizer):
    """Read-only tiny model, one per architecture."""
    return make_tiny(request.param, smol_tokenizer)


@pytest.fixture(scope="session")
def tiny_llama(smol_tokenizer):
    return make_tiny("llama", smol_tokenizer)


@pytest.fixture(scope="session")
def smollm2():
    """The real packaged SmolLM2-135M-Instruct (read-only)."""
    from celtk.models import load_model

    return load_model("smollm2-135m")


# ---------------------------------------------------------------------------------------------
# The planted run: a tiny Llama with one harmful head, on a task it solves intact (shared by the
# pipeline, search and probe/report tests).


@pytest.fixture(scope="module")
def planted(smol_tokenizer, tmp_path_factory):
    """A tiny Llama whose head L1H2 has its output columns scaled ×25: it hurts the task (_support.planted_model)."""
    return planted_model(smol_tokenizer, tmp_path_factory.mktemp("task"))
