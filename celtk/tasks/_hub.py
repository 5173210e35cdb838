"""Reading a task's data from the hub or from a local copy in the hub's schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celtk.errors import HubUnreachableError, TaskError


def _local_files(data_path: str, split: str) -> list[str]:
    path = Path(data_path)
    if path.is_file():
        return [str(path)]
    if not path.is_dir():
        raise TaskError(f"Task data path {data_path!r} does not exist; give a file or a directory of files named by split.")
    files = sorted(str(p) for p in path.iterdir() if p.name.startswith(split) and p.suffix in {".jsonl", ".json", ".parquet"})
    if not files:
        raise TaskError(f"No file for split {split!r} in {data_path}: expected e.g. {split}.jsonl or {split}.parquet.")
    return files


def load_rows(hub_id: str, config: str | None, split: str, data_path: str | None) -> list[dict[str, Any]]:
    """Rows of ``split`` from ``data_path`` (hub schema, local) if given, else from the hub."""
    import datasets

    if data_path is not None:
        files = _local_files(data_path, split)
        builder = "parquet" if files[0].endswith(".parquet") else "json"
        return list(datasets.load_dataset(builder, data_files=files, split="train"))
    try:
        return list(datasets.load_dataset(hub_id, config, split=split))
    except (ConnectionError, OSError) as error:
        raise HubUnreachableError(
            f"Could not fetch {hub_id}{'/' + config if config else ''} ({split}) from the hub: {error}. "
            "Download it where the hub is reachable and pass its directory with --data PATH."
        ) from None
