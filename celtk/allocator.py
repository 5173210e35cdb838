"""Keep freed CPU memory in the process for reuse (glibc only; a process-wide setting).

On CPU, torch has no caching allocator: each tensor is ``malloc``'d and freed. glibc serves large
blocks with ``mmap`` and returns them to the kernel on ``free``, so the next tensor of that size
faults in fresh zeroed pages. Decoding allocates and frees caches and activations on every step: in
``benchmarks/generation_speed.py`` the generation screener's warm run took 1.9 M minor page faults
and 5.6 s of system time with glibc's defaults, and 7.5 k faults and 0.2 s with this setting
(≈ 10 % of its wall time on this project's 2-core VM). Raising glibc's mmap and trim thresholds
keeps freed blocks in the heap instead. The CLI calls :func:`keep_freed_memory` once at start; library code never does,
since it changes how the whole process allocates. Memory freed by torch is then reused but not
returned to the system until the process ends.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc's malloc.h)
M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 1 << 30  # larger blocks still come from mmap (glibc may cap this; it keeps its own maximum then)
_TRIM_THRESHOLD = (1 << 31) - 1  # the largest int: freed memory at the heap's top is kept


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds so that freed tensors' memory is reused, not refaulted.
    Returns whether the setting took effect (False off Linux or without glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
