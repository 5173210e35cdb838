"""The evaluation wing: tokenise once, batch, score teacher-forced or generate, return per-example results.

* :mod:`celtk.evaluation.results`: :class:`EvalConfig`, :class:`ExampleResult`, :class:`EvalResult`.
* :mod:`celtk.evaluation.prompts`: chat templates and dates, encoding, :func:`prepare`.
* :mod:`celtk.evaluation.scoring`: teacher-forced scoring and the mean/resample reference values.
* :mod:`celtk.evaluation.shared_prefix`: streamed passes that run the shared few-shot prefix once per pass.
* :mod:`celtk.evaluation.generation`: greedy generation and its grading.
* :mod:`celtk.evaluation.activations`: the activation bytes each stage holds, from a model's shape and a task's
  sizes alone (no torch: ``celtk plan`` prices a run with it).
* :mod:`celtk.evaluation.memory`: the memory check every stage makes before its first pass.
* :mod:`celtk.evaluation.front`: :func:`evaluate`.

:func:`evaluate` is the front door: it scores a task's examples with heads ablated, by teacher forcing or by
generation as the task is graded. The names below load on first use, so importing the package (and its
torch-free :mod:`celtk.evaluation.activations`) loads no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "EvalConfig": "results", "EvalResult": "results", "ExampleResult": "results",
    "ablation_for": "scoring", "evaluate": "front", "prepare": "prompts",
}

__all__ = ["EvalConfig", "EvalResult", "ExampleResult", "ablation_for", "evaluate", "prepare"]


def __getattr__(name: str) -> object:
    if name in _EXPORTS:
        value = globals()[name] = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:  # re-exported (`X as X`), each from the module that defines it
    from celtk.evaluation.front import evaluate as evaluate
    from celtk.evaluation.prompts import prepare as prepare
    from celtk.evaluation.results import EvalConfig as EvalConfig
    from celtk.evaluation.results import EvalResult as EvalResult
    from celtk.evaluation.results import ExampleResult as ExampleResult
    from celtk.evaluation.scoring import ablation_for as ablation_for
