"""The base of every stage's options: a frozen section of the job file that refuses unknown keys."""

from pydantic import BaseModel, ConfigDict


class StageOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
