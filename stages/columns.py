"""Arrow binary and string columns to and from byte strings, without a copy through a Python object per value.

Payloads are tens of kB a page and a batch's are tens of MB: pyarrow's builder (`pa.array(list_of_bytes)`) grows
its buffer by reallocating and touches fresh memory a 4 kB page at a time (67 us and 34 page faults for a 48 kB
page here); one buffer of the exact size from numpy, which asks the kernel for huge pages for large arrays, takes
7 us and under one fault. Reading values back as one buffer and its offsets lets the extract stage hand a chunk of
pages to its extractor process as one slice, where `to_pylist` and pickling cost another ~50 us a page.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa


def concatenated(parts: Sequence[bytes]) -> tuple[pa.Buffer, np.ndarray]:
    """The parts end to end in one buffer, and their int64 offsets into it (one more than there are parts)."""
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, parts), np.int64, len(parts)), out=offsets[1:])
    data = np.empty(int(offsets[-1]), np.uint8)
    view = memoryview(data)
    for part, start, end in zip(parts, offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        view[start:end] = part
    return pa.py_buffer(data), offsets


def column_of(data: pa.Buffer, offsets: np.ndarray, type: pa.DataType) -> pa.Array:
    """A large_binary or large_string column over `data` at `offsets` (int64, from 0), no nulls, no copy. A
    large_string's bytes must be UTF-8 (not checked: the callers encode them)."""
    return pa.Array.from_buffers(type, len(offsets) - 1, [None, pa.py_buffer(offsets), data])


def binary_column(parts: Sequence[bytes]) -> pa.Array:
    return column_of(*concatenated(parts), pa.large_binary())


def values_of(column: pa.Array | pa.ChunkedArray) -> tuple[memoryview, np.ndarray]:
    """A large_binary column's bytes and the int64 offsets of its values in them (a null value reads as empty)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.null_count:
        column = column.fill_null(b"")
    _, offsets, data = column.buffers()
    if offsets is None:  # an empty column
        return memoryview(b""), np.zeros(1, np.int64)
    positions = np.frombuffer(offsets, np.int64)[column.offset : column.offset + len(column) + 1]
    return memoryview(data if data is not None else b""), positions
