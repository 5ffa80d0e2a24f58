"""Opening an input: local files as they are; remote ones (HTTP(S), S3, ...) through a reader that survives a
dropped connection or a server error by opening the file again at the same offset.

A Common Crawl WARC is ~1 GB read over HTTPS for minutes: one reset connection must not fail the shard. Each
retry waits longer (0.5 s, 1 s, 2 s, ...); an answer that will not change (not found, forbidden) is not retried.
The retries are counted in the shard's report, so a flaky source shows in the run's stats.
"""

from __future__ import annotations

import contextlib
import io
import time

import fsspec
from fsspec.compression import compr
from fsspec.utils import infer_compression

ATTEMPTS = 6
BACKOFF_S = 0.5


def _retryable(exc: BaseException) -> bool:
    """A failure that the same request may not meet again: a connection lost, a timeout, a 5xx or 429 answer."""
    if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    try:
        import aiohttp
    except ImportError:  # no HTTP filesystem installed: only OS-level errors can happen
        aiohttp = None
    if aiohttp is not None and isinstance(exc, aiohttp.ClientResponseError):
        return exc.status >= 500 or exc.status == 429
    if aiohttp is not None and isinstance(exc, aiohttp.ClientError):
        return True
    return isinstance(exc, OSError | TimeoutError)


class RetryingInput(io.RawIOBase):
    """A remote file read with retries; `retries` counts the requests that had to be made again."""

    def __init__(self, source: str, attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S):
        super().__init__()
        self.source = source
        self.fs, self.path = fsspec.core.url_to_fs(source)
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.retries = 0
        self.position = 0
        self._file = None
        self._call(lambda: None)  # opened now: a missing input fails here, with its own error

    def _call(self, operation):
        for attempt in range(self.attempts):
            try:
                if self._file is None:
                    self._file = self.fs.open(self.path, "rb")
                    self._file.seek(self.position)
                return operation()
            except Exception as exc:  # noqa: BLE001 - filesystems raise their own kinds; _retryable sorts them
                if not _retryable(exc) or attempt == self.attempts - 1:
                    raise
                self._drop()
                self.retries += 1
                time.sleep(self.backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    def _drop(self) -> None:
        if self._file is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close too
                self._file.close()
            self._file = None

    def readinto(self, buffer) -> int:
        data = self._call(lambda: self._file.read(len(buffer)))
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END:
            offset += self._call(lambda: self._file.size)
        elif whence == io.SEEK_CUR:
            offset += self.position
        self.position = offset
        if self._file is not None:
            self._file.seek(offset)
        return offset

    def tell(self) -> int:
        return self.position

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        self._drop()
        super().close()


def input_identity(source: str) -> dict:
    """What tells this input from another file at the same path: its size, and its ETag or modification time."""
    fs, path = fsspec.core.url_to_fs(source)
    info = fs.info(path)
    version = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
    return {"size": info.get("size"), "version": str(version)}


class InputStream:
    """`with InputStream(source, decompress) as stream:` a binary stream of the input, and `retries` after."""

    def __init__(self, source: str, decompress: bool = False):
        self.source = source
        self.decompress = decompress
        self.retries = 0
        self._raw: RetryingInput | None = None
        self._opened = None

    def __enter__(self):
        protocol = fsspec.core.split_protocol(self.source)[0]
        if protocol in (None, "file", "local"):
            stream = fsspec.open(self.source, "rb", compression="infer" if self.decompress else None).open()
        else:
            self._raw = RetryingInput(self.source)
            stream = io.BufferedReader(self._raw, buffer_size=1 << 20)
            compression = infer_compression(self.source) if self.decompress else None
            if compression:
                stream = compr[compression](stream, mode="rb")
        self._opened = stream
        return stream

    def __exit__(self, *exc_info) -> None:
        if self._raw is not None:
            self.retries = self._raw.retries
        self._opened.close()
