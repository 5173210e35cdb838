"""What the README and the docs/ pages name must exist: mkdocs --strict fails on a broken link
between pages; these tests cover what it does not see.

- every repository path a page names (`celtk/store/heldout.py`, `benchmarks/peers.py`, in prose, code or a link)
  exists;
- every `celtk.xxx` dotted name a page writes in code resolves to a module or an attribute of one;
- every relative link of the README reaches a file, and a heading there when it names one.

Each failure lists every missing name with its page, so a module moved without its docs is one run away."""

from __future__ import annotations

import importlib
import re
import unicodedata
from pathlib import Path

from _markdown import DOCS, README, ROOT, pages

# A path the pages name starts with one of these; an all-capitals component is a placeholder (MODEL.json, DIR).
ROOTS = ("celtk", "tests", "benchmarks", "examples", "docs", ".ci")
_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(re.escape(r) for r in ROOTS)})/[\w./*-]*)")
_PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*(\.\w+)?")
_CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
_DOTTED = re.compile(r"(?<![\w./-])celtk(?:\.[A-Za-z_]\w*)+")
_LINK = re.compile(r"\]\(([^)\s]+)\)")

# Names that land with another branch: the test says when one resolves, so the entry is deleted.
LANDING: dict[str, str] = {}  # names the docs may use before they land in the tree


def _named_paths(path: Path) -> set[str]:
    names = set()
    for found in _PATH.findall(path.read_text(encoding="utf-8")):
        found = found.rstrip(".")
        if re.fullmatch(r"\w+/\w", found):  # a rate ("80 examples/s"), not a path
            continue
        if not any(_PLACEHOLDER.fullmatch(part) for part in found.split("/")):
            names.add(found)
    return names


def _exists(name: str) -> bool:
    return bool(list(ROOT.glob(name))) if "*" in name else (ROOT / name).exists()


def test_every_repository_path_the_pages_name_exists():
    missing = [f"{page.relative_to(ROOT)}: {name}" for page in pages() for name in sorted(_named_paths(page))
               if not _exists(name)]
    assert not missing, "paths named in the docs that the repository lacks:\n" + "\n".join(missing)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attribute in parts[cut:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            return False
        return True
    return False


def _dotted_names(path: Path) -> set[str]:
    return {name for span in _CODE.findall(path.read_text(encoding="utf-8")) for name in _DOTTED.findall(span)}


def test_every_celtk_name_in_code_resolves():
    named = {(page.relative_to(ROOT), name) for page in pages() for name in _dotted_names(page)}
    assert len({name for _, name in named}) >= 20  # the pages do name the library; a broken regex would find none
    missing = sorted(f"{page}: {name}" for page, name in named if name not in LANDING and not _resolves(name))
    assert not missing, "celtk names in the docs that do not resolve (moved or renamed?):\n" + "\n".join(missing)
    landed = sorted(name for name in LANDING if _resolves(name))
    assert not landed, f"now in the tree, so delete them from LANDING: {landed}"


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension (what mkdocs uses) gives a heading."""
    text = unicodedata.normalize("NFKD", re.sub(r"`", "", heading)).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+\s+(.*?)\s*$", text, re.M)}


def test_the_readme_links_reach_files_and_headings():
    broken = []
    for target in _LINK.findall(README.read_text(encoding="utf-8")):
        if re.match(r"\w+:", target):  # http:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (README.parent / file) if file else README
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{target}: no heading '#{anchor}' in {path.relative_to(ROOT)}")
    assert not broken, "README links that lead nowhere:\n" + "\n".join(broken)


def test_the_readme_links_every_docs_page():
    linked = {Path(t.partition("#")[0]).name for t in _LINK.findall(README.read_text(encoding="utf-8"))}
    unlinked = sorted(p.name for p in DOCS.glob("*.md") if p.name not in linked)
    assert not unlinked, f"docs pages the README's 'Where to read more' does not reach: {unlinked}"


def test_the_checks_see_what_they_check(tmp_path):
    """The finders on a made-up page: a wrong path, a placeholder, a rate; wrong names; headings' anchors."""
    page = ROOT / "docs" / "index.md"
    assert "celtk/store/heldout.py" in {n for p in pages() for n in _named_paths(p)}
    assert _resolves("celtk.errors.CeltkError") and _resolves("celtk.run")
    assert not _resolves("celtk.errors.NoSuchError") and not _resolves("celtk.no_such_module")
    assert _slug("Set-up: two commands") == "set-up-two-commands"
    assert _slug("The theory (`celtk theory`)") == "the-theory-celtk-theory"
    assert "set-up-two-commands" in _anchors(page)
    (tmp_path / "page.md").write_text("see `celtk/nowhere.py`, examples/configs/MODEL.json, 5 examples/s, tests/unit.")
    assert _named_paths(tmp_path / "page.md") == {"celtk/nowhere.py", "tests/unit"}
    assert _DOTTED.findall("`celtk.nowhere.thing(x)`") == ["celtk.nowhere.thing"]
