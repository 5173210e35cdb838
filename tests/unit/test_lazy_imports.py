"""Every function-local import in celtk/ says why it is not at the top of its file.

A function-local import is deliberate when hoisting it would (a) pull a heavy package (torch, transformers,
matplotlib, …) into a module that does not load it otherwise, (b) close an import cycle, or (c) sit in the CLI
(``celtk --help`` loads no model code) or a lazy facade (``celtk``, ``celtk.run``). Anything else belongs at
the top. Read from the syntax trees alone (module-level imports, TYPE_CHECKING blocks excluded), so the test
imports nothing it inspects. ruff's PLC0415 lists the files allowed to hold deliberate ones (pyproject.toml);
this test says, import by import, that each one is."""

from __future__ import annotations

import ast
from pathlib import Path

HEAVY = {"torch", "transformers", "transformer_lens", "datasets", "matplotlib", "gguf", "scipy", "sklearn",
         "einops", "huggingface_hub", "safetensors", "pandas"}
FACADES = {"celtk", "celtk.run", "celtk.models"}
ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", None) == "TYPE_CHECKING"


def _exports(path: Path, package: str) -> dict[str, str]:
    """A lazy facade's ``_EXPORTS`` (name → the module it loads on first use, a submodule's short name or a dotted
    path); empty for a package without one."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets):
            table = ast.literal_eval(node.value)
            return {name: where if "." in where else f"{package}.{where}" for name, where in table.items()}
    return {}


def classify(root: Path, package: str = "celtk") -> list[tuple[str, int, str, list[str]]]:
    """(file, line, statement, reasons) for every function-local import under ``root/package``; no reason
    means it could move to the top."""
    files = {_module_name(p, root): p for p in (root / package).rglob("*.py")}
    packages = {m for m, p in files.items() if p.name == "__init__.py"}

    exports = {module: _exports(files[module], module) for module in packages}

    def loads(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = module.split(".") if module in packages else module.split(".")[:-1]
            base = base[: len(base) - max(node.level - 1, 0)] if node.level else []
            stem = ".".join(base + ([node.module] if node.module else []))
            names = [stem] + [f"{stem}.{a.name}" for a in node.names if f"{stem}.{a.name}" in files]
            # a name taken from a lazy facade loads the module the facade maps it to
            names += [exports.get(stem, {})[a.name] for a in node.names if a.name in exports.get(stem, {})]
        return {".".join(n.split(".")[: i + 1]) for n in names for i in range(len(n.split(".")))}

    top: dict[str, set[str]] = {}
    local: dict[str, list[ast.Import | ast.ImportFrom]] = {}
    for module, path in files.items():
        top[module], local[module] = set(), []

        def visit(node: ast.AST, in_function: bool, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    (local[module].append(child) if in_function else top[module].update(loads(module, child)))
                else:
                    visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(ast.parse(path.read_text()), False)

    def closure(start: set[str]) -> set[str]:
        seen: set[str] = set()
        stack = list(start)
        while stack:
            name = stack.pop()
            if name not in seen:
                seen.add(name)
                stack += top.get(name, ())
        return seen

    def heavy(names: set[str]) -> set[str]:
        return {n.split(".")[0] for n in names} & HEAVY

    found = []
    for module, nodes in local.items():
        own = closure({module})
        for node in nodes:
            reach = closure(loads(module, node))
            reasons = [f"keeps {', '.join(sorted(heavy(reach) - heavy(own)))} out"] if heavy(reach) - heavy(own) else []
            reasons += ["breaks a cycle"] if module in reach else []
            reasons += ["lazy CLI"] if module.startswith(f"{package}.cli") else []
            reasons += ["lazy facade"] if module in FACADES else []
            found.append((str(files[module].relative_to(root)), node.lineno, ast.unparse(node), reasons))
    return found


def test_every_function_local_import_in_celtk_is_deliberate():
    habitual = [f"{path}:{line}: {stmt}" for path, line, stmt, reasons in classify(ROOT) if not reasons]
    assert not habitual, "these imports can move to the top of their file:\n" + "\n".join(habitual)


def test_the_files_ruff_lets_keep_local_imports_are_those_that_need_to():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    allowed = {pattern for pattern, rules in config["per-file-ignores"].items() if "PLC0415" in rules}
    needed = {path for path, *_ in classify(ROOT)}
    assert "PLC0415" in config["select"]
    missing = {p for p in needed if p not in allowed and not p.startswith("celtk/cli/")}
    assert not missing, f"these files hold deliberate local imports but are not listed: {sorted(missing)}"
    stale = {p for p in allowed if p.startswith("celtk/") and "*" not in p and p not in needed}
    assert not stale, f"these files no longer need PLC0415 ignored: {sorted(stale)}"


def test_the_classifier_tells_deliberate_from_habitual(tmp_path):
    pkg = tmp_path / "demo"
    (pkg / "cli").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cli" / "__init__.py").write_text("def main():\n    from demo import light\n")
    (pkg / "heavy.py").write_text("import torch\n")
    (pkg / "light.py").write_text("import json\n\ndef f():\n    from demo import heavy\n    from demo import other\n"
                                  "    import json\n")
    (pkg / "other.py").write_text("from demo import cyc\n")
    (pkg / "cyc.py").write_text("def g():\n    from demo import other\n")
    found = {(path, stmt): reasons for path, _, stmt, reasons in classify(tmp_path, "demo")}
    assert found[("demo/light.py", "from demo import heavy")] == ["keeps torch out"]
    assert found[("demo/light.py", "from demo import other")] == []  # habitual: nothing heavy, no cycle
    assert found[("demo/light.py", "import json")] == []
    assert found[("demo/cyc.py", "from demo import other")] == ["breaks a cycle"]
    assert found[("demo/cli/__init__.py", "from demo import light")] == ["lazy CLI"]
