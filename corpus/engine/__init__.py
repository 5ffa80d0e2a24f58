"""The engine: the only code that imports Ray or fsspec or knows the run folder's layout.

What the report, the lab and the CLI may use of it is named here, and nothing else: a run's folder and a finished
run read back, the runners of a job, and the task runner the lab's training runs go through. Each name loads its
module on first use, so reading a run's files (the trainer's token stream) needs neither Ray nor the job model:
the GPU check runs where only torch, numpy and pyarrow are.
"""

from corpus.engine.run_folder import RunFolder

_MODULE_OF = {
    # a run's files, and a finished run read back
    "StoredRun": "stored_run",
    # running a job
    "run_job": "run",
    "dry_run": "run",
    "completed_shards": "run",
    "ensure_ray": "run",
    "export_documents": "export",
    # tasks of one's own on the same runners (the lab's training runs), and stopping them
    "Task": "tasks",
    "Context": "tasks",
    "kind": "tasks",
    "run_phase": "tasks",
    "Runners": "run",
    "RunProgress": "progress",
    "INTERRUPTED": "tasks",
    # what a person is told
    "ALL_STAGES": "stats",
    "store_refusal": "stores",
}


def __getattr__(name: str):
    if name in _MODULE_OF:
        import importlib

        return getattr(importlib.import_module(f"corpus.engine.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module 'corpus.engine' has no attribute {name!r}")


__all__ = ["RunFolder", *_MODULE_OF]
