"""Stage 2's search alone, the prefix tree against the scheduling before it, in one process and in
alternation (old, new, new, old, ...): the same model, discovery examples and Algorithm 1 subsets of
a screened run's pool, scored by this tree's ``CachedScreener`` and by the base commit's (its
cached screener, ``--base-path``, loaded under another module name beside this tree's other modules, which it
shares; so the base must import modules this tree still has: commits before the wings held the screener in
``celtk/screen.py`` and imported ``celtk.evaluator``, which this tree no longer has). Per-example outcomes must be
identical; reports seconds per search, their ratio, and the layer evaluations each ran (counted through ``_layer``).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/tree_speed.py runs/demo --repeats 2 --out runs/tree_speed.json

Wall times on a shared machine move with its load; alternation spreads that load over both sides.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def base_screen(commit: str, into: Path, path: str = "celtk/screening/cached.py"):
    """The base commit's cached screener (``path``) as module ``celtk_base_screen`` (its imports resolve to
    this tree)."""
    archive = subprocess.run(["git", "archive", "--format=tar", commit, path], cwd=ROOT, capture_output=True,
                             check=True)
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    spec = importlib.util.spec_from_file_location("celtk_base_screen", into / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["celtk_base_screen"] = module
    spec.loader.exec_module(module)
    return module


def counting(cls, counter: dict) -> None:
    layer = cls._layer

    def counted(self, index, hidden, kwargs, rows, copies, cache, mask=None):
        if hidden.shape[0] > copies:  # example rows, not the shared prefix's one row per copy
            counter["rows"] += hidden.shape[0]
        return layer(self, index, hidden, kwargs, rows, copies, cache, mask)

    cls._layer = counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a screened run directory (only read)")
    parser.add_argument("--base", default=None, help="the old code's commit (default: merge-base with main)")
    parser.add_argument("--base-path", default="celtk/screening/cached.py", help="the cached screener's file in --base")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of (old, new) / (new, old)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from celtk.run.session import open_run
    from celtk.screening import cached as new_screen
    from celtk.search.selection import candidate_pool, subsets

    commit = args.base or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True,
                                         text=True, check=True).stdout.strip()
    run = open_run(args.run)
    config = run.session.config
    pool = [next(iter(s.heads)) for s in candidate_pool(run.scores, config.p)]
    sets = subsets(pool, config.k)
    prepared = run.session.prepared("discovery")
    with tempfile.TemporaryDirectory() as tmp:
        old_screen = base_screen(commit, Path(tmp), args.base_path)
    counters = {"old": {"rows": 0}, "new": {"rows": 0}}
    counting(old_screen.CachedScreener, counters["old"])
    counting(new_screen.CachedScreener, counters["new"])
    classes = {"old": old_screen.CachedScreener, "new": new_screen.CachedScreener}
    sizes = {"batch_size": config.batch_size} if isinstance(config.batch_size, int) else {}
    seconds: dict[str, list[float]] = {"old": [], "new": []}
    outcomes: dict[str, dict] = {}
    order = [side for r in range(args.repeats) for side in (("old", "new") if r % 2 == 0 else ("new", "old"))]
    for side in order:
        screener = classes[side](run.session.model, prepared, share_prefix=config.share_prefix, **sizes)
        before = counters[side]["rows"]
        start = time.perf_counter()
        _, results = screener.run(sets)
        seconds[side].append(time.perf_counter() - start)
        counters[side]["per_search"] = (counters[side]["rows"] - before) / len(prepared.requests)
        outcomes[side] = {str(s): [e.logprob for e in r.examples] + [bool(c) for c in r.correct]
                          for s, r in results.items()}
        print(side, f"{seconds[side][-1]:.1f} s", flush=True)
    identical = outcomes["old"] == outcomes["new"]
    report = {"run": str(args.run), "base_commit": commit, "sets": len(sets), "examples": len(prepared.requests),
              "pool": [str(h) for h in pool], "order": order, "seconds": seconds,
              "layer_evaluations_per_example": {side: c["per_search"] for side, c in counters.items()},
              "ratio_of_total_seconds": sum(seconds["old"]) / sum(seconds["new"]),
              "identical_outcomes": identical}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    sys.exit(0 if identical else 1)


if __name__ == "__main__":
    main()
