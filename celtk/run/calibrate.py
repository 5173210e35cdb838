"""How large a discovery gain does a search find when there is nothing to find? Two nulls for
``selection.json``'s discovery gain (``calibration-NULL.json``):

* ``permutation`` (no model, stored outcomes only): under "this head set has no effect" the
  two outcomes of each discordant example are exchangeable, so each scored candidate's fixes are
  Binomial(fixes + damage, 1/2) — McNemar's exact null. Per repeat every candidate the search
  scored (every screened head and every scored set) is relabelled independently and the best is
  kept. Ignoring the candidates' positive correlation (shared intact outcomes, shared heads) makes
  the null best stochastically larger: the calibration is conservative. The chosen candidate's
  held-out gain under the same null is drawn on as many held-out examples.
* ``random-heads`` (forward passes): per repeat, ``n_candidates`` random head sets of the
  selection's size; the best on the discovery set, and its gain on the held-out set. A control
  for "picking the best of many ablations", valid for any task; on a model where random
  ablations do have effects it measures those too, so it is a control, not a pure null.

Relabelling intact against ablated per example *across* candidates (one swap for all) is not
used: the intact vector is shared, so one swap cannot be applied consistently to several sets.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from celtk.errors import ConfigError
from celtk.heads import HeadSet, all_heads
from celtk.models import Model
from celtk.run.documents import CalibrationDocument, ScreenDocument, SelectionDocument, TestDocument
from celtk.run.frozen import log_heldout
from celtk.run.session import check_no_overlap, session_for
from celtk.runstore import locked

Progress = Callable[[str, int, int], None]
NULLS = ("permutation", "random-heads")
MAX_RANDOM_SETS = 1_000_000  # random head sets one calibration may draw (Algorithm 1's limit of subsets)
MAX_RELABELLED = 20_000_000  # relabelled gains the permutation null holds at once (three 8-byte arrays: ~0.5 GB)
VALIDITY = {
    "permutation": "exact McNemar null per candidate (discordant outcomes exchangeable under no effect); the best is "
                   "taken over independently relabelled candidates, which is conservative",
    "random-heads": "control: best of random head sets of the selection's size, chosen on discovery; includes any "
                    "effect random ablations have on this model",
}


def run_calibration(out: Path, *, null: str = "permutation", repeats: int = 200, seed: int = 0,
                    n_candidates: int = 20, model: Model | None = None,
                    progress: Progress | None = None) -> CalibrationDocument:
    """The distribution of the best discovery gain under ``null`` (:data:`NULLS`), its held-out
    counterpart, and the share of null bests at or above the observed discovery gain (as a
    p-value with the +1 correction). Writes ``calibration-NULL.json``."""
    if null not in NULLS:
        raise ConfigError(f"Unknown null {null!r}; use one of {', '.join(NULLS)}.")
    if repeats < 1 or n_candidates < 1:
        raise ConfigError(f"repeats and n_candidates must be at least 1, got {repeats} and {n_candidates}.")
    if null == "random-heads" and repeats * n_candidates > MAX_RANDOM_SETS:
        raise ConfigError(f"repeats × candidates = {repeats:,} × {n_candidates:,} = {repeats * n_candidates:,} random head "
                          f"sets, more than the limit of {MAX_RANDOM_SETS:,} (each is scored on the discovery set); "
                          "lower --repeats or --candidates.")
    out = Path(out)
    with locked(out):
        sel = SelectionDocument.load(out)
        test = TestDocument.load(out) if (out / TestDocument.FILE).exists() else None
        n_disc = len(sel.discovery_ids)
        if null == "permutation":
            n_held = test.n if test else int(sel.config["heldout"])
            discordant = _discordant(out, sel)
            if repeats * len(discordant) > MAX_RELABELLED:
                raise ConfigError(f"repeats × candidates = {repeats:,} × {len(discordant):,} scored candidates = "
                                  f"{repeats * len(discordant):,} relabelled gains, more than the limit of "
                                  f"{MAX_RELABELLED:,} held at once; use --repeats {MAX_RELABELLED // len(discordant):,} "
                                  "or fewer.")
            disc, held, n_cand = permutation_null(discordant, n_disc, n_held, repeats, seed)
        else:
            disc, held = random_heads_null(out, sel, repeats, n_candidates, seed, model, progress)
            n_cand = n_candidates
        observed = sel.discovery_gain
        document = CalibrationDocument(
            null=null, repeats=repeats, seed=seed, n_candidates=n_cand, set_size=len(sel.heads),
            null_discovery_gains=[float(g) for g in disc], null_heldout_gains=[float(g) for g in held],
            observed_discovery_gain=observed, observed_heldout_gain=test.gain if test else None,
            p_value=float((1 + np.sum(np.asarray(disc) >= observed - 1e-12)) / (1 + repeats)), validity=VALIDITY[null])
        document.save(out)
        return document


def _discordant(out: Path, sel: SelectionDocument) -> np.ndarray:
    """fixes + damage of every candidate the search scored: each screened head and each ranked set."""
    counts = screen_discordant(ScreenDocument.load(out))
    counts.update({tuple(r.heads): r.fixes + r.damage for r in sel.ranking})
    return np.array(list(counts.values()), dtype=int)


def screen_discordant(screen: ScreenDocument) -> dict[tuple[str, ...], int]:
    """fixes + damage of each screened head on the whole discovery set. A racing screen's head dropped
    early has them on its ``n_scored`` examples only: its count is scaled to the ``n`` examples at the
    same discordance rate (as the held-out null does), not read as a count on all ``n``, which would
    shrink its null gains and make the p-value too small."""
    return {(r.head,): r.fixes + r.damage if r.n_scored is None else int(np.rint((r.fixes + r.damage) * screen.n / r.n_scored))
            for r in screen.heads}


def permutation_null(discordant: np.ndarray, n_disc: int, n_held: int, repeats: int,
                     seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Best relabelled gain per repeat and the chosen candidate's null held-out gain.

    Args:
        discordant: int [m], fixes + damage of each candidate on the ``n_disc`` discovery examples.

    Returns:
        (discovery gains [repeats], held-out gains [repeats], m), gains as fractions.
    """
    rng = np.random.default_rng(seed)
    fixes = rng.binomial(discordant[None, :], 0.5, size=(repeats, len(discordant)))
    gains = (2 * fixes - discordant[None, :]) / n_disc
    best = gains.argmax(axis=1)
    held_discordant = np.rint(discordant[best] * n_held / n_disc).astype(int)  # same discordance rate
    held = (2 * rng.binomial(held_discordant, 0.5) - held_discordant) / n_held
    return gains[np.arange(repeats), best], held, len(discordant)


def random_heads_null(out: Path, sel: SelectionDocument, repeats: int, n_candidates: int, seed: int,
                      model: Model | None, progress: Progress | None) -> tuple[np.ndarray, np.ndarray]:
    """Per repeat: the best of ``n_candidates`` random head sets on discovery, and its held-out gain."""
    session = session_for(sel, model)
    check_no_overlap(sel.discovery_hashes, sel.discovery_ids, session.splits.heldout)
    heads = all_heads(session.model.n_layers, session.model.n_heads)
    size = len(sel.heads)
    if size > len(heads):
        raise ConfigError(f"The selection has {size} heads but the model only {len(heads)}.")
    rng = np.random.default_rng(seed)
    draws = [[HeadSet(tuple(heads[i] for i in rng.choice(len(heads), size, replace=False))) for _ in range(n_candidates)]
             for _ in range(repeats)]
    unique = list(dict.fromkeys(s for draw in draws for s in draw))
    if progress:
        progress("calibrate", 0, 2)
    intact, results = session.screener("discovery").run(unique)
    discovery = {s: float(results[s].correct.mean() - intact.correct.mean()) for s in unique}
    best = [max(draw, key=lambda s: discovery[s]) for draw in draws]
    if progress:
        progress("calibrate", 1, 2)
    chosen = list(dict.fromkeys(best))  # only each draw's best reaches the held-out set
    intact, results = session.screener("heldout").run(chosen)
    # random sets, not the selection: exploratory, not a test of it
    log_heldout(out, "calibrate-random-heads", [h.names() for h in chosen], session.splits.manifest()["heldout_hash"],
                exploratory=True)
    heldout = {s: float(results[s].correct.mean() - intact.correct.mean()) for s in chosen}
    if progress:
        progress("calibrate", 2, 2)
    return np.array([discovery[b] for b in best]), np.array([heldout[b] for b in best])
