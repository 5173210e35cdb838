"""The evaluation wing's front door: :func:`evaluate` scores a task's examples with heads ablated, by teacher
forcing or by generation as the task is graded (exported as ``celtk.evaluation.evaluate`` and ``celtk.evaluate``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from celtk.ablation import ablate, as_ablation
from celtk.ablation_kinds import Ablation, AblationKind, refuse_positions_generation
from celtk.boundary import public
from celtk.evaluation.generation import evaluate_generation, refuse_resample_generation
from celtk.evaluation.memory import check_memory
from celtk.evaluation.prompts import prepare
from celtk.evaluation.results import EvalConfig, EvalResult
from celtk.evaluation.shared_prefix import score_pass
from celtk.heads import HeadSet, as_head_set
from celtk.models import Model
from celtk.tasks import Example, Task


@public
def evaluate(model: Model, task: Task, examples: Sequence[Example], shots: Sequence[Example] = (),
             heads: HeadSet | str = "", config: EvalConfig = EvalConfig(),
             progress: Callable[[int, int], None] | None = None,
             ablation: Ablation | AblationKind | str | None = None) -> EvalResult:
    """Score ``examples`` with ``heads`` ablated (none by default) as ``ablation`` says (default zero;
    mean and resample values come from :func:`celtk.evaluation.scoring.ablation_for`). Never prints.

    Returns:
        per-example ``correct`` and the score behind it (summed target log-probability, the
        per-choice log-likelihoods, or the generated text), in the order of ``examples``.
    """
    heads = as_head_set(heads)
    kind = as_ablation(ablation)
    if task.kind == "generate":
        refuse_resample_generation(kind)
        refuse_positions_generation(kind)
        with ablate(model, heads, kind):
            return evaluate_generation(model, task, examples, shots, config, progress)
    prepared = prepare(model, task, examples, shots, config.chat, config.chat_date)
    check_memory(model, prepared, config.batch_size, cached=False, what="Scoring")
    return score_pass(model, prepared, config.batch_size, heads, kind, progress)
