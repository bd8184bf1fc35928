"""Host memory that stays in the process between steps (``hardware.host_memory=keep``).

PyTorch's CPU allocator is the C library's ``malloc``. glibc serves blocks above its mmap threshold (128 KiB at first,
moved up as such blocks are freed) with fresh pages from the OS and returns them on ``free``; it also gives the top of
its heap back once more than the trim threshold is free there. A training step allocates and frees the same
activations and gradients every time, so each step can page-fault its working set in again (a kernel fault per
4 KiB page), depending on what the process freed before (batched steps of small models pay most:
results/bench/step-costs-cpu.md, host-memory-cpu.md). Raising both thresholds keeps freed blocks up to
MMAP_THRESHOLD in the heap for the next step; the process's resident memory then stays at its peak instead of
shrinking between steps. Nothing computed changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("fedrun")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest allowed value on 64-bit: bigger blocks still come from mmap
TRIM_THRESHOLD = 1 << 30  # free memory at the heap's top kept before any is handed back
_kept = False


def keep_freed_memory() -> bool:
    """Set glibc's thresholds (once per process); False where the C library is not glibc (macOS, musl), which
    keeps its own behaviour."""
    global _kept
    if _kept:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        log.debug("hardware.host_memory=keep: no glibc mallopt here; the C library's allocator is left as it is")
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _kept = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _kept


def kept() -> bool:
    """Whether this process keeps freed memory (``keep_freed_memory`` has taken effect)."""
    return _kept
