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

from corpus.errors import InputUnavailable

ATTEMPTS = 6
BACKOFF_S = 0.5


def _aiohttp():
    try:
        import aiohttp
    except ImportError:  # no HTTP filesystem installed
        return None
    return aiohttp


def _failure(exc: BaseException) -> BaseException:
    """What went wrong: fsspec's HTTP filesystem reports any failed lookup of a file (a refused connection or a 503
    answer as well as a 404) as FileNotFoundError(url), the HTTP client's error as its cause."""
    aiohttp = _aiohttp()
    if type(exc) is FileNotFoundError and aiohttp is not None and isinstance(exc.__cause__, aiohttp.ClientError):
        return exc.__cause__
    return exc


def _retryable(exc: BaseException) -> bool:
    """A failure that the same request may not meet again: a connection lost, a timeout, a 5xx or 429 answer."""
    exc, aiohttp = _failure(exc), _aiohttp()
    if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError | NotADirectoryError):
        return False
    if aiohttp is not None and isinstance(exc, aiohttp.ClientResponseError):
        return exc.status >= 500 or exc.status == 429
    if aiohttp is not None and isinstance(exc, aiohttp.ClientError):
        return True
    return isinstance(exc, OSError | TimeoutError)


def _explained(exc: BaseException, attempts: int, seconds: float) -> BaseException:
    """The final failure of a remote input, saying what the server or the network answered (the caller names the
    input)."""
    failure, aiohttp = _failure(exc), _aiohttp()
    if aiohttp is None or not isinstance(failure, aiohttp.ClientError):
        return exc
    status = getattr(failure, "status", None)
    said = f"HTTP {status} {failure.message}".strip() if status else str(failure)
    if not _retryable(exc):  # a 404, 403, ...: the answer will not change
        kind = FileNotFoundError if status in (404, 410) else PermissionError if status in (401, 403) else OSError
        return kind(said)
    return InputUnavailable(f"{said} ({attempts} attempts over {seconds:.1f} s)")


def with_retries(operation, attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S, on_retry=None):
    """`operation()`, called again after a retryable failure (waiting 0.5 s, 1 s, 2 s, ...; `on_retry()` first)."""
    started = time.monotonic()
    for attempt in range(attempts):
        try:
            return operation()
        except Exception as exc:  # noqa: BLE001 - filesystems raise their own kinds; _retryable sorts them
            if not _retryable(exc) or attempt == attempts - 1:
                explained = _explained(exc, attempt + 1, time.monotonic() - started)
                if explained is exc:
                    raise
                raise explained from exc
            if on_retry is not None:
                on_retry()
            time.sleep(backoff_s * 2**attempt)
    raise AssertionError("unreachable")


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
        def attempt():
            if self._file is None:
                self._file = self.fs.open(self.path, "rb")
                self._file.seek(self.position)
            return operation()

        return with_retries(attempt, self.attempts, self.backoff_s, self._retrying)

    def _retrying(self) -> None:
        self._drop()
        self.retries += 1

    def identity(self) -> dict:
        """`input_identity` of this file, its lookups retried and counted with the reads'."""
        return _identity(self._call(lambda: self.fs.info(self.path)))

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


def input_identity(source: str, attempts: int = ATTEMPTS) -> dict:
    """What tells this input from another file at the same path: its size, and its ETag or modification time."""
    fs, path = fsspec.core.url_to_fs(source)
    return _identity(with_retries(lambda: fs.info(path), attempts))


def _identity(info: dict) -> dict:
    version = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
    return {"size": info.get("size"), "version": str(version)}


class InputStream:
    """`with InputStream(source, decompress) as stream:` a binary stream of the input, its `identity` (taken as it
    opens, before any read: a file replaced meanwhile is read again by the next run), and `retries` after."""

    def __init__(self, source: str, decompress: bool = False):
        self.source = source
        self.decompress = decompress
        self.retries = 0
        self.identity: dict = {}
        self._raw: RetryingInput | None = None
        self._opened = None

    def __enter__(self):
        protocol = fsspec.core.split_protocol(self.source)[0]
        if protocol in (None, "file", "local"):
            self.identity = input_identity(self.source)
            stream = fsspec.open(self.source, "rb", compression="infer" if self.decompress else None).open()
        else:
            self._raw = RetryingInput(self.source)
            self.identity = self._raw.identity()
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
