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
    """A job file that cannot be run: the file, the key at fault and what is wrong.

    The message is built from those fields, so a caller that stands for a job file in other terms (`apply_rules`'
    arguments, a `--select` file) renders the same error in its own with `rendered`, never by editing the text.
    `form`: "key" (`FILE: key 'K': PROBLEM`), "unknown" (`FILE: unknown key 'K'PROBLEM`), "missing"
    (`FILE: missing required key 'K'`). A message given alone (no file, no key) is the whole message.
    """

    def __init__(self, problem: str, file: object = None, key: str | None = None, form: str = "key"):
        self.problem, self.file, self.key, self.form = problem, (str(file) if file else None), key, form
        self.parts: tuple[JobError, ...] = (self,)
        super().__init__(self.rendered())

    @classmethod
    def joined(cls, errors: list[JobError]) -> JobError:
        """Several mistakes of one file, one per line."""
        error = cls("\n".join(str(e) for e in errors))
        error.parts = tuple(errors)
        return error

    def rendered(self, file: str | None = None, key_name=None) -> str:
        """The message naming the job file `file` and each key `key_name(key)` (default: `'select.x.y'`)."""
        if len(self.parts) > 1:
            return "\n".join(part.rendered(file, key_name) for part in self.parts)
        where = f"{file or self.file}: " if self.file else ""
        if self.key is None:
            return where + self.problem
        key = key_name(self.key) if key_name else f"'{self.key}'"
        if self.form == "unknown":
            return f"{where}unknown key {key}{self.problem}"
        if self.form == "missing":
            return f"{where}missing required key {key}"
        return f"{where}key {key}: {self.problem}"


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
