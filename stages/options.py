"""The base of every stage's options: a frozen section of the job file that refuses unknown keys."""

from pydantic import BaseModel, ConfigDict


class StageOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def repeated(values: list) -> list:
    """The values listed more than once, sorted: for options whose list must not repeat itself."""
    return sorted({value for value in values if values.count(value) > 1})
