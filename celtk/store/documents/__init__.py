"""Typed result documents: what each stage writes to a run directory, as frozen dataclasses, one module per family.

* :mod:`~celtk.store.documents.codecs` — per-example correctness bits, the codecs of parsed values, field markers
* :mod:`~celtk.store.documents.base` — :class:`Record` and :class:`Document` (JSON round trip, save and load)
* :mod:`~celtk.store.documents.digests` — ``digests.json``: a document is read back only if celtk wrote its bytes
* :mod:`~celtk.store.documents.screen` — ``screen.json``, ``altscreen.json``
* :mod:`~celtk.store.documents.selection` — ``selection.json`` (the held-out contract, the looks), ``diagnostics.json``,
  ``stability.json``
* :mod:`~celtk.store.documents.heldout` — ``test.json``, ``ablation-kinds.json``, ``eval.json``
* :mod:`~celtk.store.documents.transfer` — ``transfer.json``, ``calibration.json``

Every name is re-exported here: ``from celtk.store.documents import ScreenDocument``.
"""

from celtk.store.documents.base import Document, Record
from celtk.store.documents.codecs import (
    CORRECTNESS,
    DISCOVERY_GAIN_NOTE,
    HEAD,
    HEADS,
    KEYS,
    MODEL,
    MODEL_NAME,
    SCHEMA_VERSION,
    SET_NAME,
    SPLITS,
    TASK,
    TASK_NAME,
    UNSCORED,
    Codec,
    Correctness,
    ModelName,
    ModelRecord,
    TaskName,
    TaskRecord,
    coded,
    optional,
    optional_record,
    record,
    rows,
    short,
)
from celtk.store.documents.digests import (
    DIGESTS,
    book_digests,
    check_digest,
    check_recorded,
    parse_digests,
    read_digests,
    write_recorded,
)
from celtk.store.documents.heldout import (
    AblationKindsDocument,
    EvalDocument,
    EvalExample,
    HeldBack,
    KindRow,
    TestDocument,
    TestExample,
)
from celtk.store.documents.screen import AltscreenDocument, RacingRecord, ScreenDocument, ScreenRow
from celtk.store.documents.selection import (
    DiagnosticsDocument,
    HeldoutContract,
    Interaction,
    LookRecord,
    RankedSet,
    SelectionDocument,
    StabilityDocument,
    StableSelection,
)
from celtk.store.documents.transfer import (
    CalibrationDocument,
    DroppedVariant,
    LanguageModelLoss,
    TransferDocument,
    TransferRow,
)

__all__ = [
    "CORRECTNESS", "DIGESTS", "DISCOVERY_GAIN_NOTE", "HEAD", "HEADS", "KEYS", "MODEL", "MODEL_NAME", "SCHEMA_VERSION",
    "SET_NAME", "SPLITS", "TASK", "TASK_NAME", "UNSCORED", "AblationKindsDocument", "AltscreenDocument",
    "CalibrationDocument", "Codec", "Correctness", "DiagnosticsDocument", "Document", "DroppedVariant",
    "EvalDocument", "EvalExample", "HeldBack", "HeldoutContract", "Interaction", "KindRow", "LanguageModelLoss",
    "LookRecord", "ModelName", "ModelRecord", "RacingRecord", "RankedSet", "Record", "ScreenDocument", "ScreenRow",
    "SelectionDocument", "StabilityDocument", "StableSelection", "TaskName", "TaskRecord", "TestDocument",
    "TestExample", "TransferDocument", "TransferRow", "book_digests", "check_digest", "check_recorded", "coded",
    "optional", "optional_record", "parse_digests", "read_digests", "record", "write_recorded", "rows", "short",
]
