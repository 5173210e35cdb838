"""One handle on one run directory for notebooks and scripts: :class:`Run`.

``Run(out, config=RunConfig(...))`` starts a run (or reopens one with the same settings);
``Run(out)`` reopens a run from the settings it recorded. The model is loaded once, on first
need (or given as ``model=``), and every stage reuses it. Each method is one CLI verb, with the
verb's options as keyword arguments, and returns the document the stage writes
(:mod:`celtk.store.documents`): nothing prints.

    >>> import celtk
    >>> config = celtk.RunConfig(model="tiny-llama", task="arithmetic:2da", discovery=8, heldout=8,
    ...                          fewshot=0, batch_size=8, p=3, k=2)
    >>> run = celtk.Run(out, config=config, model=model)  # model=None: celtk.load_model(config.model), once
    >>> screen = run.screen()                              # celtk screen --out OUT
    >>> len(screen.heads) == model.n_layers * model.n_heads
    True
    >>> selection = run.select()                           # celtk select OUT (p and k: the config's)
    Traceback (most recent call last):
    celtk.errors.NothingToFreezeError: No head set gains on the discovery set: ...
    >>> selection = run.select(force=True)                 # a tiny random model gains nothing: freeze it anyway
    >>> 1 <= len(selection.heads) <= 2 and selection.forced_no_gain
    True
    >>> test = run.test(n_boot=200)                        # celtk test OUT
    >>> test.n, test.heads == selection.heads
    (8, True)
    >>> run.report().name                                  # celtk report OUT
    'index.html'

The run's examples, and what the model reads and must answer for one of them:

    >>> example = run.splits.heldout[0]
    >>> run.prompt(example) == example.context            # no shots here (fewshot=0), no chat template
    True
    >>> run.answer(example) == example.target
    True

A second handle on the same directory reads the recorded settings, and one with other settings is
refused before anything is computed:

    >>> celtk.Run(out, model=model).config == config
    True
    >>> from dataclasses import replace
    >>> celtk.Run(out, config=replace(config, seed=1), model=model)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    celtk.errors.RunStoreError: ... holds a run with other settings (seed: recorded 0, given 1)...
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from celtk.boundary import public
from celtk.errors import ConfigError, RunStoreError, TaskError
from celtk.heads import HeadSet
from celtk.registry import annotation_names
from celtk.report import write_report
from celtk.run.config import RunConfig, parse_shard, recorded_config
from celtk.run.options import (
    ABLATIONS,
    ALTSCREEN,
    ATTRIBUTES,
    CALIBRATE,
    COMPARE,
    REPLICATE,
    RUN,
    SELECT,
    STABILITY,
    TEST,
    TRANSFER,
)
from celtk.store.directory import RunDirectory
from celtk.store.documents import ScreenDocument, SelectionDocument, TestDocument
from celtk.tasks import continuation_delimiter

if TYPE_CHECKING:
    from celtk.analysis import CompareDocument, HeadAttributesDocument
    from celtk.models import Model
    from celtk.run.replicate import ReplicateDocument
    from celtk.run.session import Session
    from celtk.store.documents import (
        AblationKindsDocument,
        AltscreenDocument,
        CalibrationDocument,
        EvalDocument,
        ScreenDocument,
        SelectionDocument,
        StabilityDocument,
        TestDocument,
        TransferDocument,
    )
    from celtk.tasks import Example, Splits, Task

__getattr__ = annotation_names({  # what the boundary's type check resolves on first need
    "CompareDocument": "celtk.analysis", "HeadAttributesDocument": "celtk.analysis", "Model": "celtk.models",
    **dict.fromkeys(("AblationKindsDocument", "AltscreenDocument", "CalibrationDocument", "EvalDocument",
                     "StabilityDocument", "TransferDocument"), "celtk.store.documents"),
    "ReplicateDocument": "celtk.run.replicate", "Session": "celtk.run.session", "Example": "celtk.tasks",
    "Splits": "celtk.tasks", "Task": "celtk.tasks"})

Progress = Callable[[str, int, int], None]

UNRECORDED = ("batch_size", "device")
"""Settings a reopened run may change: results do not depend on them (the run's fingerprint leaves them out)."""


def load_model(source: str, *, device: str, dtype: str) -> Model:
    """The one place the handle loads a model (:func:`celtk.models.load_model`)."""
    from celtk.models import load_model as load

    return load(source, device=device, dtype=dtype)


def check_same_settings(out: Path, recorded: RunConfig, given: RunConfig) -> None:
    """Refuse ``given`` unless it equals the run's ``recorded`` settings in everything results depend on."""
    stored, now = recorded.recorded(), given.recorded()
    keys = sorted(k for k in set(stored) | set(now) if k not in UNRECORDED and stored.get(k) != now.get(k))
    if keys:
        detail = "; ".join(f"{k}: recorded {stored.get(k)!r}, given {now.get(k)!r}" for k in keys[:4])
        raise RunStoreError(f"{out} holds a run with other settings ({detail}). Results are never mixed, and nothing "
                            "was changed: reopen it with its own settings (Run(out) reads them), or start these "
                            "settings in a new run directory.")


class Run:
    """A run directory with its settings and one loaded model; each stage method writes the stage's files
    and returns its document, exactly as the CLI verb of the same name does.

    ``out``: the run directory. ``config``: the settings of a new run (a :class:`RunConfig`); leave it out
    to reopen a run from the settings it recorded; given for an existing run, it must equal them
    (``batch_size`` and ``device`` aside). ``model``: a loaded model to use instead of loading
    ``config.model`` (loaded once, on the first stage that needs one)."""

    @public
    def __init__(self, out: str | Path, config: RunConfig | None = None,
                 model: Model | None = None) -> None:
        self.out = Path(out)
        if self.out.exists() and not self.out.is_dir():
            raise RunStoreError(f"{self.out} is a file; a run directory is a directory (new or written by celtk).")
        recorded = recorded_config(self.out)
        if config is None:
            if recorded is None:
                raise ConfigError(f"{self.out} holds no run yet (no config.json or screen.json), so there are no "
                                  "settings to read: start one with Run(out, config=RunConfig(...)).")
            config = recorded
        elif recorded is not None:
            check_same_settings(self.out, recorded, config)
        self.config: RunConfig = config
        self._model = model
        self._session: Session | None = None

    def __repr__(self) -> str:
        loaded = "loaded" if self._model is not None else "not loaded yet"
        return f"Run({str(self.out)!r}, model {self.config.model!r} {loaded}, task {self.config.task!r})"

    # ---- what the stages share -------------------------------------------------------------------

    @property
    def model(self) -> Model:
        """The run's model: the one given, or ``config.model`` loaded on first use (once)."""
        if self._model is None:
            self._model = load_model(self.config.model, device=self.config.device, dtype=self.config.dtype)
        return self._model

    @property
    def session(self) -> Session:
        """The run's task and splits on its model (the held-out set: the one frozen with the selection, once
        there is one)."""
        from celtk.run.session import Session

        overrides = RunDirectory(self.out).heldout_overrides() if self.out.is_dir() else {}
        config = replace(self.config, heldout=overrides.get("heldout", self.config.heldout))
        if self._session is None or self._session.config != config:
            self._session = Session.open(config, self.model)
        return self._session

    @property
    def task(self) -> Task:
        return self.session.task

    @property
    def splits(self) -> Splits:
        """The discovery, held-out and shot examples (:class:`celtk.tasks.Splits`). Reading held-out
        examples is not a look; scoring them is (:meth:`test`, :meth:`eval`)."""
        return self.session.splits

    @public
    def prompt(self, example: Example | str) -> str:
        """The prompt text the run scores for ``example`` (an :class:`~celtk.tasks.Example` or the id of one of
        the run's discovery or held-out examples): its shots, and the chat template when the run uses one."""
        from celtk.evaluation.prompts import format_prompt

        c = self.config
        return format_prompt(self.model, self.task, self._example(example), self.splits.shots, c.chat, c.chat_date)

    @public
    def answer(self, example: Example | str) -> str:
        """The text the run scores as ``example``'s right answer after :meth:`prompt`: the target, or the
        delimiter and the correct choice of a multiple-choice example. (An :class:`~celtk.tasks.Example`'s
        ``target`` is ``None`` for multiple choice; this is always text, or a :class:`TaskError`.)"""
        example = self._example(example)
        if self.task.kind == "choice" and example.choices is not None and example.label is not None:
            return continuation_delimiter(self.task, self.config.chat) + example.choices[example.label]
        if example.target is None:
            raise TaskError(f"Example {example.id} has no answer text: no target, and no choices with a label.")
        return example.target

    def _example(self, example: Example | str) -> Example:
        if not isinstance(example, str):
            return example
        found = {e.id: e for e in [*self.splits.discovery, *self.splits.heldout]}
        if example not in found:
            shown = ", ".join(list(found)[:3])
            raise ConfigError(f"No example {example!r} in this run's discovery or held-out set; ids look like {shown}.")
        return found[example]

    # ---- the results so far (None until the stage has run) ------------------------------------------

    @property
    def screen_result(self) -> ScreenDocument | None:
        """``screen.json``'s document, or ``None`` before the screen (what :meth:`screen` returns once it ran)."""
        return RunDirectory(self.out).load_if(ScreenDocument)

    @property
    def selection(self) -> SelectionDocument | None:
        """``selection.json``'s document (the frozen heads and held-out set), or ``None`` before :meth:`select`."""
        return RunDirectory(self.out).load_if(SelectionDocument)

    @property
    def test_result(self) -> TestDocument | None:
        """``test.json``'s document (the run's first test), or ``None`` before :meth:`test`."""
        return RunDirectory(self.out).load_if(TestDocument)

    # ---- the stages, one per CLI verb ------------------------------------------------------------

    @public
    def screen(self, *, layers: Sequence[int] | None = None, shard: str | None = None,
               progress: Progress | None = None) -> ScreenDocument:
        """``celtk screen``: every head ablated alone on the discovery set (``layers``: only those layers'
        heads, for a quick look; ``shard``: ``"i/N"``, the slice written to ``OUT/shard-i-of-N``)."""
        from celtk.run.screen import run_screen, stored_screen

        stored = stored_screen(self.config, self.out, shard=parse_shard(shard), layers=layers,
                               model=self._model)
        if stored is not None:
            return stored
        return run_screen(self.config, self.out, shard=parse_shard(shard), model=self.model,
                          progress=progress, layers=layers)

    def merge(self) -> ScreenDocument:
        """``celtk merge``: join the shards' screens into ``screen.json``."""
        from celtk.run.screen import merge_shards

        return merge_shards(self.out)

    @public
    def select(self, *, p: int | None = None, k: int | None = None, strategy: str = SELECT.strategy,
               width: int = SELECT.width, heldout: int | None = None, force: bool = False,
               progress: Progress | None = None, tie_break: str | None = None) -> SelectionDocument:
        """``celtk select``: search for the best head set and freeze it with its held-out set (``p``, ``k`` and
        ``tie_break``, how heads tied in every measure are ranked, default to the run's settings)."""
        from celtk.run.select import run_select, stored_selection

        p, k = self.config.p if p is None else p, self.config.k if k is None else k
        tie_break = self.config.tie_break if tie_break is None else tie_break
        stored = None if force else stored_selection(self.out, p=p, k=k, strategy=strategy, width=width,
                                                     heldout=heldout, tie_break=tie_break)
        if stored is not None:
            return stored
        return run_select(self.out, p=p, k=k, strategy=strategy, width=width, heldout=heldout,
                          model=self.model, force=force, progress=progress, tie_break=tie_break)

    @public
    def test(self, *, heldout: int | None = None, n_boot: int = TEST.n_boot, force: bool = False,
             progress: Progress | None = None) -> TestDocument:
        """``celtk test``: the frozen selection against the intact model on the held-out set (once: a second call
        returns the first test, scoring nothing, unless ``force``)."""
        from celtk.run.test import run_test, stored_test

        stored = None if force else stored_test(self.out, heldout)
        if stored is not None:
            return stored
        return run_test(self.out, heldout=heldout, model=self.model, n_boot=n_boot, force=force,
                        progress=progress)

    @public
    def replicate(self, seeds: Sequence[int] | str, *, out: str | Path, alpha: float = REPLICATE.alpha,
                  progress: Progress | None = None) -> ReplicateDocument:
        """``celtk replicate``: this run's settings over other split ``seeds`` (``[1, 2, 3]`` or ``"1-3"``), each
        seed a run of its own, ``out/seed-S``, screened, selected and tested with this run's settings (its
        configured held-out size, not one a ``select --heldout`` froze); returns the summary across seeds
        (``out/replicate.json``). Uses this run's model when it is loaded, and loads none when every seed is
        finished."""
        from celtk.run.replicate import parse_seeds, run_replicate

        return run_replicate(self.config, Path(out), parse_seeds(seeds), model=self._model, alpha=alpha,
                             progress=progress)

    @public
    def transfer(self, *, shots_seeds: Sequence[int] | None = None, zero_shot: bool = TRANSFER.zero_shot,
                 subtasks: Sequence[str] = (), tasks: Sequence[str] = (), chat: bool = TRANSFER.chat,
                 other_models: Sequence[str] = (), plain_text: str | Path | None = None,
                 heldout: int | None = None, n_boot: int = TRANSFER.n_boot,
                 progress: Progress | None = None) -> TransferDocument:
        """``celtk transfer``: the tested selection under other shots, zero-shot, neighbouring subtasks, other
        tasks, the chat template and other models (``other_models``: names, each loaded once)."""
        from celtk.run.transfer import run_transfer, variant_grid

        grid = variant_grid(SelectionDocument.load(self.out).task.name, shot_seeds=shots_seeds, zero_shot=zero_shot,
                            subtasks=subtasks, tasks=tasks, chat=chat, models=other_models)
        return run_transfer(self.out, grid, model=self.model, heldout=heldout, plain_text=plain_text,
                            n_boot=n_boot, progress=progress)

    @public
    def calibrate(self, *, null: str = CALIBRATE.null, repeats: int = CALIBRATE.repeats,
                  n_candidates: int | None = None, seed: int = CALIBRATE.seed,
                  progress: Progress | None = None) -> CalibrationDocument:
        """``celtk calibrate``: the best discovery gain a search finds under ``null`` (``search``, the p-value to
        quote; ``permutation`` or ``random-heads``, scales without one; ``n_candidates``: the older control's
        random sets per draw, random-heads only — the CLI's ``--candidates``)."""
        from celtk.run.calibrate import run_calibration

        return run_calibration(self.out, null=null, repeats=repeats, seed=seed, n_candidates=n_candidates,
                               model=self.model, progress=progress)

    @public
    def ablations(self, *, kinds: Sequence[str] = ABLATIONS.kinds,
                  alphas: Sequence[float] = ABLATIONS.alphas, positions: Sequence[str] = ABLATIONS.positions,
                  draws: int = ABLATIONS.draws, reference_shots: str = ABLATIONS.reference_shots,
                  n_boot: int = ABLATIONS.n_boot,
                  progress: Progress | None = None) -> AblationKindsDocument:
        """``celtk ablations``: the tested selection under other ablation kinds, at each of ``positions``, resample
        drawn ``draws`` times (its references' shots ``fixed`` or ``redraw``), and a scale sweep."""
        from celtk.run.ablations import run_ablation_kinds

        return run_ablation_kinds(self.out, kinds=kinds, alphas=alphas, positions=positions, draws=draws,
                                  reference_shots=reference_shots, model=self.model, n_boot=n_boot,
                                  progress=progress)

    @public
    def altscreen(self, *, method: str = ALTSCREEN.method, p: int = ALTSCREEN.p,
                  masks: int = ALTSCREEN.masks, rate: float = ALTSCREEN.rate, seed: int = ALTSCREEN.seed,
                  progress: Progress | None = None) -> AltscreenDocument:
        """``celtk altscreen``: a cheaper ranking of the heads, compared with the screen's pool."""
        from celtk.run.altscreen import run_altscreen

        return run_altscreen(self.out, method=method, p=p, masks=masks, rate=rate, seed=seed, model=self.model,
                             progress=progress)

    @public
    def stability(self, *, resamples: int = STABILITY.resamples, method: str = STABILITY.method,
                  fraction: float = STABILITY.fraction, strategy: str = STABILITY.strategy, p: int | None = None,
                  k: int | None = None, width: int = STABILITY.width, seed: int = STABILITY.seed,
                  progress: Progress | None = None) -> StabilityDocument:
        """``celtk stability``: selections on resamples of the discovery set (``p``, ``k``: the run's by default)."""
        from celtk.run.stability import run_stability

        return run_stability(self.out, resamples=resamples, method=method, fraction=fraction, seed=seed,
                             strategy=strategy, p=self.config.p if p is None else p,
                             k=self.config.k if k is None else k, width=width, model=self.model,
                             progress=progress)

    @public
    def eval(self, heads: HeadSet | str, *, limit: int | None = None, out: str | Path | None = None,
             progress: Progress | None = None) -> EvalDocument:
        """``celtk eval --split heldout --run OUT``: ``heads`` ablated on the run's held-out set, under the run's
        ablation kind; an exploratory look, logged in the run (the test stays its result). Writes
        ``eval.json`` to ``out`` when given."""
        from celtk.run.eval import run_eval

        return run_eval(None if out is None else Path(out), model=self.model, heads=heads, split="heldout",
                        limit=limit, batch_size=self._batch_size(), run=self.out,
                        ablation=self.config.ablation, progress=progress)

    @public
    def attributes(self, *, length: int = ATTRIBUTES.length, seed: int = ATTRIBUTES.seed) -> HeadAttributesDocument:
        """``celtk attributes``: previous-token, duplicate-token and induction scores of every head
        (:class:`celtk.analysis.HeadAttributesDocument`)."""
        from celtk.run.analyses import run_attributes

        return run_attributes(self.out, model=self.model, length=length, seed=seed)

    @public
    def compare(self, circuit: str, *, top: int = COMPARE.top, any_model: bool = False) -> CompareDocument:
        """``celtk compare --circuit``: the run's heads beside a known circuit (a file or packaged name;
        :class:`celtk.analysis.CompareDocument`). Needs no model. ``any_model``: compare with a circuit
        found on another model (of the same shape)."""
        from celtk.run.analyses import run_compare

        return run_compare(self.out, circuit, top=top, any_model=any_model)

    @public
    def report(self, *, to: str | Path | None = None) -> Path:
        """``celtk report``: the HTML page and PNG figures (default ``OUT/report``); returns the page's path."""
        return write_report(self.out, None if to is None else Path(to))

    def _batch_size(self) -> int:
        return self.config.batch_size if isinstance(self.config.batch_size, int) else RUN.batch_size
