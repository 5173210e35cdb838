"""How large a discovery gain does a search find when there is nothing to find? Three nulls for
``selection.json``'s discovery gain (``calibration-NULL.json``); the statistics are in
:mod:`celtk.search.nulls`, and :mod:`celtk.search.null_levels` simulates which hold their level:

* ``search`` (no model; the screen's per-example outcomes and the search's scored counts): the whole
  search, screen included, rerun on outcomes relabelled under "no head helps" (each example's
  discordant candidates all fix it or all damage it, by a fair coin), every subset scored on its
  heads' changed examples. Its p-value holds its level whether sets' outcomes are independent of
  their heads' or heads add up: the number to quote.
* ``permutation`` (no model): every candidate the search scored relabelled independently under
  McNemar's exact null, the best kept. Under additive heads it rejects too often, so it is a scale
  only: no p-value, and the document says why.
* ``random-heads`` (forward passes): Algorithm 1 run again with a random pool of p heads in place
  of the screened top p; each repeat's best set is then scored on the held-out set (a logged,
  exploratory look). Random pools inherit no luck, so under additive heads it rejects most of the
  time: a scale only. With ``n_candidates`` it is the older control (the best of that many random
  sets of the selection's size): a different statistic, no p-value either.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

import numpy as np
from jaxtyping import Int

from celtk.boundary import public
from celtk.errors import ConfigError
from celtk.heads import HeadSet, all_heads
from celtk.models import Model
from celtk.run.options import CALIBRATE
from celtk.run.session import memo_for, open_run
from celtk.run.transfer import heldout_pass
from celtk.search.nulls import (
    beyond_union,
    p_value,
    permutation_null,
    random_pool_null,
    random_pools,
    search_null,
)
from celtk.search.scores import HeadScore, head_ids, rank
from celtk.search.selection import n_subsets
from celtk.store.directory import RunDirectory
from celtk.store.documents import CalibrationDocument, ScreenDocument, SelectionDocument

Progress = Callable[[str, int, int], None]
class _Shared(TypedDict):
    """The fields of a :class:`CalibrationDocument` every null fills alike."""

    null: str
    repeats: int
    seed: int
    set_size: int
    observed_discovery_gain: float
    observed_heldout_gain: float | None


NULLS = ("search", "permutation", "random-heads")
MAX_RANDOM_SETS = 1_000_000  # random head sets one calibration may draw (Algorithm 1's limit of subsets)
MAX_RELABELLED = 20_000_000  # relabelled gains the permutation null holds at once (three 8-byte arrays: ~0.5 GB)
MAX_SEARCHED = 2_000_000_000  # (repeat, subset, example) cells the search null scores in all (minutes, not hours)
LEVELS = ("simulated with no effect anywhere (celtk.search.null_levels; benchmarks/null_levels.py): false-positive "
          "rate at α = 0.05 within 5 % plus three standard errors whether a set's outcomes are independent of its "
          "heads' or its heads' margin shifts add up")
VALIDITY = {
    "search": "the whole search rerun on relabelled outcomes (each example's changed candidates all fix it or all "
              "damage it, by a fair coin; the screen, the top-p pool and every subset up to k scored again, a set "
              "changing the examples its heads change, plus examples beyond them at the rate the search's own sets "
              f"showed); {LEVELS}: valid, and conservative",
    "permutation": "each scored candidate relabelled independently under McNemar's exact null, the best kept; a "
                   "descriptive scale: it holds its level only where sets' outcomes are independent of their heads'",
    "random-heads": "the search itself on random pools: every single head and every subset of a random pool of p, "
                    "the best by the ranking key; a descriptive scale: it holds its level only where sets' outcomes "
                    "are independent of their heads'",
    "random-heads-control": "control: the best of random head sets of the selection's size, chosen on discovery; "
                            "includes any effect random ablations have on this model",
}
NO_P_VALUE = {
    "permutation": "no p-value: relabelling each candidate independently treats the pool's subsets as fresh draws, "
                   "but a subset of the screen's luckiest heads inherits their luck (ablations add up); simulated "
                   "with additive heads and no effect anywhere, this p-value is at most 0.05 in well over 5 % of "
                   "searches (docs/selection-holds.md, from benchmarks/null_levels.py). Quote the search null "
                   "(--null search).",
    "random-heads": "no p-value: random pools hold none of the screen's luckiest heads, so their subsets inherit no "
                    "luck while the search's do (ablations add up); simulated with additive heads and no effect "
                    "anywhere, this p-value is at most 0.05 in most searches (docs/selection-holds.md, from "
                    "benchmarks/null_levels.py). Quote the search null (--null search).",
}


@public
def run_calibration(out: Path, *, null: str = CALIBRATE.null, repeats: int = CALIBRATE.repeats,
                    seed: int = CALIBRATE.seed,
                    n_candidates: int | None = None, model: Model | None = None,
                    progress: Progress | None = None) -> CalibrationDocument:
    """The distribution of the best discovery gain under ``null`` (:data:`NULLS`), its held-out
    counterpart, and, for the ``search`` null (the one whose p-value holds its level, simulated under
    independent and additive heads), the share of null bests at or above the observed discovery gain
    as a p-value (+1 correction). The other two are scales: ``p_value`` is ``None`` and
    ``p_value_note`` says why. ``n_candidates`` (random-heads only) takes the best of that many random
    sets per repeat instead of the search on a random pool (the older control). Writes
    ``calibration-NULL.json``; the random-heads null's held-out scoring is a look, logged before it
    is made. ``progress(stage, done, total)`` reports ``search null`` (repeats), or for random-heads
    ``calibrate`` (head sets scored on the discovery set) and ``calibrate held-out`` (thousandths of
    the held-out pass)."""
    if null not in NULLS:
        raise ConfigError(f"Unknown null {null!r}; use one of {', '.join(NULLS)}.")
    if repeats < 1 or (n_candidates is not None and n_candidates < 1):
        raise ConfigError(f"repeats and n_candidates must be at least 1, got {repeats} and {n_candidates}.")
    if null != "random-heads" and n_candidates is not None:
        raise ConfigError(f"n_candidates (--candidates) applies to the random-heads null; the {null} null "
                          "scores the search's own candidates.")
    if null == "random-heads" and n_candidates is not None and repeats * n_candidates > MAX_RANDOM_SETS:
        raise ConfigError(f"repeats × candidates = {repeats:,} × {n_candidates:,} = {repeats * n_candidates:,} random "
                          f"head sets, more than the limit of {MAX_RANDOM_SETS:,} (each is scored on the discovery "
                          "set); lower --repeats or --candidates.")
    out = Path(out)
    rd = RunDirectory(out)
    with rd.lock():
        admitted = rd.require("calibrate")
        sel, test = admitted.frozen, admitted.test
        n_disc = len(sel.discovery_ids)
        observed = sel.discovery_gain
        base = _Shared(null=null, repeats=repeats, seed=seed, set_size=len(sel.heads),
                       observed_discovery_gain=observed, observed_heldout_gain=test.gain if test else None)
        if null == "permutation":
            n_held = test.n if test else sel.heldout.n
            discordant = _discordant(rd, sel)
            if repeats * len(discordant) > MAX_RELABELLED:
                raise ConfigError(f"repeats × candidates = {repeats:,} × {len(discordant):,} scored candidates = "
                                  f"{repeats * len(discordant):,} relabelled gains, more than the limit of "
                                  f"{MAX_RELABELLED:,} held at once; "
                                  f"use --repeats {MAX_RELABELLED // len(discordant):,} or fewer.")
            disc, held, n_cand = permutation_null(discordant, n_disc, n_held, repeats, seed)
            document = CalibrationDocument(**base, n_candidates=n_cand, null_discovery_gains=[float(g) for g in disc],
                                           null_heldout_gains=[float(g) for g in held], p_value=None,
                                           p_value_note=NO_P_VALUE[null], validity=VALIDITY[null])
            rd.save(document)
            return document
        if null == "search":
            document = _search(rd, sel, base, n_held=test.n if test else sel.heldout.n, progress=progress)
            rd.save(document)
            return document
        return _random_heads(rd, sel, base, n_candidates, model, progress)


def _search(rd: RunDirectory, sel: SelectionDocument, base: _Shared, *, n_held: int,
            progress: Progress | None = None) -> CalibrationDocument:
    """The search null: Algorithm 1 rerun on relabelled outcomes from the screen's per-example discordance."""
    if sel.strategy != "algorithm1" or sel.p is None:
        raise ConfigError(f"The search null reruns Algorithm 1 (screen, top-p pool, subsets up to k); this selection "
                          f"was made by {sel.strategy} search, whose statistic it does not reproduce. The "
                          "permutation null (--null permutation) gives a descriptive scale for every strategy, "
                          "without a p-value.")
    repeats, p, k = base["repeats"], int(sel.p), sel.k
    screen = rd.load(ScreenDocument)
    rows = screen.heads
    if repeats * n_subsets(p, k) * screen.n > MAX_SEARCHED:
        most = max(1, MAX_SEARCHED // max(1, n_subsets(p, k) * screen.n))
        raise ConfigError(f"repeats × subsets of a pool × discovery examples = {repeats:,} × {n_subsets(p, k):,} × "
                          f"{screen.n:,} = {repeats * n_subsets(p, k) * screen.n:,} scorings, more than the limit of "
                          f"{MAX_SEARCHED:,}; use --repeats {most:,} or fewer.")
    intact = screen.intact_correct.outcomes()
    scored = np.stack([r.correct.scored() for r in rows])
    discordant = (np.stack([r.correct.outcomes() for r in rows]) != intact[None, :]) & scored
    tie_break = str(sel.strategy_options.get("tie_break", "numeric"))
    ranks = sorted(range(len(rows)), key=lambda i: head_ids(HeadSet((rows[i].head,)), tie_break))
    order = np.empty(len(rows), dtype=np.int64)
    order[ranks] = np.arange(len(rows))
    where = {r.head: i for i, r in enumerate(rows)}
    sets = [r for r in sel.ranking if len(r.heads) > 1]
    rates = beyond_union(discordant, [[where[h] for h in r.heads] for r in sets], [r.fixes + r.damage for r in sets])
    disc, held, n_cand = search_null(discordant, p, k, repeats, base["seed"], n_held=n_held, order=order,
                                     extra_rate=rates, scored=None if scored.all() else scored,
                                     progress=(lambda done, total: progress("search null", done, total)) if progress
                                     else None)
    beyond = ", ".join(f"{size} heads {rate:.3f}" for size, rate in rates.items()) or "none (k = 1)"
    return CalibrationDocument(**base, n_candidates=n_cand, null_discovery_gains=[float(g) for g in disc],
                               null_heldout_gains=[float(g) for g in held],
                               p_value=p_value(disc, base["observed_discovery_gain"]),
                               validity=f"{VALIDITY['search']} (changes beyond the heads' union: {beyond})")


def _discordant(rd: RunDirectory, sel: SelectionDocument) -> Int[np.ndarray, " candidate"]:
    """fixes + damage of every candidate the search scored: each screened head and each ranked set."""
    counts = screen_discordant(rd.load(ScreenDocument))
    counts.update({r.heads: r.fixes + r.damage for r in sel.ranking})
    return np.array(list(counts.values()), dtype=int)


def screen_discordant(screen: ScreenDocument) -> dict[HeadSet, int]:
    """fixes + damage of each screened head on the whole discovery set. A racing screen's head dropped
    early has them on its ``n_scored`` examples only: its count is scaled to the ``n`` examples at the
    same discordance rate (as the held-out null does), not read as a count on all ``n``, which would
    shrink its null gains and make the p-value too small."""
    return {HeadSet((r.head,)): r.fixes + r.damage if r.n_scored is None
            else int(np.rint((r.fixes + r.damage) * screen.n / r.n_scored))
            for r in screen.heads}


def _random_heads(rd: RunDirectory, sel: SelectionDocument, base: _Shared, n_candidates: int | None,
                  model: Model | None, progress: Progress | None) -> CalibrationDocument:
    """The random-heads null (or control) per repeat: the best set on discovery, then on held-out."""
    repeats, seed = base["repeats"], base["seed"]
    if n_candidates is None and sel.strategy != "algorithm1":
        raise ConfigError(f"The random-heads null reruns Algorithm 1 on random pools; this selection was made by "
                          f"{sel.strategy} search, whose statistic it does not reproduce. Pass n_candidates "
                          "(--candidates N) for the control (best of N random sets, no p-value), or use the "
                          "permutation null, which covers every strategy.")
    run = open_run(rd, model, stage="calibrate", **rd.heldout_overrides())
    heads = all_heads(run.session.model.n_layers, run.session.model.n_heads)
    memo = memo_for(run, progress, "calibrate")
    n = len(run.intact)
    if n_candidates is None:
        p, k = int(sel.p or 0), sel.k
        if repeats * n_subsets(p, k) > MAX_RANDOM_SETS:
            raise ConfigError(f"repeats × subsets of a pool = {repeats:,} × {n_subsets(p, k):,} = "
                              f"{repeats * n_subsets(p, k):,} head sets to score on the discovery set, more than the "
                              f"limit of {MAX_RANDOM_SETS:,}; "
                              f"use --repeats {max(1, MAX_RANDOM_SETS // n_subsets(p, k)):,} or fewer.")
        best = random_pool_null(run.scores, run.intact, memo, random_pools(heads, p, repeats, seed), k)
        disc = np.array([b.gain / n for b in best])
        n_cand, note, validity = len(run.scores) + n_subsets(p, k), NO_P_VALUE["random-heads"], VALIDITY["random-heads"]
        pv: float | None = None
    else:
        size = len(sel.heads)
        if size > len(heads):
            raise ConfigError(f"The selection has {size} heads but the model only {len(heads)}.")
        rng = np.random.default_rng(seed)
        draws = [[HeadSet(tuple(heads[i] for i in rng.choice(len(heads), size, replace=False)))
                  for _ in range(n_candidates)] for _ in range(repeats)]
        outcomes = memo(list(dict.fromkeys(s for draw in draws for s in draw)))
        best = [rank([HeadScore.compare(s, outcomes[s], run.intact) for s in draw])[0] for draw in draws]
        disc = np.array([b.gain / n for b in best])
        n_cand, pv, validity = n_candidates, None, VALIDITY["random-heads-control"]
        searched = sel.n_evaluations
        note = (f"no p-value: each null draw is the best of {n_candidates} random sets of {size} heads, while the "
                f"search's discovery gain is the best of its {searched} candidates (every single head, then the "
                "subsets of its pool); the two maxima are different statistics. Leave out n_candidates "
                "(--candidates) for the search on random pools, whose best is comparable.")
    chosen = list(dict.fromkeys(b.heads for b in best))  # only each draw's best reaches the held-out set
    session = run.session
    seq = rd.begin_look("calibrate-random-heads", list(chosen),
                        session.splits.manifest().heldout_hash, len(session.splits.heldout), exploratory=True)
    intact, results = heldout_pass(session, chosen, progress, "calibrate held-out")
    heldout = {s: float(results[s].correct.mean() - intact.correct.mean()) for s in chosen}
    document = CalibrationDocument(**base, n_candidates=n_cand, null_discovery_gains=[float(g) for g in disc],
                                   null_heldout_gains=[heldout[b.heads] for b in best], p_value=pv, p_value_note=note,
                                   validity=validity, null_sets=[b.heads for b in best])
    rd.finish_look(seq, (document, None))
    return document
