"""Keeping freed memory in the process (glibc's malloc), where work frees and allocates large blocks in a loop."""

from __future__ import annotations

import ctypes
from functools import cache

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


@cache
def keep_freed_memory(mmap_threshold: int) -> None:
    """Asks glibc's malloc to serve blocks up to `mmap_threshold` bytes from its heap and to keep freed memory
    (until 1 GB of it sits at the heap's top) rather than hand it back to the kernel.

    By default a block past the mmap threshold (which glibc raises, as blocks are freed, to at most 32 MB) is mapped
    fresh and unmapped when freed, and the heap is trimmed past 128 kB: a loop allocating and freeing large blocks
    has the kernel map and zero their pages again each time. What is kept is what the largest step used. Elsewhere
    than glibc (macOS), nothing to do."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, mmap_threshold)
    mallopt(_M_TRIM_THRESHOLD, 1024 * 1024 * 1024)
