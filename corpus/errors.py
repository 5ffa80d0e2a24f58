"""Every error `corpus` raises for a user to read: one hierarchy, each class saying what kind of thing failed.

`CorpusError` is the root, so a caller (the CLI, a notebook) catches every message meant for a person with one
clause; the classes that are also a builtin kind (`ValueError`, `OSError`) stay one, for code that catches those.
A message names the file, record and field at fault and says what to do.
"""

from __future__ import annotations


class CorpusError(Exception):
    """Something a user can act on went wrong; the message says what and what to do."""


# Job files and runs
class JobError(CorpusError):
    """A job file that cannot be run; the message names the file and the key at fault."""


class StaleOutput(JobError):
    """The output folder holds shards made with other read/extract options."""


class RayUnavailable(JobError):
    """`RAY_ADDRESS` names a cluster that does not answer."""


class OutputLocked(CorpusError):
    """Another run holds this output folder."""


class AccountingError(CorpusError, AssertionError):
    """A stage lost or invented records: a bug in the stage, never a property of the input."""


# Inputs
class InputUnavailable(CorpusError, OSError):
    """A remote input that could not be read, after the retries: what the server or the network said."""


class InputFailed(CorpusError):
    """An input of which nothing could be read (not a WARC at all): its shard fails, so a rerun retries it."""


class DecodedTooLarge(CorpusError):
    """A compressed record body that inflates past the size limit: refused, so memory stays bounded."""


class DatasetError(CorpusError, ValueError):
    """A dataset input that does not fit the job's `[dataset]` mapping; the message names the file and columns."""


class TryInputError(CorpusError):
    """A file `corpus rules try` cannot take; the message says which and why."""


# Files a job names
class ModelFileError(CorpusError, ValueError):
    """A fastText model file that cannot be read; the message names the file and what is wrong."""


class ClassifierError(CorpusError, ValueError):
    """A model or labelled file that cannot be used; the message names the file and what to do."""


class TokenizerError(CorpusError):
    """A tokenizer file that cannot be used; the message names the file and what to do."""


class TaskError(CorpusError):
    """An evaluation task that cannot be read; the message says which and what to do."""
