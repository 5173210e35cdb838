"""One run per directory: checks that the documents a stage reads were written by the same run
(same task, weights, discovery set, head count), naming the file that disagrees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celtk.errors import ConfigError, RunStoreError
from celtk.heads import all_heads
from celtk.store.documents import ScreenDocument, SelectionDocument, TestDocument, short
from celtk.store.files import read_json


def _agree(out: Path, first: str, second: str, pairs: dict[str, tuple[object, object]]) -> None:
    """Refuse when any named value differs between ``first`` and ``second`` (both files in ``out``)."""
    differ = [name for name, (a, b) in pairs.items() if a != b]
    if differ:
        detail = "; ".join(f"{name}: {short(pairs[name][0])} in {first}, {short(pairs[name][1])} in {second}"
                           for name in differ[:3])
        raise RunStoreError(f"{Path(out) / second} does not belong to the run of {first} ({detail}). Results are never "
                            f"mixed: rerun the stage that writes {second}, or use a new run directory.")


def check_screen_complete(out: Path, doc: ScreenDocument) -> None:
    """A merged screen names every head of the model once, each with one outcome per discovery example."""
    n = len(doc.intact_correct)
    if not n == doc.n == len(doc.discovery_ids) == len(doc.discovery_hashes):
        raise RunStoreError(f"{out}/screen.json is inconsistent: {doc.n} examples, {n} intact outcomes, "
                            f"{len(doc.discovery_ids)} discovery ids; rerun the screen in a new directory.")
    # a declared layer subset (mypy does not narrow doc.layers through getattr)
    chosen = set(doc.layers) if getattr(doc, "layers", None) is not None else None  # type: ignore[arg-type]
    expected = [h for h in all_heads(doc.n_layers, doc.n_heads) if chosen is None or h.layer in chosen]
    names = [row.head for row in doc.heads]
    if sorted(names) != sorted(expected):
        missing = sorted(set(expected) - set(names))
        extra = sorted(set(names) - set(expected)) + sorted({h for h in names if names.count(h) > 1})
        raise RunStoreError(f"{out}/screen.json covers {len(set(names) & set(expected))} of the model's "
                            f"{len(expected)} heads (missing {', '.join(map(str, missing[:5])) or 'none'}; unexpected "
                            f"or repeated {', '.join(map(str, extra[:5])) or 'none'}); "
                            "a screen must cover every head once — rerun or merge it.")
    short = next((row.head for row in doc.heads if len(row.correct) != n), None)
    if short:
        raise RunStoreError(f"{out}/screen.json: head {short} has outcomes for a different number of examples than "
                            f"the intact model ({n}); rerun the screen in a new directory.")
    check_racing_rows(out, doc)


def check_racing_rows(out: Path, doc: ScreenDocument) -> None:
    """Only a racing screen may hold heads scored on part of the discovery set (``n_scored``), and its
    pool must be the top p of the heads scored on every example; anything else is a partial screen."""
    n, racing = len(doc.intact_correct), getattr(doc, "racing", None)
    for row in doc.heads:
        unscored = row.correct.n_unscored
        # not row.complete: n_scored is set (mypy does not narrow through the property)
        if row.complete and unscored or not row.complete and (
                racing is None or not 1 <= row.n_scored < n or unscored != n - row.n_scored):  # type: ignore[operator]
            what = "the screen is not a racing screen" if racing is None else f"its n_scored is {row.n_scored}"
            raise RunStoreError(f"{out}/screen.json: head {row.head} has {n - unscored} of {n} outcomes but {what}; a "
                                "screen scores every head on every example (a racing screen: every head it kept) — "
                                "rerun the screen in a new directory.")
    if racing is None:
        return
    top = doc.pool(racing.p)
    if racing.pool != top:
        raise RunStoreError(f"{out}/screen.json: the racing pool {', '.join(map(str, racing.pool))} is not the top "
                            f"{racing.p} of the heads scored on every example ({', '.join(map(str, top)) or 'none'}); "
                            "rerun the screen.")


def check_racing_use(doc: ScreenDocument, *, whole: str | None = None, p: int | None = None) -> None:
    """On a racing screen, refuse ``whole`` (a use that needs every head on every example: greedy or
    beam search, resampling, another screener's comparison) and a pool ``p`` larger than the one raced for."""
    racing = getattr(doc, "racing", None)
    if racing is None:
        return
    if whole is not None:
        raise ConfigError(f"This run's screen raced for the top {racing.p} heads ({racing.mode} mode), so the other "
                          f"heads were not scored on every example, and {whole} needs every head's outcomes. Screen "
                          "exhaustively (screen = 'exhaustive', `--screen exhaustive`) in a new directory.")
    if p is not None and p > racing.p:
        raise ConfigError(f"This run's screen raced for the top p = {racing.p} heads; select with p ≤ {racing.p}, or "
                          f"screen again with p ≥ {p} (--p {p}).")


def check_raced_tie_break(screen: ScreenDocument, tie_break: str) -> None:
    """A racing screen is exact for the ranking key it raced with: a search on it under another tie-break would
    take its pool from heads the race may have dropped. Refused, naming both keys."""
    raced = screen.config.get("tie_break", "numeric")
    if screen.racing is not None and tie_break != raced:
        raise ConfigError(f"This run's screen raced for its pool with tie-break {raced!r}, so it holds the top "
                          f"p heads under that key only; select with --tie-break {raced} (tie_break={raced!r}), or "
                          f"race again with --tie-break {tie_break} in a new run directory.")


def check_screen_fingerprint(out: Path, doc: ScreenDocument, fp: Any = None) -> None:
    """``screen.json`` must describe the run recorded in ``fingerprint.json``, which the screen writes beside it
    (``fp``: its JSON value, as the run directory read it; ``None``: read it here)."""
    fp = read_json(require_fingerprint(out)) if fp is None else fp
    _agree(out, "fingerprint.json", "screen.json", {
        "task": (fp.get("task"), doc.task.to_json()), "weight hash": (fp.get("weight_hash"), doc.weight_hash),
        "discovery hash": (fp.get("discovery"), doc.splits.discovery_hash),
        "seed": (fp.get("seed"), doc.config.get("seed"))})


def require_fingerprint(out: Path) -> Path:
    """``out/fingerprint.json``, refused when missing: the screen records the run's settings there, and every later
    stage compares its own with them."""
    path = Path(out) / "fingerprint.json"
    if not path.exists():
        raise RunStoreError(f"{path} is missing: the screen records the run's settings there, and every stage "
                            "compares its own with them, so without it any settings would pass. Restore it, or "
                            "rerun the screen into a new run directory with this celtk version.")
    return path


def check_selection_matches_screen(out: Path, selection: SelectionDocument, screen: ScreenDocument) -> None:
    """``selection.json`` must have been searched on this directory's ``screen.json`` (the outcomes it records the
    digest of)."""
    if selection.screen_digest != screen.results_digest():
        raise RunStoreError(f"{Path(out) / 'selection.json'} was searched on another screen.json than the one in {out} "
                            "(the screen was rerun or extended since): select again, in a new run directory if the "
                            "held-out set was looked at.")
    _agree(out, "screen.json", "selection.json", {
        "task": (screen.task.to_json(), selection.task.to_json()),
        "weight hash": (screen.weight_hash, selection.model.weight_hash),
        "discovery hash": (screen.splits.discovery_hash, selection.discovery_hash),
        "discovery ids": (screen.discovery_ids, selection.discovery_ids)})


def check_test_matches_selection(out: Path, test: TestDocument, selection: SelectionDocument) -> None:
    """``test.json`` must test this directory's ``selection.json``."""
    _agree(out, "selection.json", "test.json", {
        "heads": (str(selection.heads), str(test.heads)), "task": (selection.task.name, test.task.name),
        "model": (selection.model.name, test.model.name)})
