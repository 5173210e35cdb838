"""The CEL stages on a run directory: screen → select → test (Algorithm 1 of the paper).

Each stage reads what the previous one wrote, writes its own files atomically, and can
be rerun: finished work is kept, and a changed model, task, data or setting is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from celtk import __version__
from celtk.errors import ConfigError, RunStoreError
from celtk.evaluator import EvalResult, Prepared, prepare
from celtk.heads import HeadSet, all_heads
from celtk.models import Model, load_model
from celtk.runstore import bits, check_fingerprint, locked, read_json, unbits, write_csv, write_json
from celtk.screen import CachedScreener, HeadScore
from celtk.selection import n_subsets
from celtk.stats import compare_paired
from celtk.tasks import Task, get_task, make_splits
from celtk.tasks._splits import Splits

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class RunConfig:
    """Everything a run depends on. Precedence: defaults < config file < CLI flags."""

    model: str = "smollm2-135m"
    task: str = "arithmetic:2da"
    data: str | None = None
    discovery: int = 200
    heldout: int = 500
    seed: int = 0
    fewshot: int = 3
    chat: bool = False
    batch_size: int | str = 32  # or "auto": fit the device's free memory
    device: str = "cpu"
    dtype: str = "float32"
    p: int = 10
    k: int = 3
    share_prefix: bool = True

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "config") -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"Unknown key(s) {', '.join(unknown)} in {where}; valid keys: {', '.join(sorted(known))}.")
        return replace(cls(), **values).validated()

    def validated(self) -> RunConfig:
        if self.batch_size != "auto" and not isinstance(self.batch_size, int):
            raise ConfigError(f"batch_size must be a positive integer or 'auto', got {self.batch_size!r}.")
        for name in ("discovery", "heldout", "p", "k") + (() if self.batch_size == "auto" else ("batch_size",)):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}.")
        if self.fewshot < 0:
            raise ConfigError(f"fewshot must be non-negative, got {self.fewshot}.")
        if self.k > self.p:
            raise ConfigError(f"k = {self.k} exceeds p = {self.p}; subsets are drawn from the pool of p heads, so use k ≤ p.")
        return self


@dataclass
class Session:
    """A loaded model, task and splits for one run configuration."""

    config: RunConfig
    model: Model
    task: Task
    splits: Splits

    @classmethod
    def open(cls, config: RunConfig, model: Model | None = None) -> Session:
        task = get_task(config.task, data_path=config.data)
        splits = make_splits(task, config.discovery, config.heldout, seed=config.seed, fewshot=config.fewshot)
        model = model or load_model(config.model, device=config.device, dtype=config.dtype)
        return cls(config, model, task, splits)

    def prepared(self, which: str) -> Prepared:
        examples = self.splits.discovery if which == "discovery" else self.splits.heldout
        return prepare(self.model, self.task, examples, self.splits.shots, self.config.chat)

    def screener(self, which: str) -> CachedScreener:
        if self.task.kind == "generate":
            raise ConfigError(f"Task {self.task.full_name} is graded by generation; the screener scores fixed targets "
                              "and choices only. Use `celtk eval` for generation tasks.")
        prepared = self.prepared(which)
        sizes = {"batch_size": self.config.batch_size}
        if self.config.batch_size == "auto":
            from celtk.screen import auto_batch

            sizes = dict(zip(("batch_size", "rows_per_pass"), auto_batch(self.model, prepared)))
        return CachedScreener(self.model, prepared, share_prefix=self.config.share_prefix, **sizes)

    def fingerprint(self) -> dict[str, Any]:
        """What results depend on (not batch size or device, which must not change them)."""
        c = self.config
        return {"model": c.model, "weight_hash": self.model.weight_hash, "dtype": c.dtype, "task": self.task.config(),
                "seed": c.seed, "fewshot": c.fewshot, "chat": c.chat, "discovery": self.splits.manifest()["discovery_hash"],
                "shots": [s.id for s in self.splits.shots], "share_prefix_exact": True}


def _result_row(heads: HeadSet, result: EvalResult, intact: np.ndarray) -> dict[str, Any]:
    score = HeadScore.compare(heads, result.correct, intact)
    return {"head": str(heads), "accuracy": score.accuracy, "gain": score.gain / len(intact), "gain_count": score.gain,
            "damage": score.damage, "fixes": score.fixes, "correct": bits(result.correct)}


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ConfigError(f"Malformed --shard {text!r}; write i/N with 0 ≤ i < N, e.g. 0/4.") from None
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"--shard {text}: need 0 ≤ i < N, e.g. 0/{max(n, 1)} … {max(n, 1) - 1}/{max(n, 1)}.")
    return i, n


def shard_dir(out: Path, shard: tuple[int, int] | None) -> Path:
    return out if shard is None else out / f"shard-{shard[0]}-of-{shard[1]}"


def run_screen(config: RunConfig, out: Path, *, shard: tuple[int, int] | None = None, model: Model | None = None,
               progress: Progress | None = None) -> dict[str, Any]:
    """Stage 1: every single head (or this shard's slice) on the discovery set; resumable."""
    directory = shard_dir(Path(out), shard)
    with locked(directory):
        started = time.time()
        session = Session.open(config, model)
        check_fingerprint(directory / "fingerprint.json", session.fingerprint())
        write_json(directory / "config.json", {**asdict(config), "celtk_version": __version__})
        heads = all_heads(session.model.n_layers, session.model.n_heads)
        if shard is not None:
            heads = heads[shard[0]::shard[1]]  # round-robin: every shard gets shallow and deep heads
        parts = directory / "screen_parts"
        done = {int(p.stem[1:]) for p in parts.glob("L*.json")} if parts.is_dir() else set()
        todo = [HeadSet((h,)) for h in heads if h.layer not in done]
        screener = session.screener("discovery")
        total, finished = len(heads), len(heads) - len(todo)
        if progress:
            progress("screen", finished, total)

        intact_holder: list[EvalResult] = []

        def on_layer(layer: int, results: dict[HeadSet, EvalResult]) -> None:
            nonlocal finished
            rows = [_result_row(h, r, intact_holder[0].correct) for h, r in sorted(results.items(), key=lambda kv: kv[0].sort_key())]
            write_json(parts / f"L{layer}.json", {"layer": layer, "heads": rows})
            finished += len(results)
            if progress:
                progress("screen", finished, total)

        intact, _ = screener.run(todo, on_layer=on_layer, on_intact=intact_holder.append)
        _check_intact(directory, intact)
        rows = [row for p in sorted(parts.glob("L*.json"), key=lambda p: int(p.stem[1:])) for row in read_json(p)["heads"]]
        mine = {str(h) for h in heads}
        rows = [r for r in rows if r["head"] in mine]
        result = _screen_document(session, intact, rows, shard)
        write_json(directory / "screen.json", result)
        _write_screen_csv(directory / "screen.csv", rows)
        write_json(directory / "timing.json", {"screen_seconds": round(time.time() - started, 2), "heads": len(todo)})
        return result


def _check_intact(directory: Path, intact: EvalResult) -> None:
    """The intact outcomes are recomputed on every resume; they must equal the stored ones."""
    path = directory / "intact.json"
    current = {"correct": bits(intact.correct), "logprob": [e.logprob for e in intact.examples]}
    if path.exists():
        stored = read_json(path)
        if stored["correct"] != current["correct"]:
            raise RunStoreError(f"{directory}: the intact model's outcomes differ from the stored ones, so the model or "
                                "data changed under the same name. Use a new --out directory.")
    else:
        write_json(path, current)


def _screen_document(session: Session, intact: EvalResult, rows: list[dict], shard) -> dict[str, Any]:
    return {
        "model": session.model.describe(),
        "task": session.task.config(),
        "n": len(intact.examples),
        "intact_accuracy": intact.accuracy,
        "intact_correct": bits(intact.correct),
        "discovery_ids": [e.id for e in session.splits.discovery],
        "discovery_hashes": [e.content_hash for e in session.splits.discovery],
        "splits": session.splits.manifest(),
        "shard": list(shard) if shard else None,
        "config": {**asdict(session.config), "celtk_version": __version__},
        "heads": rows,
    }


def _write_screen_csv(path: Path, rows: list[dict]) -> None:
    write_csv(path, ["head", "accuracy", "gain", "gain_count", "damage", "fixes"],
              [[r["head"], f"{r['accuracy']:.6f}", f"{r['gain']:.6f}", r["gain_count"], r["damage"], r["fixes"]] for r in rows])


def merge_shards(out: Path) -> dict[str, Any]:
    """Join ``out/shard-i-of-N`` screens into ``out/screen.json``; refuse gaps, repeats and mismatches."""
    out = Path(out)
    found = sorted(out.glob("shard-*-of-*"))
    if not found:
        raise RunStoreError(f"No shard directories (shard-i-of-N) in {out}; run `celtk screen --shard i/N --out {out}` first.")
    counts = {int(p.name.split("-of-")[1]) for p in found}
    if len(counts) != 1:
        raise RunStoreError(f"Shards in {out} disagree on N: {sorted(counts)}. Merge shards of one split only.")
    n = counts.pop()
    present = {int(p.name.split("-")[1]) for p in found}
    missing = sorted(set(range(n)) - present)
    if missing:
        raise RunStoreError(f"Cannot merge {out}: shard(s) {', '.join(f'{i}/{n}' for i in missing)} missing.")
    docs = [read_json(out / f"shard-{i}-of-{n}" / "screen.json") for i in range(n)]
    prints = [read_json(out / f"shard-{i}-of-{n}" / "fingerprint.json") for i in range(n)]
    for i, (doc, fp) in enumerate(zip(docs, prints)):
        if fp != prints[0] or doc["intact_correct"] != docs[0]["intact_correct"]:
            raise RunStoreError(f"Shard {i}/{n} was screened with a different model, task, data or setting than shard 0/{n}; "
                                "rerun it with the same command.")
    rows, seen = [], set()
    for i, doc in enumerate(docs):
        for row in doc["heads"]:
            if row["head"] in seen:
                raise RunStoreError(f"Head {row['head']} appears in more than one shard (again in {i}/{n}).")
            seen.add(row["head"])
            rows.append(row)
    layers, heads = docs[0]["model"]["n_layers"], docs[0]["model"]["n_heads"]
    if len(seen) != layers * heads:
        raise RunStoreError(f"Merged shards cover {len(seen)} of {layers * heads} heads; some shard is incomplete — rerun it.")
    from celtk.heads import Head

    rows.sort(key=lambda r: Head.parse(r["head"]))
    merged = {**docs[0], "shard": None, "heads": rows}
    write_json(out / "screen.json", merged)
    write_json(out / "fingerprint.json", prints[0])
    _write_screen_csv(out / "screen.csv", rows)
    return merged


def load_screen(out: Path) -> tuple[dict[str, Any], np.ndarray, list[HeadScore]]:
    doc = read_json(Path(out) / "screen.json")
    if doc.get("shard"):
        raise RunStoreError(f"{out}/screen.json is one shard; run `celtk merge` on the parent directory first.")
    intact = np.array(unbits(doc["intact_correct"]))
    scores = [HeadScore.compare(HeadSet.parse(r["head"]), np.array(unbits(r["correct"])), intact) for r in doc["heads"]]
    return doc, intact, scores


def _session_for(doc: dict[str, Any], model: Model | None, **overrides: Any) -> Session:
    config = RunConfig.from_dict({k: v for k, v in doc["config"].items() if k != "celtk_version"} | overrides, "screen.json")
    session = Session.open(config, model)
    if session.model.weight_hash != doc["model"]["weight_hash"]:
        raise RunStoreError(f"Model {config.model!r} now has weight hash {session.model.weight_hash}, but the run used "
                            f"{doc['model']['weight_hash']}. Load the same weights, or start a new run.")
    return session


class SetMemo:
    """Per-example outcomes of head sets on the discovery set, kept on disk so any search
    (Algorithm 1, greedy, beam, stability resamples) resumes after an interruption and never
    scores a set twice. Files are ``DIR/{batch tag}-L{start layer}.json``, written atomically
    as each start layer finishes."""

    def __init__(self, directory: Path, intact: np.ndarray, screener: Callable[[], CachedScreener],
                 progress: Progress | None = None, stage: str = "select") -> None:
        self.directory, self._screener = directory, screener
        self._instance: CachedScreener | None = None
        self.progress, self.stage = progress, stage
        self.known: dict[HeadSet, np.ndarray] = _load_subset_parts(directory, intact)

    def __call__(self, sets: list[HeadSet]) -> dict[HeadSet, np.ndarray]:
        missing = [s for s in dict.fromkeys(sets) if s not in self.known]
        if missing:
            import hashlib

            tag = hashlib.sha1(",".join(str(s) for s in sorted(missing, key=HeadSet.sort_key)).encode()).hexdigest()[:12]
            done = 0

            def on_layer(layer: int, results: dict[HeadSet, EvalResult]) -> None:
                nonlocal done
                rows = [{"heads": str(h), "correct": bits(r.correct)}
                        for h, r in sorted(results.items(), key=lambda kv: kv[0].sort_key())]
                write_json(self.directory / f"{tag}-L{layer}.json", {"layer": layer, "subsets": rows})
                self.known.update({h: r.correct for h, r in results.items()})
                done += len(results)
                if self.progress:
                    self.progress(self.stage, done, len(missing))

            if self.progress:
                self.progress(self.stage, 0, len(missing))
            if self._instance is None:
                self._instance = self._screener()
            self._instance.run(missing, on_layer=on_layer)
        return {s: self.known[s] for s in sets}


def run_select(out: Path, *, p: int = 10, k: int = 3, strategy: str = "algorithm1", width: int = 3,
               model: Model | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Stage 2. ``algorithm1`` (default): pool the top-p heads, evaluate every subset of size
    2..k, freeze the best. ``greedy`` / ``beam`` (width ``width``): search over all heads.
    Writes ``selection.json`` and ``diagnostics.json``."""
    from celtk.strategies import get_strategy

    out = Path(out)
    search = get_strategy(strategy)
    with locked(out):
        if k > p and strategy == "algorithm1":
            raise ConfigError(f"k = {k} exceeds p = {p}; subsets are drawn from the pool of p heads, so use k ≤ p.")
        doc, intact, scores, session = _open_for_search(out, model, p, k=k)
        memo = SetMemo(out / "select_parts" / "sets", intact, lambda: session.screener("discovery"), progress)
        result = search(scores, intact, memo, k=k, p=p, width=width)
        document = _selection_document(doc, session, result, intact)
        write_json(out / "selection.json", document)
        diagnostics = result.diagnostics or {"strategy": result.strategy, "rounds": result.rounds}
        write_json(out / "diagnostics.json", diagnostics)
        return document


def _load_subset_parts(parts: Path, intact: np.ndarray) -> dict[HeadSet, np.ndarray]:
    """Set outcomes finished by an earlier, interrupted search (one file per batch and start layer)."""
    known: dict[HeadSet, np.ndarray] = {}
    for path in sorted(parts.glob("*.json")) if parts.is_dir() else []:
        for row in read_json(path)["subsets"]:
            correct = np.array(unbits(row["correct"]))
            if correct.shape != intact.shape:
                raise RunStoreError(f"{path} holds outcomes for {len(correct)} examples, not {len(intact)}; delete {parts}.")
            known[HeadSet.parse(row["heads"])] = correct
    return known


def _selection_document(doc, session, result, intact) -> dict[str, Any]:
    n = len(intact)
    ranking = [{"heads": s.heads.names(), "accuracy": s.accuracy, "gain": s.gain / n, "gain_count": s.gain,
                "damage": s.damage, "fixes": s.fixes} for s in result.scored]
    best = result.best
    document = {
        "heads": best.heads.names(),
        "discovery_accuracy": best.accuracy,
        "discovery_gain": best.gain / n,
        "intact_discovery_accuracy": float(intact.mean()),
        "model": doc["model"],
        "task": doc["task"],
        "config": {**asdict(session.config), "celtk_version": __version__},
        "discovery_ids": doc["discovery_ids"],
        "discovery_hashes": doc["discovery_hashes"],
        "discovery_hash": doc["splits"]["discovery_hash"],
        "shots": doc["splits"]["shot_ids"],
        "strategy": result.strategy,
        "strategy_options": result.options,
        "k": result.k,
        "n_evaluations": result.n_evaluations,
        "rounds": result.rounds,
        "ranking": ranking,
    }
    if result.strategy == "algorithm1":
        document |= {"p": result.options["p"], "n_evaluated_subsets": n_subsets(result.options["p"], result.k),
                     "pool": result.rounds[0], "flagged_interactions": result.diagnostics["flagged"]}
    return document


def _open_for_search(out: Path, model: Model | None, p: int,
                     **overrides: Any) -> tuple[dict[str, Any], np.ndarray, list[HeadScore], Session]:
    """A screened run, ready for a search over pools of ``p`` heads: its screen and a session on
    the same model and discovery set."""
    doc, intact, scores = load_screen(out)
    if p > len(scores):
        raise ConfigError(f"p = {p} exceeds the {len(scores)} screened heads; use p ≤ {len(scores)}.")
    session = _session_for(doc, model, **({"p": p} | overrides))
    if [e.id for e in session.splits.discovery] != doc["discovery_ids"]:
        raise RunStoreError("The discovery set drawn now differs from the one screened; the task data changed.")
    return doc, intact, scores, session


def run_altscreen(out: Path, *, method: str = "gradient", p: int = 10, masks: int = 200, rate: float = 0.05,
                  seed: int = 0, model: Model | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """Rank heads with an alternative screener (``gradient`` or ``lasso``) and compare its top-p
    pool with the exhaustive screen's; writes ``altscreen-{method}.json``."""
    from celtk.screeners import compare_rankings, gradient_scores, lasso_scores

    out = Path(out)
    if method not in ("gradient", "lasso"):
        raise ConfigError(f"Unknown screener {method!r}; use 'gradient' or 'lasso'.")
    with locked(out):
        doc, intact, scores, session = _open_for_search(out, model, p)
        if method == "gradient":
            size = session.config.batch_size if isinstance(session.config.batch_size, int) else 8
            result = gradient_scores(session.model, session.prepared("discovery"), batch_size=size)
        else:
            memo = SetMemo(out / "select_parts" / "sets", intact, lambda: session.screener("discovery"), progress, "lasso")
            result = lasso_scores(memo, [next(iter(s.heads.heads)) for s in scores], n_masks=masks, rate=rate, seed=seed)
        comparison = compare_rankings(scores, result, p)
        document = {"method": method, "comparison": comparison, "details": result.details,
                    "scores": {str(h): result.scores[h] for h in result.ranked()},
                    "exhaustive_evaluations": len(scores)}
        timing = {"seconds": round(result.seconds, 1)}
        document["comparison"].pop("seconds")
        write_json(out / f"altscreen-{method}.json", document)
        write_json(out / f"altscreen-{method}-timing.json", timing)
        return document | {"timing": timing}


def run_stability(out: Path, *, resamples: int = 20, method: str = "bootstrap", fraction: float = 0.5, seed: int = 0,
                  strategy: str = "algorithm1", p: int = 10, k: int = 3, width: int = 3, model: Model | None = None,
                  n_boot: int = 2000, progress: Progress | None = None) -> dict[str, Any]:
    """Rerun selection on resamples of the discovery set; score every distinct selection on the
    held-out set; writes ``stability.json``."""
    from celtk.stability import stability

    out = Path(out)
    with locked(out):
        doc, intact, scores, session = _open_for_search(out, model, p)
        memo = SetMemo(out / "select_parts" / "sets", intact, lambda: session.screener("discovery"), progress, "stability")
        result = stability(scores, intact, memo, n_resamples=resamples, method=method, fraction=fraction, seed=seed,
                           strategy=strategy, p=p, k=k, width=width)
        _check_no_overlap(doc["discovery_hashes"], doc["discovery_ids"], session.splits.heldout)
        distinct = sorted(set(result.selections) | {result.reference}, key=HeadSet.sort_key)
        if progress:
            progress("held-out", 0, len(distinct))
        held_intact, held = session.screener("heldout").run(distinct)
        if progress:
            progress("held-out", len(distinct), len(distinct))
        full = memo(distinct)
        rows = []
        for heads in distinct:
            cmp = compare_paired(held_intact.correct, held[heads].correct, n_boot=n_boot, seed=session.config.seed)
            rows.append({"heads": heads.names(), "frequency": result.subset_frequency.get(str(heads), 0.0),
                         "is_reference": heads == result.reference,
                         "discovery_gain": float(full[heads].mean() - intact.mean()),
                         "heldout_gain": cmp.gain, "heldout_gain_ci": list(cmp.gain_ci), "heldout_mcnemar_p": cmp.mcnemar_p})
        rows.sort(key=lambda r: (-r["frequency"], r["heads"]))
        gains = np.array([next(r["heldout_gain"] for r in rows if r["heads"] == s.names()) for s in result.selections])
        document = {
            "strategy": strategy, "p": p, "k": k, "resampling": method, "n_resamples": resamples,
            "fraction": fraction if method == "subsample" else None, "seed": seed,
            "reference_selection": result.reference.names(), "reference_frequency": result.reference_frequency,
            "head_frequency": result.head_frequency, "mean_pairwise_jaccard": result.mean_jaccard,
            "n_distinct_selections": len(set(result.selections)),
            "heldout_gain_over_resamples": {"mean": float(gains.mean()), "min": float(gains.min()),
                                            "q05": float(np.quantile(gains, 0.05)), "median": float(np.median(gains)),
                                            "q95": float(np.quantile(gains, 0.95)), "max": float(gains.max())},
            "heldout_intact_accuracy": held_intact.accuracy, "n_heldout": len(held_intact.examples),
            "selections": rows, "per_resample": [s.names() for s in result.selections],
            "n_discovery_evaluations": result.n_evaluations,
        }
        write_json(out / "stability.json", document)
        return document


def run_test(out: Path, *, heldout: int | None = None, model: Model | None = None, n_boot: int = 10_000,
             progress: Progress | None = None) -> dict[str, Any]:
    """Held-out comparison of the frozen selection against the intact model, in one matched run."""
    out = Path(out)
    with locked(out):
        sel = read_json(out / "selection.json")
        overrides = {"heldout": heldout} if heldout is not None else {}
        session = _session_for(sel, model, **overrides)
        if session.task.config() != sel["task"]:
            raise RunStoreError(f"selection.json was made for task {sel['task']['task']!r}, not {session.task.full_name!r}.")
        _check_no_overlap(sel["discovery_hashes"], sel["discovery_ids"], session.splits.heldout)
        heads = HeadSet.parse(",".join(sel["heads"]))
        if progress:
            progress("test", 0, 2)
        intact, results = session.screener("heldout").run([heads])
        ablated = results[heads]
        if progress:
            progress("test", 2, 2)
        cmp = compare_paired(intact.correct, ablated.correct, n_boot=n_boot, seed=session.config.seed)
        document = {
            "heads": sel["heads"], "strategy": sel.get("strategy", "algorithm1"), "model": sel["model"]["name"],
            "task": sel["task"]["task"], "n": cmp.n,
            "intact_accuracy": cmp.intact_accuracy, "ablated_accuracy": cmp.ablated_accuracy, "gain": cmp.gain,
            "relative_error_reduction": cmp.relative_error_reduction, "fixes": cmp.fixes, "damage": cmp.damage,
            "mcnemar_p": cmp.mcnemar_p, "gain_ci": list(cmp.gain_ci), "ci_level": cmp.ci_level, "n_boot": n_boot,
            "heldout_hash": session.splits.manifest()["heldout_hash"],
            "examples": [{"id": a.id, "intact_correct": a.correct, "ablated_correct": b.correct,
                          "intact_logprob": a.logprob, "ablated_logprob": b.logprob}
                         for a, b in zip(intact.examples, ablated.examples)],
        }
        write_json(out / "test.json", document)
        return document


def _check_no_overlap(discovery_hashes: list[str], discovery_ids: list[str], heldout) -> None:
    from celtk.errors import SplitError
    from celtk.tasks._splits import shared_examples

    count, shown = shared_examples(dict(zip(discovery_hashes, discovery_ids)), heldout)
    if count:
        raise SplitError(f"The held-out set shares {count} example(s) with the discovery set the selection was made on: "
                         f"{shown}. Held-out examples must take no part in selection.")
