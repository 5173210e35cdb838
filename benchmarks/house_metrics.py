"""Measures of how the ``celtk/`` tree reads, counted by walking each module's syntax tree (nothing is imported,
so it runs in about a second on any checkout):

    python benchmarks/house_metrics.py                 # this checkout's celtk/
    python benchmarks/house_metrics.py --root OTHER/celtk --json

What is counted, and the rules:

* **String-key lookups**: a subscript read whose key is a string literal (``doc["heads"]``) and a call of
  ``.get`` whose first argument is a string literal (``doc.get("racing")``). Subscripts inside annotations,
  and ``Literal["x"]`` anywhere, are types, not lookups, and are skipped; string-key *writes*
  (``doc["x"] = …``, ``del doc["x"]``) are counted apart.
* **Tensor functions**: every ``def`` (functions, methods, properties, nested functions, private or not) whose
  parameter or return annotations name a tensor or array anywhere inside them: ``Tensor`` / ``torch.Tensor``,
  ``ndarray`` / ``np.ndarray``, or a jaxtyping array type (``Float[…]``, ``Bool[…]``, ``Int[…]``, ``Shaped[…]``,
  … imported from jaxtyping in that module), also inside ``list[…]``, ``tuple[…]``, ``X | None``, ``Callable[…]``.
  One is *with jaxtyping* when every such mention is a jaxtyping type (its shape is named), *without* when none
  is, *mixed* otherwise. A function whose arrays are unannotated, or hidden inside a dataclass it takes or
  returns, cannot be seen: defs with an unannotated parameter are counted beside (``self``/``cls`` excepted),
  and dataclass-style class fields that hold an array are counted like functions.
* **Function-local imports**: ``import`` statements whose nearest enclosing scope is a function.
* **Import circles**: the strongly connected components of more than one module in the import graph below, every
  edge counted (function-local and ``TYPE_CHECKING`` ones too: each still ties the modules' designs together).
* **Import graph**: one node per module (a package is its ``__init__``); an edge A -> B when A imports B
  (``from celtk.x import y`` is an edge to ``celtk.x.y`` where that is a module, else to ``celtk.x``; relative
  imports resolved). In the listing, ``B*`` marks an edge made only by function-local imports and ``B?`` one
  made only under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

BARE_ARRAYS = {"Tensor", "ndarray"}  # matched as a name or the last part of an attribute (torch.Tensor, np.ndarray)
JAXTYPING_PREFIXES = ("Float", "BFloat", "Int", "UInt", "Bool", "Complex", "Inexact", "Integer", "Num", "Real",
                      "Shaped", "Key")


@dataclass
class FunctionShape:
    module: str
    name: str
    arrays: int = 0  # array mentions in the signature
    jaxtyped: int = 0  # of which jaxtyping types

    @property
    def kind(self) -> str:
        return "with" if self.jaxtyped == self.arrays else "without" if self.jaxtyped == 0 else "mixed"


@dataclass
class ModuleFacts:
    name: str
    reads: int = 0
    writes: int = 0
    local_imports: int = 0
    functions: list[FunctionShape] = field(default_factory=list)
    fields: list[FunctionShape] = field(default_factory=list)
    unannotated: int = 0  # defs with a parameter lacking an annotation
    imports: dict[str, set[str]] = field(default_factory=dict)  # target -> {"eager", "local", "typing"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _jaxtyping_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "jaxtyping":
            names |= {a.asname or a.name for a in node.names if a.name.startswith(JAXTYPING_PREFIXES)}
    return names


def _array_mentions(annotation: ast.AST | None, jaxtyped: set[str]) -> tuple[int, int]:
    """(array mentions, of which jaxtyping) in one annotation; a quoted annotation is parsed first."""
    if annotation is None:
        return 0, 0
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return 0, 0
    arrays = typed = 0
    skip: set[int] = set()
    for node in ast.walk(annotation):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in jaxtyped:
            arrays, typed = arrays + 1, typed + 1
            skip |= {id(n) for n in ast.walk(node.slice)}  # the array type inside Float[Tensor, …] is not bare
        elif (isinstance(node, ast.Name) and node.id in BARE_ARRAYS) or \
                (isinstance(node, ast.Attribute) and node.attr in BARE_ARRAYS):
            arrays += 1
    return arrays, typed


def _annotation_nodes(tree: ast.Module) -> set[int]:
    """ids of every node inside an annotation (subscripts there are types, not lookups)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        roots: list[ast.AST | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            roots += [x.annotation for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if x]
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        for root in roots:
            if root is not None:
                inside |= {id(n) for n in ast.walk(root)}
    return inside


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Walker(ast.NodeVisitor):
    def __init__(self, facts: ModuleFacts, jaxtyped: set[str], annotations: set[int], is_package: bool,
                 modules: set[str], package: str):
        self.facts, self.jaxtyped, self.annotations = facts, jaxtyped, annotations
        self.is_package, self.modules, self.package = is_package, modules, package
        self.scopes: list[str] = []  # "function" / "class"
        self.typing_block = 0

    # string-key lookups
    def visit_Subscript(self, node: ast.Subscript) -> None:
        literal = (isinstance(node.value, ast.Name) and node.value.id == "Literal") or \
            (isinstance(node.value, ast.Attribute) and node.value.attr == "Literal")
        if id(node) not in self.annotations and not literal and _is_str(node.slice):
            if isinstance(node.ctx, ast.Load):
                self.facts.reads += 1
            else:
                self.facts.writes += 1
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args and _is_str(node.args[0]):
            self.facts.reads += 1
        self.generic_visit(node)

    # functions and fields
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
        shape = FunctionShape(self.facts.name, node.name)
        for annotation in [p.annotation for p in params] + [node.returns]:
            arrays, typed = _array_mentions(annotation, self.jaxtyped)
            shape.arrays, shape.jaxtyped = shape.arrays + arrays, shape.jaxtyped + typed
        if shape.arrays:
            self.facts.functions.append(shape)
        if any(p.annotation is None and p.arg not in ("self", "cls") for p in params):
            self.facts.unannotated += 1
        self.scopes.append("function")
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.scopes.append("function")
        self.generic_visit(node)
        self.scopes.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                arrays, typed = _array_mentions(item.annotation, self.jaxtyped)
                if arrays:
                    self.facts.fields.append(FunctionShape(self.facts.name, f"{node.name}.{item.target.id}",
                                                           arrays, typed))
        self.scopes.append("class")
        self.generic_visit(node)
        self.scopes.pop()

    # imports
    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node):
            self.typing_block += 1
            for child in node.body:
                self.visit(child)
            self.typing_block -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _kind(self) -> str:
        if "function" in self.scopes:
            return "local"
        return "typing" if self.typing_block else "eager"

    def _edge(self, target: str) -> None:
        if target == self.package or target.startswith(self.package + "."):
            while target not in self.modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in self.modules and target != self.facts.name:
                self.facts.imports.setdefault(target, set()).add(self._kind())

    def visit_Import(self, node: ast.Import) -> None:
        if "function" in self.scopes:
            self.facts.local_imports += 1
        for alias in node.names:
            self._edge(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if "function" in self.scopes:
            self.facts.local_imports += 1
        base = _resolve(self.facts.name, self.is_package, node)
        for alias in node.names:
            self._edge(f"{base}.{alias.name}" if f"{base}.{alias.name}" in self.modules else base)


def measure(root: Path) -> list[ModuleFacts]:
    """Facts about every module under ``root`` (a package directory such as ``celtk/``)."""
    root = root.resolve()
    paths = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    modules = {module_name(p, root) for p in paths}
    out = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        facts = ModuleFacts(module_name(path, root))
        _Walker(facts, _jaxtyping_names(tree), _annotation_nodes(tree), path.name == "__init__.py", modules,
                root.name).visit(tree)
        out.append(facts)
    return out


def summary(facts: list[ModuleFacts]) -> dict:
    functions = [f for m in facts for f in m.functions]
    fields = [f for m in facts for f in m.fields]
    kinds = Counter(f.kind for f in functions)
    field_kinds = Counter(f.kind for f in fields)
    edges = {m.name: {t: sorted(k) for t, k in sorted(m.imports.items())} for m in facts}
    by_module = sorted(((m.name, sum(1 for f in m.functions if f.kind == "with"), len(m.functions)) for m in facts
                        if m.functions), key=lambda r: r[0])
    return {
        "modules": len(facts),
        "string_key_lookups": sum(m.reads for m in facts),
        "string_key_writes": sum(m.writes for m in facts),
        "lookups_by_module": {m.name: m.reads for m in sorted(facts, key=lambda m: (-m.reads, m.name)) if m.reads},
        "tensor_functions": len(functions),
        "tensor_functions_with_jaxtyping": kinds["with"],
        "tensor_functions_without_jaxtyping": kinds["without"],
        "tensor_functions_mixed": kinds["mixed"],
        "tensor_functions_by_module": {name: [typed, total] for name, typed, total in by_module},
        "tensor_functions_without": sorted(f"{f.module}:{f.name}" for f in functions if f.kind != "with"),
        "array_fields": len(fields),
        "array_fields_with_jaxtyping": field_kinds["with"],
        "defs_with_unannotated_parameters": sum(m.unannotated for m in facts),
        "function_local_imports": sum(m.local_imports for m in facts),
        "local_imports_by_module": {m.name: m.local_imports
                                    for m in sorted(facts, key=lambda m: (-m.local_imports, m.name))
                                    if m.local_imports},
        "import_edges": sum(len(t) for t in edges.values()),
        "import_edges_eager": sum(1 for t in edges.values() for k in t.values() if "eager" in k),
        "import_circles": circles(edges),
        "import_graph": edges,
    }


def circles(edges: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The import graph's strongly connected components of two or more modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges.get(root, {})))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges.get(target, {}))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def render(s: dict, top: int = 12) -> str:
    def tops(counts: dict[str, int]) -> str:
        return ", ".join(f"{name} {n}" for name, n in list(counts.items())[:top])

    lines = [
        f"modules: {s['modules']}",
        f"string-key lookups: {s['string_key_lookups']} (writes beside: {s['string_key_writes']})",
        f"  most: {tops(s['lookups_by_module'])}",
        f"tensor/array functions: {s['tensor_functions']}: with jaxtyping {s['tensor_functions_with_jaxtyping']}, "
        f"without {s['tensor_functions_without_jaxtyping']}, mixed {s['tensor_functions_mixed']}",
        "  by module (with/all): " + ", ".join(f"{name} {typed}/{total}"
                                            for name, (typed, total) in s["tensor_functions_by_module"].items()),
        f"array-holding class fields: {s['array_fields']}, with jaxtyping {s['array_fields_with_jaxtyping']}",
        f"defs with an unannotated parameter (arrays there are invisible to the count): "
        f"{s['defs_with_unannotated_parameters']}",
        f"function-local imports: {s['function_local_imports']}",
        f"  most: {tops(s['local_imports_by_module'])}",
        f"import circles: {len(s['import_circles'])}"
        + "".join(f"\n  {' <-> '.join(c)}" for c in s["import_circles"]),
        f"import graph: {s['modules']} modules, {s['import_edges']} edges ({s['import_edges_eager']} at import time; "
        "B* = only function-local, B? = only under TYPE_CHECKING)",
    ]
    for module, targets in s["import_graph"].items():
        marks = {("local",): "*", ("typing",): "?", ("local", "typing"): "*"}
        shown = [t + marks.get(tuple(k), "") for t, k in targets.items()]
        lines.append(f"  {module} -> {', '.join(shown) if shown else '(none)'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1] / "celtk",
                        help="the package directory to measure (default: this checkout's celtk/)")
    parser.add_argument("--json", action="store_true", help="print every figure as JSON")
    args = parser.parse_args(argv)
    if not (args.root / "__init__.py").is_file():
        parser.error(f"{args.root} is not a package directory (no __init__.py); give --root PATH/celtk")
    s = summary(measure(args.root))
    sys.stdout.write((json.dumps(s, indent=1) if args.json else render(s)) + "\n")


if __name__ == "__main__":
    main()
