"""Keeping freed memory in the process (glibc's malloc), where work frees and allocates large blocks in a loop."""

from __future__ import annotations

import ctypes
from functools import cache

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)

# A batch's arrays are tens of MB, allocated and freed every batch: mapped anew each time, the kernel zeroed every
# page of them again (numpy asks for 2 MB huge pages for large arrays, zeroed whole). Kept, the pipeline's process
# spends ~0.05 ms a page less CPU on the 4,395-page benchmark shard (perf samples, three interleaved pairs of runs);
# a threshold of 1 GB (the payloads' buffer from the heap too) measured more page clearing, not less. The extractor
# process, whose pages and texts come and go a page at a time, spent ~0.03 ms a page in the kernel (trimmed heap
# faulted in again) and ~0.007 with it.
BATCH_MMAP_THRESHOLD = 32 * 1024 * 1024


@cache
def keep_freed_memory(mmap_threshold: int) -> None:
    """Keep freed memory in glibc's heap instead of handing it back to the kernel.

    Asks malloc to serve blocks up to `mmap_threshold` bytes from its heap and to keep freed memory (until 1 GB
    of it sits at the heap's top).

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


def release_freed_memory() -> None:
    """Hand the memory a finished task freed back to the kernel (glibc's `malloc_trim`), in every malloc arena.

    A worker keeps freed memory while a task runs (`keep_freed_memory`), and each task runs in a thread of its own,
    whose malloc arena keeps its freed blocks too: without this, a Ray worker grew by ~0.2 GiB a 40,000-page WARC,
    from 1.7 to 4 GiB over a million pages (`benchmarks/soak.py`). Costs milliseconds, once a task."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        return
