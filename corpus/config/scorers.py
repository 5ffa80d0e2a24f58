"""A job's scorers: its `[models.NAME]` (folders resolved, heads read) and `[buckets.NAME]`, as rules to select on."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from corpus.config import no_such_file, resolve_path
from corpus.errors import ClassifierError, JobError


def with_model_folders(job, path: Path):
    """The job's models with local folders resolved against the job file's folder (a hub id stays as given)."""
    from corpus.models.sequence_classifier import is_hub_id

    models = {}
    for name, options in job.models.items():
        resolved = resolve_path(options.model, path.parent)
        if not Path(resolved).exists() and not is_hub_id(options.model):
            raise no_such_file(path, f"models.{name}.model", resolved, "model folder")
        models[name] = options.model_copy(update={"model": resolved if Path(resolved).exists() else options.model})
    return job.model_copy(update={"models": models})


def model_rules(job, path: Path) -> dict:
    """The job's models as rules to select on (`corpus.models.heads.model_rule`), their heads read from their
    folders; a folder that cannot be scored with, or a name a rule has, is refused naming the key."""
    from corpus.models.heads import model_rule
    from corpus.models.sequence_classifier import describe
    from corpus.rulebook import discover

    rules = {}
    for name, options in job.models.items():
        if name in discover():
            problem = f"'{name}' is a rule's name; name the model otherwise"
            raise JobError(file=path, key=f"models.{name}", problem=problem)
        if not name.isidentifier():
            raise JobError(file=path, key=f"models.{name}", problem="a model's name is letters, digits and _")
        try:
            rules[name] = model_rule(name, describe(options, options.model))
        except ClassifierError as exc:
            raise JobError(file=path, key=f"models.{name}.model", problem=str(exc)) from None
    return rules


def bucket_rules(job, path: Path, registry: dict, computed: list[str]) -> dict:
    """The job's buckets as rules to select on; each score they read must be a computed numeric signal."""
    from corpus.stages.buckets import bucket_rule

    rules = {}
    for name, options in job.buckets.items():
        if name in registry or not name.isidentifier():
            problem = f"'{name}' names a rule or model already" if name in registry else "letters, digits and _ only"
            raise JobError(file=path, key=f"buckets.{name}", problem=problem)
        for column in options.scores:
            rule, _, signal = column.partition(".")
            signals = {s.name: s for s in registry[rule].signals} if rule in computed else {}
            if signal not in signals or pa.types.is_boolean(signals[signal].type):
                known = ", ".join(f"{r}.{s.name}" for r in computed for s in registry[r].signals
                                  if not pa.types.is_boolean(s.type))  # fmt: skip
                raise JobError(
                    file=path,
                    key=f"buckets.{name}.scores",
                    problem=f"'{column}' is not a numeric signal the job computes (those it does: {known})",
                )
        rules[name] = bucket_rule(name, options)
    return rules
