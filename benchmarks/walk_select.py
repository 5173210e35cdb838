"""Follow a run directory through ``run_select``: which celtk functions receive it, in which modules, and how often
the walk goes back into a module it had left. The numbers measure how scattered the same-run checks are.

    python benchmarks/walk_select.py                 # this checkout (about a minute: screens the planted tiny Llama)
    python benchmarks/walk_select.py --stages        # only the reads, of every stage in turn (a few minutes)
    PYTHONPATH=OTHER python benchmarks/walk_select.py --json   # another checkout, to compare

The walk is traced, not read: ``sys.setprofile`` records every call into a ``celtk`` function one of whose
arguments is the run directory, a path inside it, or an object that holds it (a ``RunDirectory``, a ``HeldoutLog``,
a ``ScreenedRun``). Reported:

* **steps**: those functions, each counted once, in the order first called (argument checks, ``celtk.boundary``,
  and dataclass-generated ``__init__`` left out);
* **modules**: the modules they are in;
* **returns**: steps that go back into a module the walk had left for another (select -> directory -> select);
  and by package (``celtk.run``, ``celtk.store``, ``celtk.search``, …): steps that go back into a package left;
* **climbs**: calls with the run directory from a module into one that imports it (directly or through others, at
  import time or inside a function; ``TYPE_CHECKING`` imports left out): a lower layer calling back up into a
  layer above it. A stage calling the store again after the store returned is a return, not a climb;
* **reads**: how many times each file of the run directory was opened for reading (``os.open`` read-only, which
  every bounded read of celtk's goes through: a document's JSON, its digest, ``digests.json``, the held-out log),
  by file name;
* **checks**: steps whose function is a same-run check (its name starts with ``check``, ``verify``, ``refuse``,
  ``require`` or ``admit``, or it is in ``celtk.store.integrity``), and the modules that start one other than through
  ``RunDirectory.require`` / ``RunDirectory.admit`` (call it from outside any check; a document checking its own
  file's digest on load is left out).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # tests._support; a PYTHONPATH checkout's celtk comes first

CHECK_PREFIXES = ("check", "verify", "refuse", "require", "admit", "_check", "_verify")


def holds(value: Any, out: Path, depth: int = 0) -> bool:
    """``value`` is the run directory or a path inside it, or (one level down) an object with such an attribute."""
    if isinstance(value, Path) or isinstance(value, str) and value.startswith("/") and len(value) < 4096:
        try:
            return Path(value).resolve().is_relative_to(out)
        except (OSError, ValueError):
            return False
    attrs = getattr(value, "__dict__", None)
    if depth == 0 and isinstance(attrs, dict):
        return any(holds(v, out, 1) for v in attrs.values() if isinstance(v, (str, Path)))
    return False


def is_check(module: str, function: str) -> bool:
    return function.rpartition(".")[2].startswith(CHECK_PREFIXES) or module == "celtk.store.integrity"


def importers(root: Path | None = None) -> dict[str, set[str]]:
    """For each module of the package at ``root`` (the ``celtk`` imported here when not given), the modules that
    import it, directly or through others (run-time imports: at import time or inside a function; ``TYPE_CHECKING``
    ones left out), by ``benchmarks/house_metrics.py``'s reading of the import graph."""
    from benchmarks.house_metrics import measure

    if root is None:
        import celtk

        root = Path(celtk.__file__).parent
    edges = {m.name: {t for t, kinds in m.imports.items() if kinds - {"typing"}} for m in measure(root)}
    above: dict[str, set[str]] = {name: set() for name in edges}
    for start in edges:  # everything start reaches is imported by start
        seen, todo = set(), list(edges[start])
        while todo:
            target = todo.pop()
            if target not in seen:
                seen.add(target)
                todo.extend(edges.get(target, ()))
        for target in seen - {start}:
            above.setdefault(target, set()).add(start)
    return above


def is_wrapper(frame: Any, module: str, qualname: str) -> bool:
    """``frame`` is the public boundary's check around a call of ``module``'s ``qualname``: in ``celtk.boundary``, or
    the wrapper beartype builds under the wrapped function's own module and name."""
    name = frame.f_globals.get("__name__", "")
    return name == "celtk.boundary" or name == module and frame.f_code.co_qualname == qualname


def walk(out: Path, call: Any, climbs: list[str] | None = None, above: dict[str, set[str]] | None = None
         ) -> tuple[list[tuple[str, str]], set[str]]:
    """The steps, and the modules that start a same-run check other than through the run directory's two entry
    points (``RunDirectory.require`` and ``RunDirectory.admit``). ``climbs``, when given, receives each call into a
    module that imports its caller's (``caller -> callee``, once each); ``above``: each module's importers
    (:func:`importers` when not given). The caller is the first frame below that is not the public boundary's
    checking wrapper (``celtk.boundary``, or the wrapper beartype builds under the callee's own name). A method of a
    base class calling an override defined in a module that imports the base's would count as a climb too (a
    document's ``load`` calling its own ``from_json``); none does in ``run_select``'s walk."""
    steps: list[tuple[str, str]] = []
    starters: set[str] = set()
    if above is None:
        above = importers() if climbs is not None else {}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        # argument validation (the public API's checks of its inputs) and dataclass-generated code are not the walk
        generated = "__create_fn__" in frame.f_code.co_qualname
        if not module.startswith("celtk") or module == "celtk.boundary" or generated:
            return
        code = frame.f_code
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if any(holds(frame.f_locals.get(name), out) for name in names):
            step = (module, code.co_qualname)
            if step not in steps:
                steps.append(step)
            caller = frame.f_back
            if climbs is not None:
                origin = caller
                while origin is not None and is_wrapper(origin, module, code.co_qualname):
                    origin = origin.f_back  # the public boundary's wrapper: who called the public function
                by_module = origin.f_globals.get("__name__", "") if origin is not None else ""
                if origin is not None and by_module != module and module in above.get(by_module, ()):
                    climb = f"{by_module}.{origin.f_code.co_qualname} -> {module}.{code.co_qualname}"
                    if climb not in climbs:
                        climbs.append(climb)
            entry = step[1] in ("RunDirectory.require", "RunDirectory.admit")  # the run directory's two doors
            if is_check(*step) and not entry and caller is not None:
                by = (caller.f_globals.get("__name__", ""), caller.f_code.co_qualname)
                if not is_check(*by) and by[0] != "celtk.store.documents":  # documents check their own digests
                    starters.add(by[0])

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return steps, starters


@contextmanager
def counting_reads(out: Path) -> Iterator[Counter[str]]:
    """Count, by path relative to ``out``, every read-only ``os.open`` of a file inside ``out`` while the block runs
    (a directory opened to sync it is not a read)."""
    reads: Counter[str] = Counter()
    real: Callable[..., int] = os.open

    def counted(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_ACCMODE == os.O_RDONLY and holds(os.fsdecode(path), out) and not os.path.isdir(path):
            reads[str(Path(os.fsdecode(path)).resolve().relative_to(out))] += 1
        return real(path, flags, *args, **kwargs)

    os.open = counted
    try:
        yield reads
    finally:
        os.open = real


def returns_into(places: list[str]) -> int:
    """Steps of ``places`` (one place per step) that go back into a place the walk had left for another."""
    returns, left = 0, set()
    for before, now in zip(places, places[1:], strict=False):
        if now != before:
            left.add(before)
            returns += now in left
    return returns


def wing(module: str) -> str:
    """The package a module belongs to (``celtk.store.directory`` -> ``celtk.store``; ``celtk.heads`` itself)."""
    return ".".join(module.split(".")[:2])


def summary(steps: list[tuple[str, str]], starters: set[str]) -> dict[str, Any]:
    modules = list(dict.fromkeys(m for m, _ in steps))
    checks = [f"{m}.{f}" for m, f in steps if is_check(m, f)]
    return {"steps": len(steps), "modules": len(modules), "returns": returns_into([m for m, _ in steps]),
            "wings": len(dict.fromkeys(wing(m) for m in modules)),
            "wing_returns": returns_into([wing(m) for m, _ in steps]), "checks": len(checks),
            "check_starters": sorted(starters), "walk": [f"{m}.{f}" for m, f in steps], "check_steps": checks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the whole walk as JSON")
    parser.add_argument("--stages", action="store_true", help="count the reads of every stage instead")
    args = parser.parse_args()
    if args.stages:
        stage_reads(as_json=args.json)
        return

    import celtk
    from celtk.run import run_screen, run_select
    from tests._support import load_smol_tokenizer, planted_config, planted_model

    with tempfile.TemporaryDirectory() as tmp:
        model, task = planted_model(load_smol_tokenizer(), Path(tmp))
        out = (Path(tmp) / "run").resolve()
        run_screen(planted_config(task), out, model=model)
        climbs: list[str] = []
        with counting_reads(out) as reads:
            result = summary(*walk(out, lambda: run_select(out, p=4, k=2, model=model), climbs))
    result["reads"] = dict(sorted(reads.items()))
    result["climbs"] = climbs
    result["celtk"] = str(Path(celtk.__file__).parent)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{result['celtk']}: run_select's run directory reaches {result['steps']} functions in "
          f"{result['modules']} modules; {result['returns']} steps go back into a module the walk had left "
          f"({result['wing_returns']} into a package left, of {result['wings']} packages); "
          f"{len(result['climbs'])} calls climb into a module that imports the caller's; "
          f"{result['checks']} steps are same-run checks; started outside require/admit from: "
          f"{', '.join(result['check_starters']) or 'none'}")
    for climb in result["climbs"]:
        print("  climb: " + climb)
    print("  reads of each file during run_select: " + ", ".join(f"{name} {n}" for name, n in result["reads"].items()))
    for step in result["walk"]:
        print("  " + step + ("   [check]" if step in result["check_steps"] else ""))


def stage_reads(*, as_json: bool) -> None:
    """Run every stage on the planted tiny Llama in turn and print how often each stage read each file of the run."""
    from celtk.run import (
        run_ablation_kinds,
        run_altscreen,
        run_attributes,
        run_calibration,
        run_eval,
        run_screen,
        run_select,
        run_stability,
        run_test,
        run_transfer,
        variant_grid,
    )
    from tests._support import load_smol_tokenizer, planted_config, planted_model

    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model, task = planted_model(load_smol_tokenizer(), Path(tmp))
        out = (Path(tmp) / "run").resolve()
        os.environ["CELTK_LEDGER"] = str(Path(tmp) / "ledger.jsonl")  # this run's own (celtk.store.ledger)
        stages: list[tuple[str, Callable[[], Any]]] = [
            ("screen", lambda: run_screen(planted_config(task), out, model=model)),
            ("select", lambda: run_select(out, p=4, k=2, model=model)),
            ("altscreen", lambda: run_altscreen(out, method="gradient", p=4, masks=20, model=model)),
            ("test", lambda: run_test(out, model=model, n_boot=50)),
            ("transfer", lambda: run_transfer(out, variant_grid(task, zero_shot=True), model=model, n_boot=50)),
            ("calibrate", lambda: run_calibration(out, null="random-heads", repeats=2, model=model)),
            ("stability", lambda: run_stability(out, resamples=2, p=4, k=2, model=model, n_boot=50)),
            ("ablations", lambda: run_ablation_kinds(out, model=model, n_boot=50)),
            ("attributes", lambda: run_attributes(out, model=model, length=12, batch=2)),
            ("eval", lambda: run_eval(Path(tmp) / "eval", model=model, run=out, heads="L1H2", split="heldout",
                                      batch_size=8)),
        ]
        for name, call in stages:
            with counting_reads(out) as reads:
                call()
            counts[name] = dict(sorted(reads.items()))
    if as_json:
        print(json.dumps(counts, indent=1))
        return
    for name, stage in counts.items():
        most = max(stage.values(), default=0)
        print(f"{name:<11} most reads of one file: {most}   " + ", ".join(f"{f} {n}" for f, n in stage.items()))


if __name__ == "__main__":
    main()
