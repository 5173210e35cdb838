"""Compare two run directories file by file: byte-identical, or identical once named additive keys are dropped.

Used to show that a refactor changed no result: run `make demo` (or any `celtk run`) on the commit before and
after, then

    python benchmarks/compare_runs.py OLD_RUN NEW_RUN --allow-added schema_version,null_ablation \
        --renamed gain_count=gain

Every JSON document in both directories is compared: byte for byte first; if the bytes differ, the parsed
documents are compared with the allowed keys removed (at any depth) from the NEW side only, and renamed keys
mapped back to their old names, so a key the new code *adds* or *renames* is tolerated but a changed or removed
value is not. CSV files likewise: a column of the NEW file named in --allow-added that the old file lacks is dropped
before the rows are compared (e.g. `--allow-added n_scored` for screen.csv's racing column). Exit status 0 when
every file matches.
Wall times (`timing.json`, `*-timing.json`) and the lock file are skipped: they differ between any two
runs. So does the clock in the
held-out log: each line of `heldout_log.jsonl` is compared with its time of the look (`when`) and the hash of the line
before (`prev`, a hash over those times) dropped, and the chain head (`heldout_log.head`) is skipped; every other
field of every look (what, heads, held-out hash, n, result digest) must match.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

SKIPPED = {"timing.json", "run_timing.json", ".lock", "heldout_log.head"}
CLOCK = {"when", "prev"}  # per line of a JSON-lines log: the wall-clock time and the hash chain over it


def lines_match(old: str, new: str, added: set[str], renamed: dict[str, str]) -> bool:
    """Whether two JSON-lines logs hold the same records, line for line, once the clock keys are dropped."""
    def records(text: str) -> list[dict]:
        return [{k: v for k, v in json.loads(line).items() if k not in CLOCK} for line in text.splitlines() if line]
    a, b = records(old), records(new)
    return len(a) == len(b) and all(matches(x, y, added, renamed) for x, y in zip(a, b, strict=True))


def matches(old: Any, new: Any, added: set[str], renamed: dict[str, str]) -> bool:
    """Whether ``new`` equals ``old`` once keys in ``added`` that ``old`` lacks are ignored and keys in ``renamed``
    (new name -> old name) are read under their old name where ``old`` has that name, recursively."""
    if isinstance(old, dict) and isinstance(new, dict):
        mapped = {}
        for key, value in new.items():
            name = renamed.get(key, key) if key not in old else key
            if name not in old and key in added:
                continue
            mapped[name] = value
        return mapped.keys() == old.keys() and all(matches(old[k], mapped[k], added, renamed) for k in old)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(matches(a, b, added, renamed) for a, b in zip(old, new, strict=True))
    return bool(old == new)


def csv_matches(old: str, new: str, added: set[str]) -> bool:
    """Whether the CSV text ``new`` equals ``old`` once the columns in ``added`` that ``old`` lacks are dropped."""
    old_rows, new_rows = list(csv.reader(io.StringIO(old))), list(csv.reader(io.StringIO(new)))
    if not old_rows or not new_rows:
        return old_rows == new_rows
    keep = [i for i, name in enumerate(new_rows[0]) if name in old_rows[0] or name not in added]
    return [[row[i] for i in keep if i < len(row)] for row in new_rows] == old_rows


def compare(old: Path, new: Path, allowed: set[str], renamed: dict[str, str]) -> list[tuple[str, str]]:
    """One (relative path, verdict) per file of either run; verdicts: identical, identical-modulo-added,
    identical-modulo-clock, DIFFERENT, MISSING-IN-NEW, ONLY-IN-NEW."""
    names = {p.relative_to(old).as_posix() for p in old.rglob("*") if p.is_file()}
    names |= {p.relative_to(new).as_posix() for p in new.rglob("*") if p.is_file()}
    rows = []
    for name in sorted(names):
        if Path(name).name in SKIPPED or name.endswith("-timing.json"):  # wall times (altscreen-METHOD-timing.json)
            continue
        a, b = old / name, new / name
        if not b.is_file():
            rows.append((name, "MISSING-IN-NEW"))
        elif not a.is_file():
            rows.append((name, "ONLY-IN-NEW"))
        elif a.read_bytes() == b.read_bytes():
            rows.append((name, "identical"))
        elif name.endswith(".json") and matches(json.loads(a.read_text()), json.loads(b.read_text()), allowed, renamed):
            rows.append((name, "identical-modulo-added"))
        elif name.endswith(".csv") and csv_matches(a.read_text(), b.read_text(), allowed):
            rows.append((name, "identical-modulo-added"))
        elif name.endswith(".jsonl") and lines_match(a.read_text(), b.read_text(), allowed, renamed):
            rows.append((name, "identical-modulo-clock"))
        else:
            rows.append((name, "DIFFERENT"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--allow-added", default="", help="comma-separated keys the new code adds")
    parser.add_argument("--renamed", default="", help="comma-separated NEW=OLD key renames")
    args = parser.parse_args()
    allowed = {k for k in args.allow_added.split(",") if k}
    renamed = dict(pair.split("=", 1) for pair in args.renamed.split(",") if pair)
    rows = compare(args.old, args.new, allowed, renamed)
    for name, verdict in rows:
        print(f"{verdict:24s} {name}")
    bad = [name for name, verdict in rows if verdict in ("DIFFERENT", "MISSING-IN-NEW")]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
