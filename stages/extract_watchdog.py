"""The extractor's process: pages go to a child interpreter and come back one reply each, under a watchdog.

A page that takes longer than `timeout_s` or blows the memory limit is killed and counted (`extract_timeout`,
`extract_crashed`), and the next page goes on in a fresh child. The child is a fresh interpreter (not a fork: Ray
workers are multi-threaded, and multiprocessing's spawn would re-run the user's __main__), talking over a socket
pair. What the child does with a page is `corpus.stages.extract.PageExtractor`: decoding, the optional language
pre-pass, extraction and language ID all happen there, so the parent only moves bytes in and columns out.

Pages go over in chunks, a chunk's payloads as one slice of the batch's payload buffer, and their replies come back
one message per chunk, the texts as one string of UTF-8 bytes (a message per page cost ~5 % of a resiliparse run in
system calls and context switches; a Python object per payload and per text, pickled, another ~4 %). Which page the
child is on, and since when, it writes to a small file both processes map (`_Progress`): the watchdog reads it to
time each page and to name the page that hung or crashed the child. The replies of that chunk's earlier pages die
with the child and are extracted again.
"""

from __future__ import annotations

import atexit
import gc
import mmap
import multiprocessing
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
import pyarrow as pa

from corpus.memory import BATCH_MMAP_THRESHOLD, keep_freed_memory
from corpus.stages.columns import column_of, concatenated

_SEND_CHUNK = 32  # pages per message to the extractor process: pipelined, yet a kill loses little
_SEND_BYTES = 64 << 20  # and at most this much payload (but one page), well inside the process's memory limit
_STARTUP_TIMEOUT_S = 120.0
_CRASHED = "extract_crashed"


class _Progress:
    """Pages of the current chunk the child has started, and the monotonic time it started the latest: 16 bytes of
    a file both processes map. The parent resets it before each chunk; the child writes it as it starts a page."""

    LAYOUT = struct.Struct("<qd")

    def __init__(self, fd: int):
        self.map = mmap.mmap(fd, self.LAYOUT.size)

    def reset(self) -> None:
        self.LAYOUT.pack_into(self.map, 0, 0, 0.0)

    def started(self, pages: int) -> None:
        self.LAYOUT.pack_into(self.map, 0, pages, time.monotonic())

    def read(self) -> tuple[int, float]:
        return self.LAYOUT.unpack_from(self.map, 0)


@dataclass(frozen=True)
class Pages:
    """Pages for the extractor process: each page's (kind, HTTP charset, URL), and their payloads end to end in
    `data` at `offsets` (int64, one more than there are pages)."""

    meta: list[tuple[str, str | None, str | None]]
    data: memoryview
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.meta)


@dataclass(frozen=True)
class Extraction:
    """One reply per page, in order: `PageExtractor`'s with the text's length in UTF-8 bytes in place of the text
    ("ok", length, charset, lang, score), (drop reason,), or (error class, message); the "ok" pages' texts are
    end to end in `texts`."""

    replies: list[tuple]
    texts: pa.Buffer

    def text_column(self) -> pa.Array:
        """The "ok" pages' texts, in order (large_string)."""
        lengths = [reply[1] for reply in self.replies if reply[0] == "ok"]
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return column_of(self.texts, offsets, pa.large_string())


def serve_extractor(fd: int, progress_fd: int) -> None:
    """Child process: receive its settings, then handle chunks of pages as they arrive (each a header of the pages'
    (kind, charset, URL) and payload offsets, then the payloads), one reply per page, sent per chunk, in order,
    followed by the texts of the "ok" replies end to end."""
    from multiprocessing.connection import Connection

    from corpus.stages.extract import PageExtractor

    conn = Connection(fd)
    progress = _Progress(progress_fd)
    settings, memory_limit_mb = conn.recv()
    limit = memory_limit_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    keep_freed_memory(BATCH_MMAP_THRESHOLD)
    try:
        handle = PageExtractor(settings)
    except ValueError as exc:  # a setting it cannot use (a model file that is not one): said, not a traceback
        conn.send(str(exc))
        return
    gc.freeze()  # the imports and the models, there for the process's life, stay out of the collector's passes
    conn.send("ready")
    payloads = bytearray(1 << 20)  # reused across chunks: no fresh memory per chunk
    while True:
        try:
            header = conn.recv()
        except EOFError:
            return  # the parent is gone (its worker was killed): nothing left to do
        if header is None:
            return
        meta, offsets = header
        if offsets[-1] > len(payloads):
            payloads = bytearray(offsets[-1])
        conn.recv_bytes_into(payloads)
        view = memoryview(payloads)
        replies, texts = [], []
        for number, ((kind, charset, url), start, end) in enumerate(zip(meta, offsets, offsets[1:], strict=False), 1):
            progress.started(number)
            try:
                reply = handle(kind, bytes(view[start:end]), charset, url)
            except MemoryError:
                replies.append((_CRASHED, "MemoryError: the page exceeded the extractor memory limit"))
                _reply(conn, replies, texts)
                return  # the heap may be left in a bad state: let the parent start a fresh child
            except Exception as exc:  # noqa: BLE001 - any extractor bug is a per-page error, not a crash
                reply = ("extract_failed", f"{type(exc).__name__}: {exc}")
            if reply[0] == "ok":
                texts.append(reply[1])
                reply = ("ok", len(reply[1]), *reply[2:])
            replies.append(reply)
        view.release()
        _reply(conn, replies, texts)


def _reply(conn, replies: list[tuple], texts: list[bytes]) -> None:
    """A chunk's replies, then its "ok" texts end to end (what `_run_chunk` receives)."""
    conn.send(replies)
    conn.send_bytes(b"".join(texts))


class ExtractionWatchdog:
    """Runs `PageExtractor(settings)` in a child process; kills and replaces it when a page hangs or crashes it.

    `settings`: the extract options as a dict (what the child needs: extractor, language ID, pre-pass)."""

    def __init__(self, settings: dict, timeout_s: float, memory_limit_mb: int):
        self.settings = settings
        self.timeout_s = timeout_s
        self.memory_limit_mb = memory_limit_mb
        self._process: subprocess.Popen | None = None
        self._conn = None
        self._progress_file = None
        self._progress: _Progress | None = None
        self.restarts = 0

    def _start(self) -> None:
        parent_conn, child_conn = multiprocessing.Pipe()
        fd = child_conn.fileno()
        self._progress_file = tempfile.TemporaryFile()  # noqa: SIM115 - lives with the child, closed in close()
        progress_fd = self._progress_file.fileno()
        os.ftruncate(progress_fd, _Progress.LAYOUT.size)
        self._progress = _Progress(progress_fd)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from corpus.stages.extract_watchdog import serve_extractor as s; "
                "s(int(sys.argv[1]), int(sys.argv[2]))",
                str(fd),
                str(progress_fd),
            ],
            pass_fds=[fd, progress_fd],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        child_conn.close()
        self._conn = parent_conn
        parent_conn.send((self.settings, self.memory_limit_mb))
        try:
            answer = parent_conn.recv() if parent_conn.poll(_STARTUP_TIMEOUT_S) else None
        except (EOFError, OSError):
            answer = None
        if answer != "ready":
            self.close()
            if isinstance(answer, str):  # the child's own account of what stopped it
                raise ValueError(f"the extractor process could not start: {answer}")
            raise RuntimeError(
                f"the {self.settings['extractor']} extractor process did not start; its error is on stderr above "
                "(is the package installed in this environment?)"
            )

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(5)
        if self._conn is not None:
            self._conn.close()
        if self._progress_file is not None:
            self._progress.map.close()
            self._progress_file.close()
        self._process = self._conn = self._progress_file = self._progress = None

    def _exit_code(self) -> int | None:
        """The dead child's exit code (it may not be reaped yet when its end of the socket closes)."""
        try:
            return self._process.wait(timeout=5) if self._process else None
        except subprocess.TimeoutExpired:
            return None

    def _discard(self) -> None:
        """Drop a child that hung, crashed or ran out of memory; the next page starts a fresh one."""
        self.close()
        self.restarts += 1

    def extract(self, pages: Pages, on_pages: Callable[[int], None] | None = None) -> Extraction:
        """One reply per page, in order (see `Extraction`); (error class, message) for a page that killed the
        child. `on_pages(n)` is told as each chunk of n pages is done (a live progress line within a shard)."""
        results: list[tuple] = []
        texts: list[bytes] = []
        failed: dict[int, tuple] = {}  # page -> the reply of a page that hung or crashed the child
        while len(results) < len(pages):
            position = len(results)
            if position in failed:
                results.append(failed.pop(position))
                continue
            if self._process is not None and self._process.poll() is not None:
                self._discard()  # died between batches
            if self._process is None:
                self._start()
            fits = int(np.searchsorted(pages.offsets, pages.offsets[position] + _SEND_BYTES, side="right")) - 1
            end = min([position + _SEND_CHUNK, max(fits, position + 1), *(page for page in failed if page > position)])
            replies, chunk_texts, failure = self._run_chunk(pages, position, end)
            results.extend(replies)
            texts.append(chunk_texts)
            if failure is not None:
                failed[position + failure[0]] = failure[1]
            if on_pages is not None and replies:
                on_pages(len(replies))
        return Extraction(results, concatenated(texts)[0])

    def _run_chunk(self, pages: Pages, start: int, end: int) -> tuple[list[tuple], bytes, tuple[int, tuple] | None]:
        """The replies of pages `start` to `end`, their texts and, when a page hung or crashed the child (which is
        then discarded), (its index in the chunk, its reply); the replies end before it, or earlier when they died
        with the child."""
        self._progress.reset()
        sent_at = time.monotonic()
        first, last = int(pages.offsets[start]), int(pages.offsets[end])
        self._conn.send((pages.meta[start:end], (pages.offsets[start : end + 1] - first).tolist()))
        self._conn.send_bytes(pages.data[first:last])
        while True:
            started, since = self._progress.read()
            wait = self.timeout_s - (time.monotonic() - (since if started else sent_at))
            if wait <= 0:
                self._discard()
                timeout = ("extract_timeout", f"no result within {self.timeout_s:g}s; killed")
                return [], b"", (max(started - 1, 0), timeout)
            if self._conn.poll(wait):
                break
        try:
            replies = self._conn.recv()
            texts = self._conn.recv_bytes()
        except (EOFError, OSError):
            started = self._progress.read()[0]
            code = self._exit_code()
            self._discard()
            return [], b"", (max(started - 1, 0), (_CRASHED, f"extractor process died (exit code {code})"))
        if replies and replies[-1][0] == _CRASHED:
            self._discard()
            return replies[:-1], texts, (len(replies) - 1, replies[-1])
        return replies, texts, None


@cache
def watchdog_for(settings_key: tuple, timeout_s: float, memory_limit_mb: int) -> ExtractionWatchdog:
    """One extractor process per worker and settings, closed when the worker exits."""
    watchdog = ExtractionWatchdog(dict(settings_key), timeout_s, memory_limit_mb)
    atexit.register(watchdog.close)
    return watchdog
