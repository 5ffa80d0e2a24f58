"""A finished run read back: its job, shards, stored signals, selection and texts.

What the report (and anything else that reads a run without running it) needs, behind one object, so that none
of them knows the run folder's layout or the engine's modules. Nothing is re-run and no input is read.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from corpus.config.job import Job
from corpus.engine.export import job_of_run
from corpus.engine.plan import job_rules, stored_plan
from corpus.engine.run_folder import RunFolder, documents_path, prefiltered_path, prepassed_path, selection_path
from corpus.engine.select import keyed_by_language, resolve_quantiles, stored_signals
from corpus.errors import JobError
from corpus.rulebook import Rule

_STORED_PAGES = {"prefiltered": prefiltered_path, "prepassed": prepassed_path}


class StoredRun:
    """A complete run's folder and the job it was made with (as the run read it); reads, never writes."""

    def __init__(self, url: str | Path):
        self.folder = RunFolder(str(url))
        stats = self.folder.stats()
        if stats is None:
            raise JobError(f"{self.folder.url} has no stats.json: not a finished run (run `corpus run JOB` first)")
        self.stats: dict = stats
        self.job_file = Path(stats["job_file"])
        self.job: Job = job_of_run(self.folder, stats)
        self.shard_ids = [shard.id for shard in stored_plan(self.folder).shards]

    @property
    def url(self) -> str:
        return self.folder.url

    def rules(self, job: Job | None = None) -> list[Rule]:
        """The rule instances of the run's job (or of `job`, the run's with other thresholds)."""
        return job_rules(job or self.job)

    def thresholds(self, job: Job | None = None) -> list:
        """The job's thresholds, each quantile turned into a value over the run's documents."""
        return resolve_quantiles(job or self.job, self.shard_ids)

    def keyed_by_language(self) -> bool:
        """The run's documents carry their language key."""
        return keyed_by_language(self.job)

    def signals(self, shard: str, columns: list[str]) -> pa.Table:
        """`id` and these signal columns of a shard's documents (corpus rules' from their own files)."""
        return stored_signals(self.job, shard, columns)

    def documents(self, shard: str, columns: list[str]) -> pa.Table:
        """These columns of a shard's stored documents."""
        return self.folder.read_table(documents_path(shard), columns=columns)

    def selection(self, shard: str, columns: list[str] | None = None) -> pa.Table:
        """A shard's selection as the run decided it: kept, first failure, every failure, duplicate of."""
        return self.folder.read_table(selection_path(shard), columns=columns)

    def stored_pages(self, kind: str, schema: pa.Schema) -> pa.Table:
        """Pages dropped before extraction (`kind`: "prefiltered" or "prepassed"), as the shards stored them; a
        shard extracted before the run kept them has none."""
        path_of = _STORED_PAGES[kind]
        stored = [self.folder.read_table(path_of(i)) for i in self.shard_ids if self.folder.exists(path_of(i))]
        return pa.concat_tables(stored) if stored else schema.empty_table()

    def texts_at(self, shard: str, rows) -> list[str]:
        """The stored texts of these rows of a shard."""
        return self.folder.texts_at(shard, rows)
