"""Opening a run: the loaded model, task and splits of one configuration (:class:`Session`), and
:func:`open_run`, which reopens a screened run directory on the same weights and discovery set."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from jaxtyping import Bool

from celtk.ablation_kinds import Ablation, AblationKind, check_positions
from celtk.boundary import check_fields, public
from celtk.errors import ConfigError
from celtk.evaluation.generation import StopRule, refuse_resample_generation
from celtk.evaluation.prompts import prepare, prepared_hash
from celtk.evaluation.scoring import ablation_for, prompt_prefix
from celtk.heads import HeadSet
from celtk.models import Model, load_model
from celtk.planning.plan import check_memory
from celtk.registry import annotation_names
from celtk.run.config import RunConfig
from celtk.screening.cached import auto_batch
from celtk.screening.fused import fused_layers
from celtk.screening.registry import SCREENERS
from celtk.search.scores import HeadScore
from celtk.store.directory import RunDirectory
from celtk.store.documents import Correctness, ScreenDocument, SelectionDocument
from celtk.store.files import fingerprint_key
from celtk.store.memo import Progress, SetMemo
from celtk.store.rules import Stage
from celtk.tasks import Splits, Task, get_task, make_splits
from celtk.tasks.jsonl import jsonl_spec

if TYPE_CHECKING:
    from celtk.evaluation.prompts import Prepared
    from celtk.screening.cached import CachedScreener
    from celtk.screening.generation import GenerationScreener

# the engines load through their registry, on first use; a runtime type check reads their names from here
__getattr__ = annotation_names({"Prepared": "celtk.evaluation.prompts", "CachedScreener": "celtk.screening.cached",
                                "GenerationScreener": "celtk.screening.generation"})


@dataclass
class Session:
    """A loaded model, task and splits for one run configuration."""

    config: RunConfig
    model: Model
    task: Task
    splits: Splits
    _ablation: dict[str, Ablation] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def open(cls, config: RunConfig, model: Model | None = None) -> Session:
        task = task_for(config)
        splits = make_splits(task, config.discovery, config.heldout, seed=config.seed, fewshot=config.fewshot)
        model = model or load_model(config.model, device=config.device, dtype=config.dtype)
        if task.kind == "generate":  # a generation limit beyond the model's context, refused before any work

            StopRule.for_task(model, task)
        return cls(config, model, task, splits)

    def prepared(self, which: str) -> Prepared:
        """The tokenised ``discovery`` or ``heldout`` split (an :class:`celtk.evaluation.prompts.Prepared`): an
        example longer than the model's context is refused, and so is a plain pass over it (the least
        any stage does with it) that the device's free memory cannot hold."""
        prepared = self._tokenised(which)
        if self.task.kind != "generate" and isinstance(self.config.batch_size, int):
            check_memory(self.model, prepared, self.config.batch_size, cached=False, what=f"Scoring the {which} set")
        return prepared

    def _tokenised(self, which: str) -> Prepared:
        """:meth:`prepared` without the memory check: for hashing prompts, which runs no pass."""
        examples = self.splits.discovery if which == "discovery" else self.splits.heldout
        return prepare(self.model, self.task, examples, self.splits.shots, self.config.chat, self.config.chat_date)

    def screener(self, which: str) -> CachedScreener | GenerationScreener:
        """A :class:`celtk.screening.cached.CachedScreener` on the ``discovery`` or ``heldout`` split, or a
        :class:`celtk.screening.generation.GenerationScreener` for a generation-graded task."""
        return self.screener_on(self.prepared(which))

    def screener_on(self, prepared: Prepared, ablation: Ablation | None = None) -> CachedScreener | GenerationScreener:
        """The screener of :meth:`screener` on any prepared examples (e.g. a racing screen's chunk), under
        the run's ablation kind (or ``ablation``, a :class:`celtk.ablation_kinds.Ablation`)."""
        ablation = self.ablation() if ablation is None else ablation
        size, rows = self.batch_sizes(prepared)
        if self.task.kind == "generate":
            return SCREENERS.get("generation")(self.model, prepared, self.task, allow_code=self.config.allow_code,
                                               batch_size=size, share_prefix=self.config.share_prefix,
                                               ablation=ablation)
        screener = SCREENERS.get("cached")(self.model, prepared, share_prefix=self.config.share_prefix,
                                           ablation=ablation, batch_size=size,
                                           **({} if rows is None else {"rows_per_pass": rows}))
        check_memory(self.model, prepared, screener.batch_size, screener.rows_per_pass,
                     share_prefix=self.config.share_prefix, what="The cached screener")
        return screener

    def batch_sizes(self, prepared: Prepared) -> tuple[int, int | None]:
        """The batch size for ``prepared`` and the cached screener's rows per pass (``None``: its default), resolved
        here for the screeners and the streamed test passes: the configured size, or under ``batch_size = "auto"``
        what fits half the device's free memory (:func:`celtk.screening.cached.auto_batch`); a generation-graded
        task, which has no teacher-forced requests to size, takes 16 under "auto". (The gradient rankers take 8
        under "auto", since they also hold a backward pass; ``eval`` takes its own ``batch_size``.)"""
        if isinstance(self.config.batch_size, int):
            return self.config.batch_size, None
        if self.task.kind == "generate":
            return 16, None
        return auto_batch(self.model, prepared)

    def ablation(self, kind: AblationKind | str | None = None, positions: str | None = None) -> Ablation:
        """The run's ablation kind (or ``kind``) with its values (a :class:`celtk.ablation_kinds.Ablation`): mean
        and resample are measured on the intact model over the discovery set, prompted as every example is
        (its shots, chat setting and date), resample drawn with the run's seed, at the run's positions (or
        ``positions``: all, prefix, example). Built once per kind and positions."""
        kind = AblationKind.parse(self.config.ablation if kind is None else kind)
        positions = self.config.positions if positions is None else positions
        cache = self._ablation if self._ablation is not None else {}
        self._ablation = cache
        key = str(kind) if positions == "all" else f"{kind} @ {positions}"
        if key not in cache:
            if kind.needs_reference and not self.splits.discovery:
                raise ConfigError(f"{kind} ablation measures its values on the run's discovery set, and this session "
                                  "has none; use zero or scale:α here.")
            if self.task.kind == "generate":  # before the reference pass, not after it
                refuse_resample_generation(kind)
                if positions != "all":
                    raise ConfigError(f"Ablation at {positions} positions is not offered for generation-graded tasks: "
                                      "their left-padded batches move every position and the generated tokens have "
                                      "no prefix boundary. Use positions all.")
            c = self.config
            if positions != "all":  # the same values, measured once: only where they replace z differs
                prefix = prompt_prefix(self.model, self.task, self.splits.shots, c.chat, c.chat_date)
                cache[key] = replace(self.ablation(kind, "all"), positions=check_positions(positions), prefix=prefix)
            else:
                cache[key] = ablation_for(self.model, kind, self.task, self.splits.discovery, self.splits.shots,
                                          c.chat, c.chat_date, seed=c.seed)
        return cache[key]

    def replay(self) -> str:
        """How the screener re-runs layers: ``fused`` or ``bridge`` (:class:`celtk.screening.cached.CachedScreener`),
        or ``generation`` (the generation screener's own decoding). Recorded in ``timing.json``."""
        if self.task.kind == "generate":
            return "generation"
        return "bridge" if fused_layers(self.model) is None else "fused"

    def fingerprint(self) -> dict[str, object]:
        """What results depend on (not batch size or device, which must not change them); the
        hash of the discovery prompts' token ids refuses any change of prompt (template, date, shot text)."""
        c = self.config
        racing = {"racing_mode": c.racing_mode} if c.screen == "racing" else {}
        if c.screen == "racing" and c.tie_break != "numeric":  # a race ranks heads: its pool depends on the key
            racing["tie_break"] = c.tie_break
        # zero runs keep the fingerprint they had; another kind is recorded, and never mixed with them
        kind = {"ablation": c.ablation} if c.ablation != "zero" else {}
        kind |= {"positions": c.positions} if c.positions != "all" else {}  # likewise all positions
        return {"model": c.model, "weight_hash": self.model.weight_hash, "dtype": c.dtype, "task": self.task.config(),
                "seed": c.seed, "fewshot": c.fewshot, "chat": c.chat, "chat_date": c.chat_date,
                "discovery": self.splits.manifest().discovery_hash, "shots": [s.id for s in self.splits.shots],
                "prompt_hash": prepared_hash(self._tokenised("discovery")), "share_prefix_exact": True,
                "screen": c.screen, **racing, **kind}


def task_for(config: RunConfig) -> Task:
    """The task ``config`` names; a ``jsonl:PATH`` task takes its grading, stop strings and token
    limit from the config (:func:`celtk.tasks.jsonl.jsonl_spec`)."""
    name, generation = config.task, config.stop is not None or config.max_new_tokens is not None
    if config.grading not in ("teacher", "generate"):
        raise ConfigError(f"grading must be 'teacher' or 'generate', got {config.grading!r}.")
    if generation and config.grading != "generate":
        raise ConfigError("stop and max_new_tokens (--stop, --max-new-tokens) bound a graded generation; add "
                          "grading = 'generate' (--grading generate) with a jsonl:PATH task.")
    if name.startswith("jsonl:") and config.grading == "generate":
        if "=" in name.rpartition("?")[2]:
            raise ConfigError(f"Task {name!r} already spells its options after '?'; give them either there or as "
                              "grading/stop/max_new_tokens settings (--grading, --stop, --max-new-tokens), not both.")
        stop = tuple(config.stop) if config.stop is not None else None
        name = jsonl_spec(name.removeprefix("jsonl:"), config.grading, stop, config.max_new_tokens)
    task = get_task(name, data_path=config.data)
    if config.grading == "generate" and task.kind != "generate":
        raise ConfigError(f"Task {task.full_name} is graded by teacher forcing and has no generation grading; "
                          "--grading generate applies to jsonl:PATH tasks of prompt/target lines (mbpp and humaneval "
                          "are always graded by generation).")
    if generation and not name.startswith("jsonl:"):
        raise ConfigError(f"Task {task.full_name} sets its own stop strings and token limit; --stop and "
                          "--max-new-tokens apply to jsonl:PATH tasks with --grading generate.")
    return task


def neutral_overrides(device: str | None = None, batch_size: int | str | None = None) -> dict[str, int | str]:
    """The settings a stage may take other values of than the run recorded (they cannot change a result): those
    given."""
    return {k: v for k, v in (("device", device), ("batch_size", batch_size)) if v is not None}


@public
def session_for(document: ScreenDocument | SelectionDocument, model: Model | None = None, **overrides: Any) -> Session:
    """A session on the configuration stored in ``document`` (a screen or selection document), with
    ``overrides``. It only resolves: whether the session is the run's (its weights, task, discovery set,
    held-out set) is the run directory's to check (:meth:`celtk.store.directory.RunDirectory.admit`)."""
    stored = {k: v for k, v in document.config.items() if k != "celtk_version"}
    return Session.open(RunConfig.from_dict(stored | overrides, type(document).FILE), model)


@public
def load_screen(out: Path | RunDirectory) -> tuple[ScreenDocument, Bool[np.ndarray, " example"], list[HeadScore]]:
    """A merged screen: the document, the intact correctness (bool ``[n]``) and one score per head
    (of a racing screen: per head scored on every example, the pool among them). ``out``: the run directory (a stage
    passes the one it holds, which reads ``screen.json`` once)."""
    doc = opened(out).screen()
    intact = doc.intact_correct.outcomes()
    # a racing screen's heads dropped early are left out: a search sees only heads scored on every example
    scores = [HeadScore.compare(HeadSet((r.head,)), r.correct.outcomes(), intact)
              for r in doc.complete_rows()]
    return doc, intact, scores


def opened(out: Path | RunDirectory) -> RunDirectory:
    """``out`` as a :class:`RunDirectory` (a path: a new one, which holds no lock)."""
    return out if isinstance(out, RunDirectory) else RunDirectory(out)


@dataclass
class ScreenedRun:
    """A screened run directory, opened for a search: its screen and a session on the same
    model and discovery set."""

    out: Path
    screen: ScreenDocument
    intact: Bool[np.ndarray, " example"]  # on the discovery set
    scores: list[HeadScore]  # one per head, in screen order (racing screens: the heads scored on every example)
    session: Session

    def __post_init__(self) -> None:
        check_fields(self)


@public
def open_run(out: Path | RunDirectory, model: Model | None = None, *, stage: Stage | None = None,
             **overrides: Any) -> ScreenedRun:
    """Reopen the screened run in ``out`` (``screen.json``) on ``model`` (default: load the run's), refused
    unless the session is the run's: the same-run checks of ``stage`` (:meth:`RunDirectory.admit`;
    ``None``: weights, task, settings and discovery set). A stage passes the :class:`RunDirectory` it holds
    locked, so the screen is read once.

    ``overrides`` replace stored settings that results do not depend on (batch size, device)."""
    rd = opened(out)
    doc, intact, scores = load_screen(rd)
    session = session_for(doc, model, **overrides)
    rd.admit(stage, session, doc)
    return ScreenedRun(rd.path, doc, intact, scores, session)


def memo_for(run: ScreenedRun, progress: Progress | None = None, stage: str = "select", work: bool = False) -> SetMemo:
    """The memo of a :class:`ScreenedRun` (``OUT/select_parts/sets``), shared by
    select, altscreen (LASSO) and stability so none scores a set another already scored. ``work``: also report
    ``"<stage> work"``, the replay work done in thousandths (:data:`celtk.store.memo.WORK_SCALE`), for a stage that
    scores all its sets in one call (Algorithm 1), whose sets cost unequal time (a set starting in layer 0 replays
    every layer)."""
    key = fingerprint_key({"fingerprint": run.session.fingerprint(), "intact": Correctness.of(run.intact).bits})
    return SetMemo(run.out / "select_parts" / "sets", run.intact, lambda: run.session.screener("discovery"), progress,
                   stage, key=key, work=work)
