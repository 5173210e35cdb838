"""Stage 2: search for the best head set on the discovery set and freeze it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from celtk._version import __version__
from celtk.boundary import public
from celtk.errors import NothingToFreezeError
from celtk.models import Model
from celtk.run.config import RunConfig, recorded_config
from celtk.run.options import SELECT
from celtk.run.session import ScreenedRun, memo_for, neutral_overrides, open_run
from celtk.search.registry import get_strategy
from celtk.search.scores import check_tie_break
from celtk.search.selection import n_subsets
from celtk.search.strategies import SearchResult, tie_break_option
from celtk.store.directory import RunDirectory, record
from celtk.store.documents import (
    DiagnosticsDocument,
    HeldoutContract,
    Interaction,
    RankedSet,
    SelectionDocument,
    TestDocument,
)
from celtk.store.files import JsonObject, sweep_if_idle
from celtk.store.ledger import Ledger

Progress = Callable[[str, int, int], None]


@public
def run_select(out: Path, *, p: int | None = None, k: int | None = None, strategy: str = SELECT.strategy,
               width: int = SELECT.width, heldout: int | None = None, model: Model | None = None, force: bool = False,
               progress: Progress | None = None, device: str | None = None,
               batch_size: int | str | None = None, tie_break: str | None = None) -> SelectionDocument:
    """``algorithm1`` (default): pool the top-p heads, evaluate every subset of size 2..k, freeze
    the best. ``greedy`` / ``beam`` (width ``width``): search over all heads (``p`` unused).
    Writes ``selection.json`` and ``diagnostics.json``; resumes an interrupted search.

    ``p``, ``k`` and ``tie_break`` (how heads tied in every measure are ranked: ``numeric`` or the paper's string
    order, :data:`celtk.search.registry.TIE_BREAKS`) default to the run's settings (:func:`search_settings`); a
    racing screen raced for one key, so a search on it takes that key.

    The selection is frozen with its held-out set (``heldout`` examples, default as configured:
    size, seed and hash in ``selection.json``'s ``heldout``), which every test of it scores; no
    held-out outcome is computed here. Refused once the held-out set has been looked at (a test,
    stability, transfer, …) unless ``force``, which is recorded (``forced_after_test``, ``prior_looks``)
    in selection.json and the held-out log. A search that gains nothing on discovery freezes nothing
    (:class:`~celtk.errors.NothingToFreezeError`) unless ``force`` (recorded: ``forced_no_gain``). ``device`` and
    ``batch_size`` replace the run's: they cannot change a result."""
    out = Path(out)
    p, k, tie_break = search_settings(out, p, k, tie_break)
    search = get_strategy(strategy)
    search.check(k=k, p=p, width=width)  # before any model loads; again below against the screen
    rd = RunDirectory(out)  # the one this call reads through
    stored = None if force else rd.stored_selection(*search_options(strategy, k, p, width, tie_break), heldout)
    if stored is not None:
        sweep_if_idle(out)
        return stored
    with rd.lock():
        whole = None if strategy == "algorithm1" else f"{strategy} search"
        prior = rd.require("select", force=force, whole=whole, p=p, tie_break=tie_break).prior_looks
        run = open_run(rd, model, stage="select", **({"heldout": heldout} if heldout is not None else {}),
                       **neutral_overrides(device, batch_size))
        search.check(k=k, p=p, width=width, n_heads=len(run.scores))
        memo = memo_for(run, progress, work=whole is None)  # Algorithm 1 scores its subsets in one call
        result = search(run.scores, run.intact, memo, k=k, p=p, width=width, tie_break=tie_break)
        document = _selection_document(run, result, p, k, tie_break)
        if document.discovery_gain <= 0:
            if not force:
                raise NothingToFreezeError(no_gain_reason(document))
            document = replace(document, forced_no_gain=True)
        if prior or rd.has(TestDocument):
            document = replace(document, forced_after_test=True, prior_looks=[record(look) for look in prior])
            rd.log.note("select-forced", heads=document.heads.names(), after_looks=[look.seq for look in prior])
        # the ledger first: selection.json marks the stage finished, and a rerun returns it without recording
        # anything, so a kill after it must not leave the frozen held-out set out of the ledger (a record of a
        # selection a kill then kept from its file only makes the ledger guard that split earlier)
        splits = run.session.splits
        Ledger().record_frozen(out, weights=run.session.model.weight_hash, task=run.session.task.full_name,
                               heldout_hash=splits.manifest().heldout_hash,
                               examples=[e.content_hash for e in splits.heldout], heads=str(document.heads))
        rd.save(document)
        rd.save(_diagnostics_document(result))
        return document


@public
def stored_selection(out: Path, *, p: int | None = None, k: int | None = None, strategy: str = "algorithm1",
                     width: int = 3, heldout: int | None = None, tie_break: str | None = None
                     ) -> SelectionDocument | None:
    """The frozen selection in ``out`` when a select with these options would search for it again: the same
    strategy and options (``p``, ``k`` and ``tie_break`` by default the run's), the held-out size it froze
    (``heldout``, when given), and searched on this directory's screen as it stands. ``None`` otherwise (then
    :func:`run_select` decides: after a look, another search is refused unless forced). Reads files only; loads no
    model (:meth:`RunDirectory.stored_selection`)."""
    p, k, tie_break = search_settings(out, p, k, tie_break)
    return RunDirectory(out).stored_selection(*search_options(strategy, k, p, width, tie_break), heldout)


def search_options(strategy: str, k: int, p: int, width: int, tie_break: str) -> tuple[str, int, JsonObject]:
    """The strategy, ``k`` and options a selection searched so records (``strategy``, ``k``,
    ``strategy_options``): beam of width 1 is greedy."""
    named = "greedy" if strategy == "beam" and width == 1 else strategy
    options = {"algorithm1": {"p": p}, "greedy": {"width": 1}, "beam": {"width": width}}.get(named, {})
    return named, k, {**options, **tie_break_option(tie_break)}


def search_settings(out: Path, p: int | None = None, k: int | None = None, tie_break: str | None = None
                    ) -> tuple[int, int, str]:
    """``p``, ``k`` and ``tie_break`` as given, else as the run in ``out`` recorded them (``config.json``), else
    :class:`~celtk.run.config.RunConfig`'s defaults (10, 3, numeric): the defaults of ``celtk select``,
    ``Run.select`` and :func:`run_select` alike. Reads the settings file only."""
    recorded = recorded_config(Path(out)) or RunConfig()
    return (recorded.p if p is None else p, recorded.k if k is None else k,
            check_tie_break(recorded.tie_break if tie_break is None else tie_break))


def no_gain_reason(selection: SelectionDocument) -> str:
    """Why a selection that gains nothing on the discovery set is not frozen, and what to do instead."""
    n = len(selection.discovery_ids)
    intact = selection.intact_discovery_accuracy
    regime = screen_regime(intact, n)
    return (f"No head set gains on the discovery set: the best of the {selection.n_evaluations} sets scored, "
            f"{selection.heads}, changes accuracy by {100 * selection.discovery_gain:+.1f} points "
            f"({intact:.1%} intact).{' ' + regime if regime else ''} Nothing was frozen and the held-out set is "
            "untouched: a test of this selection could only spend the run's one look on no effect. Try a task or "
            "subtask where the model is neither at the floor nor at the ceiling (`celtk eval` shows its accuracy), "
            "more discovery examples, or other shots; or freeze it anyway with force=True (`--force`), which "
            "selection.json records (forced_no_gain).")


def screen_regime(intact_accuracy: float, n: int) -> str | None:
    """A plain sentence when the intact model is at the floor (below 5 %) or the ceiling (above 95 %) of a task:
    then few examples can change, and an ablation's gain is hard to see or impossible."""
    right = round(intact_accuracy * n)
    if intact_accuracy < FLOOR:
        return (f"The intact model is at the floor of this task ({right} of {n} discovery examples right, below "
                f"{FLOOR:.0%}): an ablation that helps has almost nothing to build on.")
    if intact_accuracy > CEILING:
        return (f"The intact model is at the ceiling of this task ({right} of {n} discovery examples right, above "
                f"{CEILING:.0%}): at most {n - right} examples can be gained.")
    return None


FLOOR, CEILING = 0.05, 0.95


def _selection_document(run: ScreenedRun, result: SearchResult, p: int, k: int, tie_break: str) -> SelectionDocument:
    n, intact, doc = len(run.intact), run.intact, run.screen
    ranking = [RankedSet(heads=s.heads, accuracy=s.accuracy, gain=s.gain / n, gain_count=s.gain,
                         damage=s.damage, fixes=s.fixes) for s in result.scored]
    best = result.best
    pool = {}
    if result.strategy == "algorithm1":
        pool = {"p": result.options["p"], "n_evaluated_subsets": n_subsets(result.options["p"], result.k),
                "pool": [s.heads[0] for s in result.rounds[0]],
                "flagged_interactions": [Interaction(**f) for f in result.diagnostics["flagged"]]}
    config = replace(run.session.config, p=p, k=k, tie_break=tie_break)  # what the search ran with, recorded
    manifest, splits = run.session.splits.manifest(), run.session.splits
    contract = HeldoutContract(n=len(splits.heldout), seed=config.seed, hash=manifest.heldout_hash,
                               source=splits.source)
    return SelectionDocument(
        heads=best.heads, discovery_accuracy=best.accuracy, discovery_gain=best.gain / n,
        intact_discovery_accuracy=float(np.mean(intact)), model=doc.model, task=doc.task,
        config={**config.recorded(), "celtk_version": __version__}, discovery_ids=doc.discovery_ids,
        discovery_hashes=doc.discovery_hashes, discovery_hash=doc.splits.discovery_hash,
        shots=doc.splits.shot_ids, strategy=result.strategy, strategy_options=result.options, k=result.k,
        n_evaluations=result.n_evaluations, rounds=result.rounds, ranking=ranking, heldout=contract,
        screen_digest=doc.results_digest(), **pool)


def _diagnostics_document(result: SearchResult) -> DiagnosticsDocument:
    d = result.diagnostics
    if not d:
        return DiagnosticsDocument(strategy=result.strategy, rounds=result.rounds)
    return DiagnosticsDocument(
        strategy=result.strategy, rounds=result.rounds, pool=d["pool"],
        subsets=[Interaction(**r) for r in d["subsets"]], pairwise_interaction=d["pairwise_interaction"],
        overlap=d["overlap"], flagged=[Interaction(**f) for f in d["flagged"]], noise_rule=d["noise_rule"])
