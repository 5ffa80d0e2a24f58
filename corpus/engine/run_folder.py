"""The run folder: every path of a run, and every read and write of it, local or any fsspec URL.

    plan.parquet                   the planned shards: ordinal, id, source (tasks that need the list read it here)
    documents/<shard>.parquet      one file per input shard, row groups of `read.batch_size` documents
    prefiltered/<shard>.parquet    with [prefilter] rules: the pages they dropped (URL, reasons, signals; no text)
    language_prepass/<shard>.parquet  with prepass_languages: the pages the pre-pass dropped (URL, language, score)
    shards/<shard>.json            written last for a shard: its counts and errors; its presence = shard complete
    summaries/<rule>/<shard>.parquet, summaries/combined/<rule>-<bucket>.parquet   corpus rules' counts (Arrow)
    corpus_signals/<shard>.parquet the corpus rules' per-document signals
    scores/<name>/<shard>.parquet  the signals of each [models.NAME] classifier and [buckets.NAME] per document
    selection/<shard>.parquet      per document: kept, first and all failing thresholds, dedup decisions
    rule_selection/<shard>.parquet with dedup steps: the thresholds' selection that dedup starts from
    dedup/<step>/decisions/<shard>.parquet   each step's decisions (its shuffle files are removed once decided)
    tokens/                        token shards and their manifest
    manifest.json, stats.json, job.toml (the job file as the run read it)

A task's outputs are written first, each to a temporary name renamed into place, and its marker (a JSON report
holding the task's key) last: a killed run never leaves a partial file under a final name, and a re-run skips
exactly the tasks whose marker holds their key. The report, the lab and the CLI read a run only through here.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import time
import uuid
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpus.errors import JobError, OutputLocked

PARQUET_COMPRESSION = "zstd"


class RunFolder:
    """A run's output folder, local or any fsspec URL."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url)
        self._lock_handle = None
        self._lock_object_path = None

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    @property
    def is_local(self) -> bool:
        return "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))

    def _temporary(self, final: str) -> str:
        return f"{final}.tmp-{uuid.uuid4().hex[:12]}"

    def _publish(self, temporary: str, final: str) -> None:
        if self.is_local:
            os.replace(temporary, final)  # atomic on one filesystem
        else:
            self.fs.mv(temporary, final)  # object stores publish an object whole

    def write_bytes(self, relative: str, data: bytes) -> None:
        final = self.path(relative)
        self.fs.makedirs(final.rsplit("/", 1)[0], exist_ok=True)
        temporary = self._temporary(final)
        try:
            with self.fs.open(temporary, "wb") as fh:
                fh.write(data)
                if self.is_local:
                    fh.flush()
                    os.fsync(fh.fileno())
            self._publish(temporary, final)
        except BaseException:
            self._discard(temporary)  # a full disk or a kill: no partial file left behind
            raise

    def _discard(self, temporary: str) -> None:
        try:
            if self.fs.exists(temporary):
                self.fs.rm(temporary)
        except OSError:
            pass  # the next run's remove_temporaries takes it

    def write_json(self, relative: str, data: dict) -> None:
        self.write_bytes(relative, (json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode())

    def read_json(self, relative: str) -> dict | None:
        data = self.read_bytes(relative)
        return None if data is None else json.loads(data)

    def stats(self) -> dict | None:
        """The run's `stats.json`: what its last finished start counted; None before one finished."""
        return self.read_json(STATS)

    def token_manifest(self) -> dict | None:
        """The run's token files and counts (`tokens/manifest.json`); None where it wrote no tokens."""
        return self.read_json(TOKEN_MANIFEST)

    def kept_texts(self) -> list[str]:
        """The texts of the documents the run kept, in stored order (a variant's from its documents run)."""
        if not self.exists("selection"):
            raise JobError(f"{self.url} holds no selection/: give a finished run's folder")
        selection = self.read_folder("selection", columns=["id", "kept"])
        kept = selection.filter(selection.column("kept")).column("id")
        if not len(kept):
            raise JobError(f"{self.url} has no selected documents to train on")
        source = RunFolder((self.stats() or {}).get("documents_from") or self.url)
        if not source.exists("documents"):
            raise JobError(f"{source.url} holds no documents/: give a finished run's folder")
        documents = source.read_folder("documents", columns=["id", "text"])
        return (
            documents.filter(pc.is_in(documents.column("id"), value_set=kept.combine_chunks()))
            .column("text")
            .to_pylist()
        )

    def is_complete_run_of(self, job_sha256: str) -> bool:
        """The folder holds a finished run of the job file with this hash, every planned shard complete."""
        stats = self.stats()
        return (
            stats is not None
            and stats.get("job_sha256") == job_sha256
            and not stats["failed_shards"]
            and stats["shards"]["complete"] == stats["shards"]["planned"]
        )

    def read_bytes(self, relative: str) -> bytes | None:
        """The file's bytes; None when it is not there (nor the folder: the run folder may be a file's path)."""
        try:
            with self.fs.open(self.path(relative), "rb") as fh:
                return fh.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read_jsons(self, relatives: list[str]) -> dict[str, dict]:
        """Many JSON files of the run in one call (an async object store fetches them concurrently); a file that
        is gone is left out."""
        if not relatives:
            return {}
        paths = {self.path(relative): relative for relative in relatives}
        contents = self.fs.cat(list(paths), on_error="omit")
        return {paths[path]: json.loads(data) for path, data in contents.items() if path in paths}

    def listed(self, folder: str) -> set[str]:
        """The relative paths of the files directly in a folder of the run (empty if it does not exist)."""
        try:
            names = self.fs.ls(self.path(folder), detail=False)
        except FileNotFoundError:
            return set()
        return {f"{folder}/{name.rstrip('/').rsplit('/', 1)[-1]}" for name in names}

    def exists(self, relative: str) -> bool:
        return self.fs.exists(self.path(relative))

    def read_table(self, relative: str, columns: list[str] | None = None, schema: pa.Schema | None = None) -> pa.Table:
        with self.fs.open(self.path(relative), "rb") as fh:
            return pq.read_table(fh, columns=columns, schema=schema)

    def read_parts(self, directory: str, names: list[str], schema: pa.Schema | None = None) -> list[pa.Table]:
        """The `<directory>/<name>.parquet` files of these writers that exist, in the order named, after one
        listing of the directory (not a request per name; not a glob either: a writer no longer in the job may have
        left files there)."""
        present = self.listed(directory)
        return [self.read_table(f"{directory}/{name}.parquet", schema=schema) for name in names
                if f"{directory}/{name}.parquet" in present]  # fmt: skip

    def read_folder(self, relative: str, columns: list[str] | None = None) -> pa.Table:
        """Every Parquet file under a folder of the run as one table (e.g. `selection`)."""
        return pq.read_table(self.path(relative), columns=columns, filesystem=self.fs)

    def iter_batches(self, relative: str, batch_size: int, columns: list[str] | None = None):
        """A Parquet file of the run as tables of `batch_size` rows, streamed."""
        with self.fs.open(self.path(relative), "rb") as fh:
            for batch in pq.ParquetFile(fh).iter_batches(batch_size=batch_size, columns=columns):
                yield pa.Table.from_batches([batch])

    def shard_ids(self) -> list[str]:
        """The run's shard ids in the order its plan lists them."""
        return self.read_table(PLAN, columns=["ordinal", "id"]).sort_by("ordinal").column("id").to_pylist()

    def document_batches(self, columns: list[str], batch_size: int):
        """Tables of the run's stored documents (these columns), a batch at a time, in shard order."""
        for shard in self.shard_ids():
            yield from self.iter_batches(documents_path(shard), batch_size, columns)

    def parquet_schema(self, relative: str) -> pa.Schema:
        with self.fs.open(self.path(relative), "rb") as fh:
            return pq.ParquetFile(fh).schema_arrow

    def row_groups(self, relative: str) -> int:
        with self.fs.open(self.path(relative), "rb") as fh:
            return pq.ParquetFile(fh).num_row_groups

    def read_row_group(self, relative: str, group: int, columns: list[str] | None = None) -> pa.Table:
        with self.fs.open(self.path(relative), "rb") as fh:
            return pq.ParquetFile(fh).read_row_group(group, columns=columns)

    def texts_at(self, shard: str, rows) -> list[str]:
        """Texts of some rows (sorted, unique) of a shard's documents, reading only the row groups that hold them."""
        with self.fs.open(self.path(documents_path(shard)), "rb") as fh:
            parquet = pq.ParquetFile(fh)
            starts = np.cumsum([0] + [parquet.metadata.row_group(g).num_rows for g in range(parquet.num_row_groups)])
            groups = np.unique(np.searchsorted(starts, rows, side="right") - 1)
            table = parquet.read_row_groups(groups.tolist(), columns=["text"])
        within = np.concatenate([np.arange(starts[g], starts[g + 1]) for g in groups]) if len(groups) else []
        return table.column("text").take(pa.array(np.searchsorted(within, rows))).to_pylist()

    def remove(self, pattern: str) -> int:
        """Delete the run's files matching a glob (relative); returns how many."""
        names = self.fs.glob(self.path(pattern))
        for name in names:
            self.fs.rm(name, recursive=True)
        return len(names)

    def done(self, marker: str, key: str) -> dict | None:
        """The report a task left at `marker` if it was written for `key` (the work is done), else None."""
        report = self.read_json(marker)
        return report if report is not None and report.get("key") == key else None

    def remove_temporaries(self) -> int:
        """Delete partial files left by a killed run (call with the lock held); returns how many."""
        leftovers = self.fs.glob(self.path("**", "*.tmp-*"))
        for leftover in leftovers:
            self.fs.rm(leftover)
        return len(leftovers)

    def parquet_writer(self, relative: str, schema: pa.Schema) -> ParquetShardWriter:
        return ParquetShardWriter(self, relative, schema)

    def lock(self) -> None:
        """Refuse a second run into this output while this one runs. A local folder is locked with `flock` for the
        process's life (the kernel releases it whatever ends the process); an object store gets a `.lock` object
        created only if absent (S3's conditional write), removed by `unlock`: a run killed outright leaves it, and the
        refusal says how to remove it."""
        holder = f"pid {os.getpid()} on {os.uname().nodename}"
        if not self.is_local:
            self._lock_object(f"{holder} since {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
            return
        if Path(self.root).exists() and not Path(self.root).is_dir():
            raise JobError(f"{self.url} is a file, not a folder: give the run an output folder")
        Path(self.root).mkdir(parents=True, exist_ok=True)
        handle = open(os.path.join(self.root, ".lock"), "a+")  # noqa: SIM115 - held open for the run
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            held_by = handle.read().strip() or "another process"
            handle.close()
            raise OutputLocked(
                f"{self.url} is in use by {held_by}; wait for it to finish or choose another output folder"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(holder + "\n")
        handle.flush()
        self._lock_handle = handle

    def _lock_object(self, holder: str) -> None:
        lock = self.path(".lock")
        try:
            with self.fs.open(lock, "xb") as fh:
                fh.write(holder.encode())
        except FileExistsError:
            try:
                held_by = self.fs.cat_file(lock).decode().strip()
            except FileNotFoundError:
                held_by = "another run (just finished)"
            raise OutputLocked(
                f"{self.url} is in use by {held_by}; wait for it to finish or choose another output folder. If that "
                f"run is gone (killed outright, so it could not remove its lock), delete {self.url}/.lock and run "
                "again"
            ) from None
        except (ValueError, NotImplementedError):  # a store that cannot create only if absent
            print(f"note: {self.url} cannot be locked; run one job into it at a time", file=sys.stderr)
            return
        self._lock_object_path = lock

    def unlock(self) -> None:
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None
        if self._lock_object_path is not None:
            self.fs.rm_file(self._lock_object_path)
            self._lock_object_path = None


class ParquetShardWriter:
    """Streams row groups to a temporary Parquet file; `commit` publishes it whole, `abort` removes it.

    As a context manager it commits when the block ends normally (the result is in `published`) and aborts when
    it raises, so a failed shard never leaves a file under its final name.
    """

    def __init__(self, folder: RunFolder, relative: str, schema: pa.Schema):
        self.folder = folder
        self.relative = relative
        self.final = folder.path(relative)
        folder.fs.makedirs(self.final.rsplit("/", 1)[0], exist_ok=True)
        self.temporary = folder._temporary(self.final)
        self._file = folder.fs.open(self.temporary, "wb")
        self._writer = pq.ParquetWriter(self._file, schema, compression=PARQUET_COMPRESSION)
        self.rows = 0
        self.published: dict | None = None

    def __enter__(self) -> ParquetShardWriter:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self.published = self.commit()
        else:
            self.abort()

    def write(self, table: pa.Table) -> None:
        if table.num_rows:
            self._writer.write_table(table)
            self.rows += table.num_rows

    def commit(self) -> dict:
        """Publish the file; returns its path (relative to the folder), rows, bytes and sha256. A failure (a full
        disk while the footer is written) removes the temporary file and raises."""
        try:
            self._writer.close()
            self._file.close()
            digest = hashlib.sha256()
            size = 0
            with self.folder.fs.open(self.temporary, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
                    size += len(chunk)
            self.folder._publish(self.temporary, self.final)
        except BaseException:
            self.abort()
            raise
        return {"path": self.relative, "rows": self.rows, "bytes": size, "sha256": digest.hexdigest()}

    def abort(self) -> None:
        try:
            self._writer.close()
            self._file.close()
        except OSError:
            pass  # closing a file on a full disk fails again; it is removed all the same
        finally:
            self.folder._discard(self.temporary)


def marker(directory: str, name: str) -> str:
    """A task's marker: `<directory>/_<name>.json` ('_': Parquet readers of the folder skip it)."""
    return f"{directory}/_{name}.json"


def documents_path(shard: str) -> str:
    return f"documents/{shard}.parquet"


def shard_report_path(shard: str) -> str:
    return f"shards/{shard}.json"


def selection_path(shard: str) -> str:
    return f"selection/{shard}.parquet"


def prefiltered_path(shard: str) -> str:
    return f"prefiltered/{shard}.parquet"


def prepassed_path(shard: str) -> str:
    return f"language_prepass/{shard}.parquet"


def selection_marker(shard: str) -> str:
    return marker("selection", shard)


def rule_selection_path(shard: str) -> str:
    """With dedup steps: the thresholds' selection, before dedup (which `selection/` holds after)."""
    return f"rule_selection/{shard}.parquet"


def rule_selection_marker(shard: str) -> str:
    return marker("rule_selection", shard)


def summary_path(rule: str, shard: str) -> str:
    return f"summaries/{rule}/{shard}.parquet"


def summary_marker(shard: str) -> str:
    return marker("summaries", shard)


def combined_path(rule: str, bucket: int) -> str:
    return f"summaries/combined/{rule}-{bucket:05d}.parquet"


def combined_marker(bucket: int) -> str:
    return marker("summaries/combined", f"{bucket:05d}")


def corpus_signals_path(shard: str) -> str:
    return f"corpus_signals/{shard}.parquet"


def corpus_signals_marker(shard: str) -> str:
    return marker("corpus_signals", shard)


def scores_path(name: str, shard: str) -> str:
    """A shard's signals of a job's model or buckets `name`."""
    return f"scores/{name}/{shard}.parquet"


def scores_marker(name: str, shard: str) -> str:
    return marker(f"scores/{name}", shard)


def bucket_reference_path(name: str) -> str:
    """The sorted values of each score a job's buckets `name` read percentiles from."""
    return f"scores/{name}/_reference.parquet"


def dedup_path(step: str, *parts: str) -> str:
    return "/".join(["dedup", step, *parts])


def decisions_path(step: str, shard: str) -> str:
    return dedup_path(step, "decisions", f"{shard}.parquet")


PLAN = "plan.parquet"
STATS = "stats.json"
JOB_COPY = "job.toml"  # the job file's bytes as the run's latest start read them
MANIFEST = "manifest.json"
TOKEN_MANIFEST = "tokens/manifest.json"
