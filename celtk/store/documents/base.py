"""Typed result documents: what each stage writes to a run directory, as frozen dataclasses.

Each document round-trips through JSON (``to_json`` / ``from_json``) and carries
``schema_version``. One unit per field name in every file: ``gain`` is a fraction of the
examples (accuracy points / 100), ``gain_count`` a number of examples; ``fixes`` and
``damage`` are numbers of examples.

A new document is one dataclass here: fields in the order they appear in the file, nested
rows marked with :func:`rows`, fields written only when set marked with :func:`optional`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from celtk.errors import ArgumentError, HeadError, RunStoreError
from celtk.store.documents.codecs import SCHEMA_VERSION, _check, _map, _where, short
from celtk.store.documents.digests import book_digests, check_recorded, write_recorded
from celtk.store.files import (
    bytes_digest,
    dumps,
    parse_json,
    read_bounded,
    write_json,
)

R = TypeVar("R", bound="Record")
D = TypeVar("D", bound="Document")


def _dump(value: object) -> object:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return value


@dataclass(frozen=True)
class Record:
    """A JSON object with a fixed set of keys, written in field order."""

    def __post_init__(self) -> None:
        for f in fields(self):
            codec = f.metadata.get("codec")
            if codec is not None and not _check(getattr(self, f.name), codec, f.metadata["depth"]):
                raise ArgumentError(f"{type(self).__name__}.{f.name} holds parsed values ({codec.kind.__name__}"
                                f"{_where(f.metadata['depth'], ', ')}), got {short(getattr(self, f.name))}; "
                                f"the file's form ({codec.shape}) is read by {type(self).__name__}.from_json.")

    def to_json(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if (f.metadata.get("omit_none") and value is None) or not f.metadata.get("stored", True):
                continue
            codec = f.metadata.get("codec")
            out[f.name] = _map(codec.encode, value, f.metadata["depth"]) if codec else _dump(value)
        return out

    @classmethod
    def from_json(cls: type[R], data: dict[str, Any], where: str = "") -> R:
        known = {f.name: f for f in fields(cls) if f.metadata.get("stored", True)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise RunStoreError(f"{where or cls.__name__}: unknown field(s) {', '.join(unknown)}; it was written by a "
                                f"different celtk version. Rerun the stage that writes it.")
        values = {}
        for name, value in data.items():
            kind, single = known[name].metadata.get("rows"), known[name].metadata.get("record")
            codec = known[name].metadata.get("codec")
            if codec is not None:
                try:
                    values[name] = _map(codec.decode, value, known[name].metadata["depth"])
                except (HeadError, RunStoreError, TypeError, ValueError) as error:
                    raise RunStoreError(f"{where or cls.__name__}: field {name!r} should hold {codec.shape}"
                                        f"{_where(known[name].metadata['depth'], ' (', ')')}, got "
                                        f"{short(value)} ({error}); it was not written by celtk. "
                                        "Rerun the stage that writes it.") from None
                continue
            values[name] = ([kind.from_json(v, where) for v in value] if kind and value is not None
                            else single.from_json(value, where) if single and value is not None else value)
        # every field but those left out when None (optional) is in every file celtk writes
        missing = [name for name, f in known.items() if name not in data and not f.metadata.get("omit_none")]
        if missing:
            raise RunStoreError(f"{where or cls.__name__} lacks {', '.join(missing)}, which celtk writes in every "
                                f"{cls.__name__}: it was written by another celtk version, or edited. Rerun the stage "
                                f"that writes it into a new run directory with this celtk version.")
        try:
            return cls(**values)
        except TypeError as error:
            raise RunStoreError(f"{where or cls.__name__} is incomplete ({error}); "
                                "rerun the stage that writes it.") from None


@dataclass(frozen=True, kw_only=True)
class Document(Record):
    """A whole result file: a record with a schema version, saved as ``FILE`` in a run directory."""

    FILE: ClassVar[str] = ""
    # written with its digest (save): read only with it. False: a document celtk writes beside no run's digests
    DIGESTED: ClassVar[bool] = True
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def from_json(cls: type[D], data: dict[str, Any], where: str = "") -> D:
        stored = next(f for f in fields(cls) if f.name == "schema_version").metadata.get("stored", True)
        if stored and "schema_version" not in data:
            raise RunStoreError(f"{where or cls.FILE} has no schema_version, which celtk writes in every run document: "
                                "it was written by another celtk version, or edited. Rerun the stage that writes it "
                                "into a new run directory with this celtk version.")
        version = data.get("schema_version", SCHEMA_VERSION)  # a document that writes no version has layout 1
        if version != SCHEMA_VERSION:
            raise RunStoreError(f"{where or cls.FILE} has schema version {version}; this celtk reads version "
                                f"{SCHEMA_VERSION}. Rerun the stage with this version.")
        return super().from_json(data, where)

    def file_name(self) -> str:
        """The file this document is saved as by default (``FILE``; per null or method for some)."""
        return self.FILE

    def save(self, directory: Path, name: str | None = None) -> None:
        """Write the file atomically, then record its SHA-256 in ``digests.json`` (see :func:`check_digest`), then
        what it keeps beside (:meth:`save_beside`). In a run directory a stage writes through
        :meth:`celtk.store.directory.RunDirectory.save` instead, which keeps what it has read up to date."""
        path = Path(directory) / (name or self.file_name())
        write_recorded(path, self.encode(), book_digests(path.parent))
        for beside, value in self.beside().items():
            write_json(Path(directory) / beside, value)

    def encode(self) -> bytes:
        """The bytes :meth:`save` writes (strict JSON, UTF-8)."""
        return dumps(self.to_json()).encode("utf-8")

    def beside(self) -> dict[str, object]:
        """What this document keeps beside its file, undigested: file name → JSON value (none; an altscreen's
        timing)."""
        return {}

    @classmethod
    def load(cls: type[D], directory: Path, name: str | None = None) -> D:
        """Read the file, refusing one changed since celtk wrote it (:func:`check_digest`)."""
        path = Path(directory) / (name or cls.FILE)
        data = read_bounded(path)
        value = parse_json(path, data)  # a damaged file is named as such first
        return cls.verified(path, value, bytes_digest(data), book_digests(path.parent))

    @classmethod
    def verified(cls: type[D], path: Path, value: Any, digest: str, digests: dict[str, str] | None) -> D:
        """The document whose JSON ``value`` was read from ``path`` as bytes of SHA-256 ``digest``, refused unless
        ``digests`` (the directory's ``digests.json``; ``None``: it has none) records that digest for it
        (:func:`check_recorded`)."""
        check_recorded(path, digest, digests, required=cls.DIGESTED)
        return cls.from_json(value, str(path))
