"""Every fingerprint and cache key of a run, over sorted-key JSON.

A canonical encoding, never pickle: a key is the same under any Python or library version, and reading one never
runs code."""

from __future__ import annotations

import hashlib
import json

from corpus.config.job import Job
from corpus.rulebook import PATH_OPTION, content_sha256, discover
from corpus.stages import extract
from corpus.stages.dedup import key_fields


def cache_key(*parts) -> str:
    """16 hex digits over the JSON of `parts` (dicts by sorted key; tuples as lists)."""
    encoded = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode()).hexdigest()[:16]


def fingerprint(job: Job) -> str:
    """Hash of every option that changes a shard's documents (with the rules and thresholds applied before
    extraction); shards made under another fingerprint are stale."""
    options = {"read": job.read.model_dump(), "extract": job.extract.model_dump()}
    if job.dataset != type(job.dataset)():  # a [dataset] table maps dataset inputs; a crawl's shards never read it
        options["dataset"] = job.dataset.model_dump()
    if job.extract.prepass_languages:  # what the pre-pass reads decides what it drops
        options["prepass"] = {"version": extract.PREPASS_VERSION, "chars": extract.PREPASS_CHARS}
    if job.prefilter.rules:
        names = set(job.prefilter.rules)
        options["prefilter"] = {
            "rules": _rule_entries(job, names),
            "thresholds": thresholds_key([t for t in job.thresholds if t.rule in names]),
        }
    return hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:16]


def _rule_entries(job: Job, names: set[str] | None = None) -> list:
    """Each computed rule (or those in `names`): its versioned name, settings and the contents of its files."""
    registry = discover()
    rules = []
    for name, options in job.rule_settings:
        if names is not None and name not in names:
            continue
        fields = registry[name].Options.model_fields
        files = {
            option: content_sha256(value)
            for option, value in options.items()
            if value and PATH_OPTION in fields[option].metadata
        }
        rules.append((registry[name].versioned_name(), options, files))
    return rules


def annotate_fingerprint(job: Job) -> str:
    """Hash of the rules computed, their versions and settings (with the contents of the files they name: a model
    retrained in place), and of the dedup keys stored: signals made under another one are recomputed. Dedup's
    bands and rows are not in it: they only regroup stored signatures. The datasets' own columns are in it."""
    keys = [field.name for field in key_fields(job.dedup)]
    if "minhash" in job.dedup.stored_keys():
        minhash = job.dedup.minhash
        keys.append({"ngram": minhash.ngram, "permutations": minhash.permutations, "seed": minhash.seed})
    content = {
        "rules": _rule_entries(job),
        "dedup_keys": keys,
        # the datasets' columns every file stores: an input with a new column rewrites them all
        "input_schema": hashlib.sha256(job.input_schema).hexdigest(),
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def thresholds_key(thresholds: list) -> list:
    """The part of a key that a list of resolved thresholds contributes."""
    return [(t.reason, t.value, t.by_language) for t in thresholds]
