"""benchmarks/house_metrics.py on a constructed package whose counts are known: string-key lookups, tensor
functions with and without jaxtyping, function-local imports, the import graph and its circles."""
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

_PATH = Path(__file__).parents[2] / "benchmarks" / "house_metrics.py"
_SPEC = importlib.util.spec_from_file_location("house_metrics", _PATH)
assert _SPEC and _SPEC.loader
house_metrics = importlib.util.module_from_spec(_SPEC)
sys.modules["house_metrics"] = house_metrics  # its dataclasses look their module up
_SPEC.loader.exec_module(house_metrics)

FILES = {
    "__init__.py": """
        from typing import TYPE_CHECKING
        if TYPE_CHECKING:
            from pkg import b
    """,
    "a.py": """
        from typing import Literal
        import numpy as np
        from jaxtyping import Float as F, Int
        from torch import Tensor
        from pkg.sub import c

        Mode = Literal["x"]

        def plain(doc: dict) -> str:
            doc["written"] = 1                    # a write, not a lookup
            return doc["read"] + doc.get("other", "") + doc[0]  # two string-key lookups (doc[0] is not)

        def bare(x: np.ndarray) -> Tensor:        # without jaxtyping
            from pkg import b                     # function-local import
            return b

        def typed(x: F[np.ndarray, "n"], y: "Int[Tensor, 'n']") -> list[F[Tensor, "n d"]]:  # with
            return []

        def mixed(x: F[np.ndarray, "n"]) -> tuple[np.ndarray, int]:
            return x, 0

        def hidden(x, y: int) -> int:             # arrays here cannot be seen: an unannotated parameter
            return y

        class Holder:
            values: F[np.ndarray, "n"]
            raw: np.ndarray

            def method(self, m: Literal["x"]) -> "np.ndarray":
                return self.raw
    """,
    "b.py": """
        import pkg.a
        from . import sub
    """,
    "sub/__init__.py": "",
    "sub/c.py": """
        def f():
            import pkg.b
            return pkg.b
    """,
}


def make_package(root: Path) -> Path:
    for name, text in FILES.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "pkg"


def test_counts_on_a_known_package(tmp_path):
    s = house_metrics.summary(house_metrics.measure(make_package(tmp_path)))
    assert s["modules"] == 5
    assert (s["string_key_lookups"], s["string_key_writes"]) == (2, 1)  # Literal["x"] in annotations is not a lookup
    assert s["lookups_by_module"] == {"pkg.a": 2}
    assert (s["tensor_functions"], s["tensor_functions_with_jaxtyping"], s["tensor_functions_without_jaxtyping"],
            s["tensor_functions_mixed"]) == (4, 1, 2, 1)  # typed; bare and method; mixed
    assert s["tensor_functions_without"] == ["pkg.a:bare", "pkg.a:method", "pkg.a:mixed"]
    assert (s["array_fields"], s["array_fields_with_jaxtyping"]) == (2, 1)
    assert s["defs_with_unannotated_parameters"] == 1  # hidden(x, …); self does not count
    assert s["function_local_imports"] == 2 and s["local_imports_by_module"] == {"pkg.a": 1, "pkg.sub.c": 1}
    assert s["import_graph"] == {
        "pkg": {"pkg.b": ["typing"]},
        "pkg.a": {"pkg.b": ["local"], "pkg.sub.c": ["eager"]},
        "pkg.b": {"pkg.a": ["eager"], "pkg.sub": ["eager"]},
        "pkg.sub": {},
        "pkg.sub.c": {"pkg.b": ["local"]},
    }
    assert s["import_edges"] == 6 and s["import_edges_eager"] == 3
    # a -> b -> a, and a -> sub.c -> b (function-local edges count); the package and sub/ sit on no circle
    assert s["import_circles"] == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_script_prints_the_graph_with_its_marks(tmp_path):
    root = make_package(tmp_path)
    done = subprocess.run([sys.executable, str(_PATH), "--root", str(root)], capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert "string-key lookups: 2 (writes beside: 1)" in lines
    assert "  pkg -> pkg.b?" in lines and "  pkg.a -> pkg.b*, pkg.sub.c" in lines and "  pkg.sub -> (none)" in lines
    refused = subprocess.run([sys.executable, str(_PATH), "--root", str(tmp_path)], capture_output=True, text=True)
    assert refused.returncode == 2 and "not a package directory" in refused.stderr
