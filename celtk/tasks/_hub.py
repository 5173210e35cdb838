"""Reading a task's data from the hub or from a local copy in the hub's schema.

Every failure of ``datasets`` becomes a :class:`CeltkError` that names the dataset and
what to do: an unreachable hub, a malformed file, or a dataset the installed ``datasets``
cannot read at all (a dataset that needs its loading script, which ``datasets`` 4 refuses).
"""

from __future__ import annotations

import re
from pathlib import Path

from celtk.errors import CeltkError, DataFormatError, HubUnreachableError, TaskError
from celtk.tasks._base import Row


def _local_files(data_path: str, split: str) -> list[str]:
    path = Path(data_path)
    if path.is_file():
        return [str(path)]
    if not path.is_dir():
        raise TaskError(f"Task data path {data_path!r} does not exist; give a file or a directory of files named by "
                        "split.")
    files = sorted(str(p) for p in path.iterdir()
                   if p.name.startswith(split) and p.suffix in {".jsonl", ".json", ".parquet"})
    if not files:
        raise TaskError(f"No file for split {split!r} in {data_path}: expected e.g. {split}.jsonl or {split}.parquet.")
    return files


def _unreadable(what: str, error: Exception) -> CeltkError:
    """The error for a dataset or file that the installed ``datasets`` fails to read."""
    import datasets

    message = re.sub(r"\s+", " ", f"{type(error).__name__}: {error}").strip()  # one line, as the CLI shows it
    if (isinstance(error, (ConnectionError, TimeoutError)) or "connect" in message.lower()
            or "offline" in message.lower()):
        return HubUnreachableError(f"Could not fetch {what} from the hub ({message}). Download it where the hub is "
                                   "reachable and pass its directory as data_path= (--data PATH).")
    if "script" in message.lower():
        return TaskError(f"The installed datasets {datasets.__version__} cannot read {what}: it needs the dataset's "
                         f"loading script, which this datasets version refuses ({message}). Download the dataset's "
                         "data files (jsonl or parquet) and pass them as data_path= (--data PATH).")
    if isinstance(error, FileNotFoundError):
        return TaskError(f"{what} was not found ({message}). Check the name, or pass a local copy as data_path= "
                         "(--data PATH).")
    return DataFormatError(f"The installed datasets {datasets.__version__} could not read {what} ({message}); "
                           "expected jsonl or parquet rows in the dataset's schema.")


def _check_utf8(files: list[str]) -> None:
    """Refuse a local json/jsonl file that is not UTF-8, naming the line (datasets would fail deep inside)."""
    from celtk.tasks.jsonl import utf8_lines

    for name in files:
        with open(name, "rb") as handle:
            for _ in utf8_lines(handle, name):
                pass


def load_json_rows(source: str) -> list[Row]:
    """Rows of one jsonl file: a local path or an ``hf://datasets/...`` data file (no loading script)."""
    import datasets

    if "://" not in source and not Path(source).is_file():
        raise TaskError(f"Data file {source!r} does not exist.")
    if "://" not in source:
        _check_utf8([source])
    try:
        return list(datasets.load_dataset("json", data_files=source, split="train"))
    except Exception as error:  # noqa: BLE001 - every datasets failure becomes one clear message
        raise _unreadable(source, error) from None


def load_rows(hub_id: str, config: str | None, split: str, data_path: str | None) -> list[Row]:
    """Rows of ``split`` from ``data_path`` (hub schema, local) if given, else from the hub."""
    import datasets

    if data_path is not None:
        files = _local_files(data_path, split)
        builder = "parquet" if files[0].endswith(".parquet") else "json"
        if builder == "json":
            _check_utf8(files)
        try:
            return list(datasets.load_dataset(builder, data_files=files, split="train"))
        except Exception as error:  # noqa: BLE001
            raise _unreadable(", ".join(files), error) from None
    try:
        return list(datasets.load_dataset(hub_id, config, split=split))
    except Exception as error:  # noqa: BLE001
        raise _unreadable(f"{hub_id}{'/' + config if config else ''} ({split})", error) from None
