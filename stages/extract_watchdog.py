"""The extractor's process: pages go to a child interpreter and come back one reply each, under a watchdog.

A page that takes longer than `timeout_s` or blows the memory limit is killed and counted (`extract_timeout`,
`extract_crashed`), and the next page goes on in a fresh child. The child is a fresh interpreter (not a fork: Ray
workers are multi-threaded, and multiprocessing's spawn would re-run the user's __main__), talking over a socket
pair. What the child does with a page is `corpus.stages.extract.PageExtractor`: decoding, the optional language
pre-pass, extraction and language ID all happen there, so the parent only moves bytes in and columns out.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from functools import cache

_SEND_CHUNK = 32  # pages per message to the extractor process: pipelined, yet a kill loses little
_STARTUP_TIMEOUT_S = 120.0


def serve_extractor(fd: int) -> None:
    """Child process: receive its settings, then handle pages as they arrive, one reply per page, in order."""
    from multiprocessing.connection import Connection

    from corpus.stages.extract import PageExtractor

    conn = Connection(fd)
    settings, memory_limit_mb = conn.recv()
    limit = memory_limit_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    handle = PageExtractor(settings)
    conn.send("ready")
    while True:
        try:
            pages = conn.recv()
        except EOFError:
            return  # the parent is gone (its worker was killed): nothing left to do
        if pages is None:
            return
        for page in pages:
            try:
                conn.send(handle(*page))
            except MemoryError:
                conn.send(("extract_crashed", "MemoryError: the page exceeded the extractor memory limit"))
                return  # the heap may be left in a bad state: let the parent start a fresh child
            except Exception as exc:  # noqa: BLE001 - any extractor bug is a per-page error, not a crash
                conn.send(("extract_failed", f"{type(exc).__name__}: {exc}"))


class ExtractionWatchdog:
    """Runs `PageExtractor(settings)` in a child process; kills and replaces it when a page hangs or crashes it.

    `settings`: the extract options as a dict (what the child needs: extractor, language ID, pre-pass)."""

    def __init__(self, settings: dict, timeout_s: float, memory_limit_mb: int):
        self.settings = settings
        self.timeout_s = timeout_s
        self.memory_limit_mb = memory_limit_mb
        self._process: subprocess.Popen | None = None
        self._conn = None
        self.restarts = 0

    def _start(self) -> None:
        parent_conn, child_conn = multiprocessing.Pipe()
        fd = child_conn.fileno()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from corpus.stages.extract_watchdog import serve_extractor as s; s(int(sys.argv[1]))",
                str(fd),
            ],
            pass_fds=[fd],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        child_conn.close()
        self._conn = parent_conn
        parent_conn.send((self.settings, self.memory_limit_mb))
        try:
            ready = parent_conn.poll(_STARTUP_TIMEOUT_S) and parent_conn.recv() == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.close()
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
        self._process = self._conn = None

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

    def extract(self, pages: list[tuple], on_pages: Callable[[int], None] | None = None) -> list[tuple]:
        """One reply per page, in order: `PageExtractor`'s, or (error class, message) for a page that killed it.
        `on_pages(n)` is told as each chunk of n pages is done (a live progress line within a shard)."""
        results: list[tuple] = []
        while len(results) < len(pages):
            if self._process is not None and self._process.poll() is not None:
                self._discard()  # died between batches
            if self._process is None:
                self._start()
            start = len(results)
            for chunk_start in range(start, len(pages), _SEND_CHUNK):
                self._conn.send(pages[chunk_start : chunk_start + _SEND_CHUNK])
                before = len(results)
                complete = self._receive_chunk(results, min(_SEND_CHUNK, len(pages) - chunk_start))
                if on_pages is not None:
                    on_pages(len(results) - before)
                if not complete:
                    break
        return results

    def _receive_chunk(self, results: list, expected: int) -> bool:
        """Collect one chunk's replies; False when the child had to be killed (the rest is re-sent)."""
        for _ in range(expected):
            if not self._conn.poll(self.timeout_s):
                self._discard()
                results.append(("extract_timeout", f"no result within {self.timeout_s:g}s; killed"))
                return False
            try:
                reply = self._conn.recv()
            except (EOFError, OSError):
                code = self._exit_code()
                self._discard()
                results.append(("extract_crashed", f"extractor process died (exit code {code})"))
                return False
            results.append(reply)
            if reply[0] == "extract_crashed":
                self._discard()
                return False
        return True


@cache
def watchdog_for(settings_key: tuple, timeout_s: float, memory_limit_mb: int) -> ExtractionWatchdog:
    """One extractor process per worker and settings, closed when the worker exits."""
    watchdog = ExtractionWatchdog(dict(settings_key), timeout_s, memory_limit_mb)
    atexit.register(watchdog.close)
    return watchdog
