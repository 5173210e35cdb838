"""The house's import contracts, read from every module's syntax tree (nothing is imported):

* **Floors.** ``top > cli > run > {screening, search, probe, report, circuits, planning, analysis} > store >
  evaluation > ablation > {models, tasks} > base``: a module imports only rooms on floors below its own and its own
  room. Rooms sharing a floor are independent except for the arrows named in ``SIBLING_ARROWS``.
* **Nothing imports the CLI** (only the ``celtk`` entry points above it), and nothing imports the ``celtk`` facade.
* **The theory stands alone**: it imports only the base floor and the store (its results are documents; nothing
  model-side), and only the top floors import it.
* **No cross-package private imports**: a ``_name`` (module or attribute) is used only inside the package that holds it.

Every import counts: module level, under ``TYPE_CHECKING``, and function-local (the CLI's deliberate lazy imports
included). A contract the code breaks and that could not be fixed yet is listed in ``EXCEPTIONS`` with its reason;
the test fails on any violation not listed and on any listed exception that no longer occurs.
"""

from __future__ import annotations

import ast
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

import pytest

CELTK = Path(__file__).resolve().parents[2] / "celtk"

# room -> the modules it holds (a module belongs to the room with the longest matching prefix)
ROOMS: dict[str, tuple[str, ...]] = {
    "top": ("celtk", "celtk.__main__"),
    "cli": ("celtk.cli",),
    "run": ("celtk.run",),
    "screening": ("celtk.screening",),
    "search": ("celtk.search",),
    "probe": ("celtk.probe",),
    "report": ("celtk.report",),
    "circuits": ("celtk.circuits",),
    "planning": ("celtk.planning",),
    "analysis": ("celtk.analysis",),
    "store": ("celtk.store",),
    "evaluation": ("celtk.evaluation",),
    "ablation": ("celtk.ablation", "celtk.ablation_kinds", "celtk.ablation_hooks"),
    "models": ("celtk.models",),
    "tasks": ("celtk.tasks",),
    "base": ("celtk.errors", "celtk.heads", "celtk.stats", "celtk.boundary", "celtk._version", "celtk.registry",
             "celtk.store.files"),
    "theory": ("celtk.theory",),
}
FLOORS: list[set[str]] = [
    {"top"},
    {"cli"},
    {"run"},
    {"screening", "search", "probe", "report", "circuits", "planning", "analysis"},
    {"store"},
    {"evaluation"},
    {"ablation"},
    {"models", "tasks"},
    {"base"},
]
# arrows between rooms on one floor; search is pure (numpy only), so any room on its floor may order heads with it
SIBLING_ARROWS: set[tuple[str, str]] = {
    ("screening", "search"),  # rankers order heads (rank); racing uses the ranking key
    ("circuits", "search"),  # critical/enhancing heads by the ranking key
    ("report", "analysis"),  # the report shows the analysis documents
    ("planning", "screening"),  # plan prices the prefix tree
}
THEORY_MAY_IMPORT = {"theory", "base", "store"}
THEORY_IMPORTED_BY = {"top", "cli"}

# (importer room or module, imported room or module) -> why it is allowed for now. Each one breaks a contract above.
EXCEPTIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Edge:
    importer: str  # module (a package is its __init__)
    target: str  # the imported module, within the package
    names: tuple[str, ...]  # names taken from it (from-imports)
    line: int
    local: bool  # inside a function

    def where(self) -> str:
        return f"{self.importer}:{self.line}{' (function-local)' if self.local else ''}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def edges(root: Path) -> list[Edge]:
    """Every import of a module of ``root``'s package by a module of it, wherever the import statement sits."""
    paths = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    modules = {module_name(p, root): p for p in paths}
    package = root.name
    out: list[Edge] = []

    def inside(target: str) -> str | None:
        if target != package and not target.startswith(package + "."):
            return None
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        return target if target in modules else None

    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        local_ids = {id(n) for f in functions for n in ast.walk(f) if n is not f}
        for node in ast.walk(tree):
            local = id(node) in local_ids
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = inside(alias.name)
                    if target:
                        out.append(Edge(name, target, (), node.lineno, local))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    submodule = inside(f"{source}.{alias.name}")
                    if submodule == f"{source}.{alias.name}":  # `from pkg import module`
                        out.append(Edge(name, submodule, (), node.lineno, local))
                    elif (target := inside(source)) is not None:
                        out.append(Edge(name, target, (alias.name,), node.lineno, local))
    return out


def room_of(module: str, rooms: dict[str, tuple[str, ...]]) -> str:
    best, length = "", -1
    for room, prefixes in rooms.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length and \
                    not (prefix == module.split(".")[0] and module != prefix):  # the facade holds only itself
                best, length = room, len(prefix)
    if not best:
        raise AssertionError(f"{module} is in no room: add it to ROOMS")
    return best


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(root: Path, rooms: dict[str, tuple[str, ...]], floors: list[set[str]],
               sibling_arrows: set[tuple[str, str]], *, cli: str = "cli", theory: str | None = "theory",
               theory_may_import: AbstractSet[str] = frozenset(), theory_imported_by: AbstractSet[str] = frozenset(),
               ) -> dict[tuple[str, str], list[str]]:
    """Broken contracts: (importer module, target module) -> what each breaks, with where."""
    found: dict[tuple[str, str], list[str]] = {}
    floor = {room: i for i, rooms_ in enumerate(floors) for room in rooms_}
    all_modules = {module_name(p, root) for p in root.rglob("*.py") if "__pycache__" not in p.parts}
    packages = {module_name(p, root) for p in root.rglob("__init__.py")}
    for edge in edges(root):
        a, b = room_of(edge.importer, rooms), room_of(edge.target, rooms)
        problems = []
        if a != b:
            if b == theory and a not in theory_imported_by:
                problems.append(f"{a} imports the theory (only {', '.join(sorted(theory_imported_by))} may)")
            elif a == theory and b not in theory_may_import:
                problems.append(f"the theory imports {b} (it may import only {', '.join(sorted(theory_may_import))})")
            elif b == cli and floor.get(a, len(floors)) >= floor[cli]:
                problems.append(f"{a} imports the CLI (nothing below it may)")
            elif a in floor and b in floor:
                if floor[b] < floor[a]:
                    problems.append(f"{a} (floor {floor[a]}) imports {b} from a floor above (floor {floor[b]})")
                elif floor[b] == floor[a] and (a, b) not in sibling_arrows:
                    problems.append(f"{a} imports its sibling {b} (no arrow {a} -> {b} on floor {floor[a]})")
        # private: a `_part` of the target's path, or a `_name` taken from it, used outside the package holding it
        parts = edge.target.split(".")
        for i, part in enumerate(parts):
            if _private(part) and not _within(edge.importer, ".".join(parts[:i])):
                problems.append(f"imports the private module {edge.target} from outside {'.'.join(parts[:i])}")
                break
        holder = edge.target if edge.target in packages else edge.target.rsplit(".", 1)[0]
        for name in edge.names:
            if _private(name) and f"{edge.target}.{name}" not in all_modules and not _within(edge.importer, holder):
                problems.append(f"imports the private name {edge.target}.{name} from outside {holder}")
        for problem in problems:
            lines = found.setdefault((edge.importer, edge.target), [])
            if f"{edge.where()}: {problem}" not in lines:  # one line per statement, not per imported name
                lines.append(f"{edge.where()}: {problem}")
    return found


def excused(key: tuple[str, str], exceptions: dict[tuple[str, str], str], rooms: dict[str, tuple[str, ...]]
            ) -> tuple[str, str] | None:
    """The exception (by module or by room, the importer's module path may be deeper) covering ``key``."""
    importer, target = key
    for a, b in exceptions:
        a_ok = a == room_of(importer, rooms) if a in rooms else _within(importer, a)
        b_ok = b == room_of(target, rooms) if b in rooms else _within(target, b)
        if a_ok and b_ok:
            return a, b
    return None


def test_celtk_keeps_its_import_contracts():
    found = violations(CELTK, ROOMS, FLOORS, SIBLING_ARROWS, theory_may_import=THEORY_MAY_IMPORT,
                       theory_imported_by=THEORY_IMPORTED_BY)
    unexcused = [line for key, lines in sorted(found.items()) if not excused(key, EXCEPTIONS, ROOMS) for line in lines]
    assert not unexcused, "import contracts broken:\n" + "\n".join(unexcused)
    used = {excused(key, EXCEPTIONS, ROOMS) for key in found}
    stale = sorted(set(EXCEPTIONS) - used)
    assert not stale, f"these exceptions no longer occur; remove them from EXCEPTIONS: {stale}"


def test_every_sibling_arrow_is_used():
    """An arrow between rooms of one floor stays listed only while some import takes it (the page says each one is
    used today)."""
    taken = {(room_of(e.importer, ROOMS), room_of(e.target, ROOMS)) for e in edges(CELTK)}
    unused = sorted(SIBLING_ARROWS - taken)
    assert not unused, f"no import takes these arrows any more; remove them from SIBLING_ARROWS: {unused}"


def test_every_celtk_module_has_a_room_on_a_floor_or_is_the_theory():
    on_floors = set().union(*FLOORS) | {"theory"}
    for path in CELTK.rglob("*.py"):
        assert room_of(module_name(path, CELTK), ROOMS) in on_floors


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_checker_finds_each_kind_of_broken_contract(tmp_path):
    """A small package that breaks each contract once (an upward import made function-local, a sibling without an
    arrow, a relative import of the CLI, a private module and a private name from another package, the theory
    importing model-side and being imported) and keeps each once; the checker reports exactly the broken ones."""
    root = _write(tmp_path, {
        "pkg/__init__.py": "from pkg.cli import main\n",
        "pkg/cli/__init__.py": "from pkg.high import run\nfrom pkg.theory import fit\n",
        "pkg/high.py": "from pkg.low import _helper\nfrom pkg.base import thing\n\ndef run():\n"
                       "    from pkg.side import x\n",
        "pkg/side.py": "import pkg.high\n",
        "pkg/low/__init__.py": "from pkg.low._impl import _helper\n\ndef up():\n    from .. import high\n",
        "pkg/low/_impl.py": "from ..cli import main\n_helper = 1\n",
        "pkg/base.py": "thing = 1\n",
        "pkg/theory/__init__.py": "from pkg.base import thing\nfrom pkg.low import up\n\ndef fit():\n    pass\n",
        "pkg/other.py": "from pkg.theory import fit\nfrom pkg.low._impl import _helper\n",
    })
    rooms: dict[str, tuple[str, ...]] = {"top": ("pkg",), "cli": ("pkg.cli",),
 "high": ("pkg.high",), "side": ("pkg.side",),
             "other": ("pkg.other",), "low": ("pkg.low",), "base": ("pkg.base",), "theory": ("pkg.theory",)}
    floors = [{"top"}, {"cli"}, {"high", "side", "other"}, {"low"}, {"base"}]
    found = violations(root, rooms, floors, {("high", "side")}, theory_may_import={"theory", "base"},
                       theory_imported_by={"top", "cli"})
    assert sorted(found) == [
        ("pkg.high", "pkg.low"),  # `_helper`, private to pkg.low
        ("pkg.low", "pkg.high"),  # upward, function-local, relative
        ("pkg.low._impl", "pkg.cli"),  # the CLI, by a relative import
        ("pkg.other", "pkg.low._impl"),  # a private module and a private name of another package
        ("pkg.other", "pkg.theory"),  # only top and cli may import the theory
        ("pkg.side", "pkg.high"),  # siblings with no arrow side -> high
        ("pkg.theory", "pkg.low"),  # the theory imports model-side
    ]
    assert "function-local" in found[("pkg.low", "pkg.high")][0] and "floor 3" in found[("pkg.low", "pkg.high")][0]
    assert len(found[("pkg.other", "pkg.low._impl")]) == 2  # the module and the name
    # the room-level exception covers a deeper module; one that matches nothing is reported as stale
    assert excused(("pkg.low._impl", "pkg.cli"), {("low", "cli"): "why"}, rooms) == ("low", "cli")
    assert excused(("pkg.side", "pkg.high"), {("low", "cli"): "why"}, rooms) is None


@pytest.mark.parametrize("package", ["celtk.search", "celtk.registry", "celtk.screening.registry",
                                     "celtk.search.registry", "celtk.run.registry", "celtk.store"])
def test_torch_free_packages_import_without_torch(package):
    """The search wing (scores, Algorithm 1, strategies, stability, nulls), the run store and every registry import
    without torch, so the CLI builds its choices, a notebook can rank heads and the report reads a run without
    loading it."""
    import subprocess
    import sys

    code = (f"import sys, importlib, pkgutil; import {package} as p\n"
            "for m in pkgutil.walk_packages(getattr(p, '__path__', []), p.__name__ + '.'): "
            "importlib.import_module(m.name)\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=CELTK.parent, env={"PYTHONPATH": str(CELTK.parent), "OMP_NUM_THREADS": "1"})
    assert out.stdout.strip() == "False", f"importing {package} imported torch"
