"""Job files: TOML in, a validated `Job` out (`job`), its inputs resolved and checked (`inputs`)."""

from corpus.errors import JobError


def no_such_file(job_file, key: str, resolved: str, what: str = "file") -> JobError:
    """A path in a job file that names nothing: the job file, the key, the path as resolved, and how."""
    problem = f"no such {what} {resolved!r} (relative paths are read from the job file's folder)"
    return JobError(problem, job_file, key)
