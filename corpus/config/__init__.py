"""Job files: TOML in, a validated `Job` out (`job`), and every fingerprint and cache key of a job (`keys`)."""

from pathlib import Path

from corpus.errors import JobError


def resolve_path(entry: str, base: Path) -> str:
    """Relative local paths are relative to the job file's folder; URLs are left as they are."""
    if "://" in entry:
        return entry
    path = Path(entry).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


def no_such_file(job_file, key: str, resolved: str, what: str = "file") -> JobError:
    """A path in a job file that names nothing: the job file, the key, the path as resolved, and how."""
    problem = f"no such {what} {resolved!r} (relative paths are read from the job file's folder)"
    return JobError(problem, job_file, key)
