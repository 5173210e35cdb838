"""Stage 1: ablate every head alone on the discovery set (resumable, shardable), and join shards.

:func:`run_screen` runs the screen the config names (:data:`celtk.run.registry.SCREENS`): the
exhaustive one here, or the racing one (:mod:`celtk.run.racescreen`)."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from jaxtyping import Bool

from celtk._version import __version__
from celtk.boundary import public
from celtk.errors import ConfigError, RunStoreError
from celtk.heads import Head, HeadSet, all_heads
from celtk.models import Model
from celtk.run.config import RunConfig, check_recorded_settings
from celtk.run.registry import SCREENS
from celtk.run.session import Session
from celtk.search.scores import HeadScore
from celtk.store.directory import RunDirectory
from celtk.store.documents import Correctness, ModelRecord, RacingRecord, ScreenDocument, ScreenRow, TaskRecord
from celtk.store.files import (
    JsonObject,
    check_fingerprint,
    locked,
    read_json,
    sweep_if_idle,
    write_csv,
    write_json,
)
from celtk.store.integrity import check_screen_complete
from celtk.store.memo import WORK_SCALE, per_mille

if TYPE_CHECKING:
    from celtk.evaluation.results import EvalResult

Progress = Callable[[str, int, int], None]


def shard_dir(out: Path, shard: tuple[int, int] | None) -> Path:
    return out if shard is None else out / f"shard-{shard[0]}-of-{shard[1]}"


def screen_row(heads: HeadSet, correct: Bool[np.ndarray, " example"], intact: Bool[np.ndarray, " example"],
               scored: Bool[np.ndarray, " example"] | None = None) -> ScreenRow:
    """One head's row from its correctness (bool ``[n]``) on the examples ``scored`` (bool ``[n]``;
    ``None``: all). A racing screen's head dropped early has figures on its scored examples only,
    ``-`` for the rest of its bits, and ``n_scored`` set; a head scored on every example has it unset."""
    mask = np.ones(len(intact), dtype=bool) if scored is None else np.asarray(scored, dtype=bool)
    score = HeadScore.compare(heads, np.asarray(correct)[mask], np.asarray(intact)[mask])
    if len(heads) != 1:
        raise ValueError(f"screen_row scores one head, got the set {heads or 'of no head'}.")
    m = int(mask.sum())
    return ScreenRow(head=heads.heads[0], accuracy=score.accuracy, gain=score.gain / m, gain_count=score.gain,
                     damage=score.damage, fixes=score.fixes, correct=Correctness.of(correct, scored),
                     n_scored=m if m < len(intact) else None)


@dataclass(frozen=True)
class ScreenOutcome:
    """What a registered screen (:data:`celtk.run.registry.SCREENS`) returns to :func:`run_screen`."""

    intact: Any  # celtk.evaluation.results.EvalResult of the intact model
    null_ablation: JsonObject  # null_control()
    rows: list[ScreenRow]  # one per head screened, in head order
    racing: RacingRecord | None = None
    evaluated: int = 0  # heads scored by this call (fewer on a resume)


@public
def stored_screen(config: RunConfig, out: Path, *, shard: tuple[int, int] | None = None,
                  layers: Sequence[int] | None = None, model: Model | None = None) -> ScreenDocument | None:
    """The finished screen in ``out`` (or its ``shard``) when ``config`` asks for that same screen, else ``None``;
    read before any model loads. A directory screened with other settings is refused here, naming them.

    "The same screen": every setting a result depends on equal to the recorded one (batch size, device and the
    preset's name aside, and p and k, which an exhaustive screen does not read), and the same ``layers``. With a
    ``model`` given, its weights and the prompts it tokenises are also compared with ``fingerprint.json``;
    without one nothing is loaded, and the first stage that computes makes that check."""
    directory = shard_dir(Path(out), shard)
    if not (directory / ScreenDocument.FILE).exists():
        return None
    check_recorded_settings(directory, config)
    document = ScreenDocument.load(directory)
    if document.layers != (sorted(set(layers)) if layers is not None else None):
        return None
    fingerprint = directory / "fingerprint.json"
    if model is not None and fingerprint.exists():
        check_fingerprint(fingerprint, Session.open(config, model).fingerprint())
    return document


@public
def run_screen(config: RunConfig, out: Path, *, shard: tuple[int, int] | None = None, model: Model | None = None,
               progress: Progress | None = None, layers: Sequence[int] | None = None) -> ScreenDocument:
    """Every single head (or this shard's slice; or only those in ``layers``, for a quick look) on the
    discovery set, by the screen ``config.screen`` names (exhaustive, or racing for the top ``config.p``);
    writes ``screen.json`` and ``screen.csv``; resumes from the parts of an interrupted screen.

    A finished screen of the same settings is returned as stored (:func:`stored_screen`): nothing is
    recomputed or rewritten, and no model is loaded for it."""
    stored = stored_screen(config, out, shard=shard, layers=layers, model=model)
    if stored is not None:
        sweep_if_idle(shard_dir(Path(out), shard))
        return stored
    directory = shard_dir(Path(out), shard)
    check_recorded_settings(directory, config)  # an interrupted screen of other settings, before any model loads
    screen = SCREENS.get(config.screen)
    if shard is not None and not 0 <= shard[0] < shard[1]:
        raise ConfigError(f"Shard {shard[0]}/{shard[1]}: need 0 ≤ i < N, e.g. 0/{max(shard[1], 1)}.")
    if shard is not None and config.screen != "exhaustive":
        raise ConfigError(f"A {config.screen} screen cannot be sharded: it ranks every head against the others as it "
                          "goes. Run it unsharded, or shard the exhaustive screen (screen = 'exhaustive').")
    with RunDirectory(directory).lock() as rd:  # what it writes is not read back
        started = time.time()
        session = Session.open(config, model)
        if shard is not None and shard[1] > session.model.n_total_heads:
            raise ConfigError(f"Shard {shard[0]}/{shard[1]}: {config.model} has {session.model.n_total_heads} heads, "
                              f"so at most {session.model.n_total_heads} shards each screen one; "
                              f"use N ≤ {session.model.n_total_heads}.")
        check_fingerprint(directory / "fingerprint.json", session.fingerprint())
        write_json(directory / "config.json", {**config.recorded(), "celtk_version": __version__})
        heads = all_heads(session.model.n_layers, session.model.n_heads)
        if layers is not None:
            bad = sorted(set(layers) - set(range(session.model.n_layers)))
            if bad:
                raise ConfigError(f"No layer(s) {bad} in {config.model}; layers run 0..{session.model.n_layers - 1}.")
            heads = [h for h in heads if h.layer in set(layers)]
        if shard is not None:
            heads = heads[shard[0]::shard[1]]  # round-robin: every shard gets shallow and deep heads
        outcome = screen(session, directory, heads, progress)
        _check_intact(directory, outcome.intact)
        document = replace(_screen_document(session, outcome.intact, outcome.rows, shard),
                           null_ablation=outcome.null_ablation, racing=outcome.racing,
                           layers=sorted(set(layers)) if layers is not None else None)
        # screen.json last: it marks the stage finished (a rerun returns it without taking the lock that sweeps a
        # killed writer's temporary files), so a kill before it leaves no finished-looking screen without its csv
        _write_screen_csv(directory / "screen.csv", outcome.rows)
        write_json(directory / "timing.json", {"screen_seconds": round(time.time() - started, 2),
                                               "heads": outcome.evaluated, "replay": session.replay()})
        rd.save(document)
        return document


def exhaustive_screen(session: Session, directory: Path, heads: list[Head], progress: Progress | None) -> ScreenOutcome:
    """Every head on every discovery example, written per start layer to ``screen_parts/`` (a rerun
    scores only the layers not written yet)."""
    parts = directory / "screen_parts"
    done = set(layer_parts(parts))
    todo = [HeadSet((h,)) for h in heads if h.layer not in done]
    total, finished = len(heads), len(heads) - len(todo)
    if progress:
        progress("screen", finished, total)
    intact_holder: list[EvalResult] = []

    def on_layer(layer: int, results: dict[HeadSet, EvalResult]) -> None:
        nonlocal finished
        results = {h: r for h, r in results.items() if len(h)}  # the null control is kept apart
        if not results:
            return
        rows = [screen_row(h, r.correct, intact_holder[0].correct).to_json()
                for h, r in sorted(results.items(), key=lambda kv: kv[0].sort_key())]
        _write_generations(directory, f"L{layer}", {str(h): r for h, r in results.items()})
        write_json(parts / f"L{layer}.json", {"layer": layer, "heads": rows})
        finished += len(results)
        if progress:
            progress("screen", finished, total)

    screener = session.screener("discovery")
    def on_work(done: int, total: int) -> None:  # within a layer, by what each layer's replay costs
        if progress:
            progress("screen work", per_mille(done, total), WORK_SCALE)

    intact, scored = screener.run(todo + [HeadSet()], on_layer=on_layer, on_intact=intact_holder.append,
                                  on_work=on_work)
    _write_generations(directory, "intact", {"intact": intact})
    rows = covered_rows(parts, heads, session.model.n_layers)
    return ScreenOutcome(intact, null_control(intact, scored[HeadSet()]), rows, evaluated=len(todo))


def covered_rows(parts: Path, heads: list[Head], n_layers: int) -> list[ScreenRow]:
    """The rows of ``heads`` from the part files, in head order, after checking that the parts hold
    every one of them exactly once and nothing else (no layer the model lacks, no stranger head):
    a resumed screen never writes a screen.json with a head missing or twice."""
    found = layer_parts(parts)
    beyond = sorted(layer for layer in found if layer >= n_layers)
    if beyond:
        raise RunStoreError(f"{found[beyond[0]]} holds layer {beyond[0]}, but the model has layers 0..{n_layers - 1}: "
                            f"it is not this run's. Delete it and rerun the screen.")
    wanted = list(heads)
    layers = {h.layer for h in heads}
    rows: dict[Head, ScreenRow] = {}
    for layer, path in sorted(found.items()):
        if layer not in layers:
            continue
        part = read_layer_part(path)
        names = [row.head for row in part]
        stranger = sorted(set(names) - set(wanted), key=names.index)
        repeated = sorted({name for name in names if names.count(name) > 1})
        missing = [name for name in wanted if name.layer == layer and name not in names]
        if stranger or repeated or missing:
            what = "; ".join(text for text in (
                f"heads not in this screen: {_names(stranger)}" if stranger else "",
                f"repeated: {_names(repeated)}" if repeated else "",
                f"missing: {_names(missing)}" if missing else "") if text)
            raise RunStoreError(f"{path} does not hold layer {layer}'s heads of this screen exactly once ({what}). "
                                "Delete it and rerun the screen: that layer is screened again.")
        rows.update({row.head: row for row in part})
    unscored = [name for name in wanted if name not in rows]
    if unscored:
        raise RunStoreError(f"{parts} has no part for {_names(unscored)}; "
                            "rerun the screen, which scores what is missing.")
    return [rows[name] for name in wanted]


def _names(heads: list[Head]) -> str:
    return ", ".join(map(str, heads[:5]))


def _write_generations(directory: Path, name: str, results: dict[str, EvalResult]) -> None:
    """Generation-graded tasks: each example's generation per head set, in ``generations/{name}.json``
    (example ids → text), beside the screen parts (whose verdicts are the bits)."""
    texts = {key: {e.id: e.extra["generation"] for e in r.examples} for key, r in results.items()
             if r.examples and "generation" in r.examples[0].extra}
    if texts:
        write_json(directory / "generations" / f"{name}.json", texts)


def _check_intact(directory: Path, intact: EvalResult) -> None:
    """The intact outcomes are recomputed on every resume; they must equal the stored ones."""
    path = directory / "intact.json"
    current = {"correct": Correctness.of(intact.correct).bits,
               "logprob": [None if e.logprob != e.logprob else e.logprob  # NaN: generated
                           for e in intact.examples]}
    if path.exists():
        if read_json(path)["correct"] != current["correct"]:
            raise RunStoreError(f"{directory}: the intact model's outcomes differ from the stored ones, so the model "
                                "or data changed under the same name. Use a new run directory.")
    else:
        write_json(path, current)


def null_control(intact: EvalResult, null: EvalResult) -> JsonObject:
    """The null ablation (no head) scored through the ablated path against the intact pass:
    fixes = damage = 0 and log-probabilities equal up to float error when the two paths agree."""
    score = HeadScore.compare(HeadSet(), null.correct, intact.correct)
    # a float, per-choice floats, or None (generation-graded)
    def values(logprob: float | list[float] | None) -> list[float]:
        return [] if logprob is None else list(logprob) if isinstance(logprob, list) else [logprob]

    diffs = [abs(x - y) for a, b in zip(intact.examples, null.examples, strict=True)
             for x, y in zip(values(a.logprob), values(b.logprob), strict=True)]
    return {"fixes": score.fixes, "damage": score.damage, "max_abs_logprob_diff": float(max(diffs, default=0.0))}


def _screen_document(session: Session, intact: EvalResult, rows: list[ScreenRow],
                     shard: tuple[int, int] | None) -> ScreenDocument:
    discovery = session.splits.discovery
    return ScreenDocument(
        model=ModelRecord(session.model.describe()), task=TaskRecord(session.task.config()), n=len(intact.examples),
        intact_accuracy=intact.accuracy, intact_correct=Correctness.of(intact.correct),
        discovery_ids=[e.id for e in discovery], discovery_hashes=[e.content_hash for e in discovery],
        splits=session.splits.manifest(), shard=list(shard) if shard else None,
        config={**session.config.recorded(), "celtk_version": __version__}, heads=rows)


def _write_screen_csv(path: Path, rows: list[ScreenRow]) -> None:
    """``screen.csv``: one line per head; ``n_scored`` is the number of discovery examples the head was
    scored on (every one, except a racing screen's heads dropped early), so the column is always a count."""
    write_csv(path, ["head", "accuracy", "gain", "gain_count", "damage", "fixes", "n_scored"],
              [[str(r.head), f"{r.accuracy:.6f}", f"{r.gain:.6f}", r.gain_count, r.damage, r.fixes,
                len(r.correct) if r.complete else r.n_scored] for r in rows])


def layer_parts(parts: Path) -> dict[int, Path]:
    """The screen's per-layer part files (``L{layer}.json``) by layer; any other file there is not
    celtk's and is ignored."""
    found = (re.fullmatch(r"L(\d+)\.json", p.name) for p in parts.iterdir()) if parts.is_dir() else ()
    return {int(m.group(1)): parts / m.group(0) for m in found if m}


def read_layer_part(path: Path) -> list[ScreenRow]:
    """The rows of one layer's part file; one that celtk did not write is named, with the fix."""
    doc = read_json(path)
    try:
        return [ScreenRow.from_json(row) for row in doc["heads"]]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise RunStoreError(f"{path} is not a screen part celtk wrote (it needs a 'heads' list of screened heads); "
                            "delete it and rerun the screen, which redoes that layer only.") from None


@public
def merge_shards(out: Path) -> ScreenDocument:
    """Join ``out/shard-i-of-N`` screens into ``out/screen.json``; refuse gaps, repeats and mismatches,
    and a directory that already holds a run of other settings (under the run's lock)."""
    out = Path(out)
    with locked(out):
        return _merge_shards(out)


def _merge_shards(out: Path) -> ScreenDocument:
    found = sorted(p for p in out.glob("shard-*-of-*") if p.is_dir() and re.fullmatch(r"shard-\d+-of-\d+", p.name))
    if not found:
        raise RunStoreError(f"No shard directories (shard-i-of-N) in {out}; screen with shard=(i, N) "
                            f"(`celtk screen --shard i/N --out {out}`) first.")
    counts = {int(p.name.split("-of-")[1]) for p in found}
    if len(counts) != 1:
        raise RunStoreError(f"Shards in {out} disagree on N: {sorted(counts)}. Merge shards of one split only.")
    n = counts.pop()
    present = {i for i in (int(p.name.split("-")[1]) for p in found) if i < n}
    if len(present) < n:  # N is read from directory names, so it may be absurd: never build range(N) whole
        shown = list(itertools.islice((i for i in range(n) if i not in present), 8))
        count = n - len(present)
        more = f" ({count:,} in all)" if count > len(shown) else ""
        raise RunStoreError(f"Cannot merge {out}: shard(s) {', '.join(f'{i}/{n}' for i in shown)}{more} missing.")
    docs = [ScreenDocument.load(out / f"shard-{i}-of-{n}") for i in range(n)]
    prints = [read_json(out / f"shard-{i}-of-{n}" / "fingerprint.json") for i in range(n)]
    for i, (doc, fp) in enumerate(zip(docs, prints, strict=True)):
        if fp != prints[0] or doc.intact_correct != docs[0].intact_correct:
            raise RunStoreError(f"Shard {i}/{n} was screened with a different model, task, data or setting "
                                f"than shard 0/{n}; rerun it with the same command.")
    rows, seen = [], set()
    for i, doc in enumerate(docs):
        for row in doc.heads:
            if row.head in seen:
                raise RunStoreError(f"Head {row.head} appears in more than one shard (again in {i}/{n}).")
            seen.add(row.head)
            rows.append(row)
    expected = docs[0].n_layers * docs[0].n_heads
    if len(seen) != expected:
        raise RunStoreError(f"Merged shards cover {len(seen)} of {expected} heads; "
                            "some shard is incomplete — rerun it.")
    rows.sort(key=lambda r: r.head)
    merged = replace(docs[0], shard=None, heads=rows)
    check_screen_complete(out, merged)
    check_fingerprint(out / "fingerprint.json", prints[0], source="the shards")
    _write_screen_csv(out / "screen.csv", rows)
    merged.save(out)  # last: screen.json marks the merge finished
    return merged
