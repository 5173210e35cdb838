"""Where celtk keeps what it derives from models (dequantized GGUF files, assembled parts): no torch here, so
the packaged aliases are read before anything heavy loads."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$CELTK_CACHE``, else ``$XDG_CACHE_HOME/celtk``, else ``~/.cache/celtk``."""
    if os.environ.get("CELTK_CACHE"):
        return Path(os.environ["CELTK_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "celtk"
