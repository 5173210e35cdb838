"""Stage 2: search for the best head set on the discovery set and freeze it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from celtk._version import __version__
from celtk.models import Model
from celtk.run.directory import RunDirectory, record
from celtk.run.documents import (
    DiagnosticsDocument,
    HeldoutContract,
    Interaction,
    RankedSet,
    SelectionDocument,
    TestDocument,
)
from celtk.run.memo import memo_for
from celtk.run.session import ScreenedRun, open_run
from celtk.search.selection import n_subsets
from celtk.search.strategies import SearchResult, get_strategy

Progress = Callable[[str, int, int], None]


def run_select(out: Path, *, p: int = 10, k: int = 3, strategy: str = "algorithm1", width: int = 3,
               heldout: int | None = None, model: Model | None = None, force: bool = False,
               progress: Progress | None = None) -> SelectionDocument:
    """``algorithm1`` (default): pool the top-p heads, evaluate every subset of size 2..k, freeze
    the best. ``greedy`` / ``beam`` (width ``width``): search over all heads (``p`` unused).
    Writes ``selection.json`` and ``diagnostics.json``; resumes an interrupted search.

    The selection is frozen with its held-out set (``heldout`` examples, default as configured:
    size, seed and hash in ``selection.json``'s ``heldout``), which every test of it scores; no
    held-out outcome is computed here. Refused once the held-out set has been looked at (a test,
    stability, transfer, …) unless ``force``, which is recorded (``forced_after_test``, ``prior_looks``)
    in selection.json and the held-out log."""
    out = Path(out)
    search = get_strategy(strategy)
    search.check(k=k, p=p, width=width)  # before any model loads; again below against the screen
    rd = RunDirectory(out)
    with rd.lock():
        whole = None if strategy == "algorithm1" else f"{strategy} search"
        prior = rd.require("select", force=force, whole=whole, p=p).prior_looks
        run = open_run(out, model, stage="select", **({"heldout": heldout} if heldout is not None else {}))
        search.check(k=k, p=p, width=width, n_heads=len(run.scores))
        result = search(run.scores, run.intact, memo_for(run, progress), k=k, p=p, width=width)
        document = _selection_document(run, result, p, k)
        if prior or rd.has(TestDocument):
            document = replace(document, forced_after_test=True, prior_looks=[record(look) for look in prior])
            rd.log.note("select-forced", heads=document.heads.names(), after_looks=[look.seq for look in prior])
        document.save(out)
        _diagnostics_document(result).save(out)
        return document


def _selection_document(run: ScreenedRun, result: SearchResult, p: int, k: int) -> SelectionDocument:
    n, intact, doc = len(run.intact), run.intact, run.screen
    ranking = [RankedSet(heads=s.heads, accuracy=s.accuracy, gain=s.gain / n, gain_count=s.gain,
                         damage=s.damage, fixes=s.fixes) for s in result.scored]
    best = result.best
    pool = {}
    if result.strategy == "algorithm1":
        pool = {"p": result.options["p"], "n_evaluated_subsets": n_subsets(result.options["p"], result.k),
                "pool": [s.heads[0] for s in result.rounds[0]],
                "flagged_interactions": [Interaction(**f) for f in result.diagnostics["flagged"]]}
    config = replace(run.session.config, p=p, k=k)  # what the search ran with, recorded beside the result
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
