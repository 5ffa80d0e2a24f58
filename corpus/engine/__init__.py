"""The engine: the only code that imports Ray or fsspec or knows the run folder's layout."""

from corpus.engine.run import StaleOutput, completed_shards, ensure_ray, run_job
from corpus.engine.run_folder import OutputLocked, RunFolder

__all__ = ["OutputLocked", "RunFolder", "StaleOutput", "completed_shards", "ensure_ray", "run_job"]
