"""Keep freed CPU memory in the process for reuse (glibc only; a process-wide setting).

On CPU, torch has no caching allocator: each tensor is ``malloc``'d and freed. glibc serves large
blocks with ``mmap`` and returns them to the kernel on ``free``, so the next tensor of that size
faults in fresh zeroed pages. Decoding allocates and frees caches and activations on every step: in
``benchmarks/generation_speed.py`` the generation screener's warm run took 1.9 M minor page faults
and 5.6 s of system time with glibc's defaults, and 7.5 k faults and 0.2 s with this setting
(≈ 10 % of its wall time on this project's 2-core VM). Raising glibc's mmap and trim thresholds
keeps freed blocks in the heap instead. The ``celtk`` executable calls :func:`keep_freed_memory`
once at start (``CELTK_KEEP_FREED_MEMORY=0`` opts out); library code never does, since it changes
how the whole process allocates. Memory freed by torch is then reused, and not returned to the
system until the process ends.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc's malloc.h)
M_MMAP_THRESHOLD = -3
# glibc refuses an mmap threshold above HEAP_MAX_SIZE / 2 in some versions (32 MiB on 64-bit); then the smaller one
_MMAP_THRESHOLDS = (1 << 30, 1 << 25)
_TRIM_THRESHOLD = (1 << 31) - 1  # the largest int: freed memory at the heap's top is kept
OPT_OUT = "CELTK_KEEP_FREED_MEMORY"  # set to 0 to leave the C library's defaults


def glibc() -> bool:
    """Whether this process runs on glibc (whose ``mallopt`` this module sets)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (AttributeError, ValueError, OSError):
        return False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds so that freed tensors' memory is reused, not refaulted.
    Returns whether both took effect (False off glibc, or when ``CELTK_KEEP_FREED_MEMORY=0``)."""
    if os.environ.get(OPT_OUT, "1") == "0" or not glibc():
        return False
    mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mmap = any(mallopt(M_MMAP_THRESHOLD, value) for value in _MMAP_THRESHOLDS)
    trim = bool(mallopt(M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
    return mmap and trim
