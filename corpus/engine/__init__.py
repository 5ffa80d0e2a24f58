"""The engine: the only code that imports Ray or fsspec or knows the run folder's layout."""

from corpus.engine.run_folder import RunFolder

_RUN = ("completed_shards", "dry_run", "ensure_ray", "run_job")


def __getattr__(name: str):
    """The run's names load with their module on first use, so that reading a run's files (the trainer's token
    stream) needs neither Ray nor the job model: the GPU check runs where only torch, numpy and pyarrow are."""
    if name in _RUN:
        from corpus.engine import run

        return getattr(run, name)
    raise AttributeError(f"module 'corpus.engine' has no attribute {name!r}")


__all__ = ["RunFolder", *_RUN]
