"""Job files: TOML in, a validated `Job` out (`job`), its inputs resolved and checked (`inputs`)."""


class JobError(Exception):
    """A job file that cannot be run; the message names the file and the key at fault."""
