"""What an object store's client refusing a request means to a user (s3fs raises botocore's own errors, which are
not OSError, for a missing credential or an unreachable endpoint)."""

from __future__ import annotations

CREDENTIALS = (
    "an s3:// path needs credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or the machine's "
    "role (and FSSPEC_S3_ENDPOINT_URL for another S3-protocol store)"
)


def store_refusal(exc: BaseException) -> str | None:
    """A message saying what happened and what to do, for an object store's client error; None for any other."""
    try:
        from botocore import exceptions
    except ImportError:  # no S3 filesystem installed: no such errors
        return None
    if isinstance(exc, exceptions.NoCredentialsError | exceptions.PartialCredentialsError):
        return f"the object store refused: {exc}; {CREDENTIALS}"
    if isinstance(exc, exceptions.EndpointConnectionError):
        return f"{exc}; check FSSPEC_S3_ENDPOINT_URL (for a store other than AWS) and this machine's network"
    if isinstance(exc, exceptions.BotoCoreError):
        return f"the object store refused: {type(exc).__name__}: {exc}"
    return None
