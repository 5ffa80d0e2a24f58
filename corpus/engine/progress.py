"""Live progress: a progress bar on a terminal, plain log lines (every few seconds) anywhere else."""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

LOG_EVERY_S = 10.0


def counted(n: int, noun: str) -> str:
    """'1 shard', '2 shards'."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def log_line(message: str, stream=None) -> None:
    """One timestamped line of a run's log."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=stream or sys.stderr, flush=True)


class RunProgress:
    def __init__(self, total_shards: int, skipped: int, stream=None, where: str = "", unit: str = "shard",
                 counts: tuple[str, str] = ("records", "documents")):  # fmt: skip
        """`where`: where the tasks run ("in this process", "on a local Ray cluster ..."): the run's first line.
        `unit`: what a task is ("shard", "training run"); `counts`: what tasks report progress in."""
        self.stream = stream or sys.stderr
        self.total = total_shards
        self.done = skipped
        self.unit = unit
        self.counts = counts
        self.records = 0
        self.documents = 0
        self.started = time.perf_counter()
        self._last_log = 0.0
        self._bar = None
        if where:
            self._log(f"running {where}")
        if self.stream.isatty():
            self._bar = Progress(
                TextColumn(f"[bold]{unit}s"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._task = self._bar.add_task(unit, total=total_shards, completed=skipped, detail="")
            self._bar.start()
        else:
            self._log(f"{counted(total_shards, unit)}, {skipped:,} already complete")

    def _rate(self) -> float:
        elapsed = time.perf_counter() - self.started
        return self.documents / elapsed if elapsed > 0 else 0.0

    def _detail(self) -> str:
        first, second = self.counts
        return f"{first} {self.records:,} · {second} {self.documents:,} · {self._rate():,.1f} {second}/s"

    def _log(self, message: str) -> None:
        log_line(message, self.stream)

    def update(self, records: int, documents: int) -> None:
        """Totals so far in this run."""
        self.records, self.documents = records, documents
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, detail=self._detail())
        elif time.perf_counter() - self._last_log >= LOG_EVERY_S:
            self._last_log = time.perf_counter()
            self._log(f"{self.unit}s {self.done}/{self.total} · {self._detail()}")

    def note(self, message: str) -> None:
        """A line of its own (a phase starting, Ray starting later in the run)."""
        if self._bar is not None:
            self._bar.console.print(message)
        else:
            self._log(message)

    def shard_finished(self, shard_id: str, error: str | None = None) -> None:
        self.done += 1
        if error:
            message = f"{self.unit} {shard_id} FAILED: {error}"
            if self._bar is not None:
                self._bar.console.print(f"[red]{message}")
            else:
                self._log(message)
        elif self._bar is None:
            self._log(f"{self.unit} {shard_id} done ({self.done}/{self.total}) · {self._detail()}")
        self.update(self.records, self.documents)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
