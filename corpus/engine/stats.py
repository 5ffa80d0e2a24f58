"""Run-level accounting: sum the shard reports into `stats.json` and the summary a user reads."""

from __future__ import annotations

from collections import Counter

from corpus import __version__
from corpus.config.job import Job
from corpus.config.per_language import languages_without_settings
from corpus.engine.shards import STAGES
from corpus.stages.accounting import StageCounts, check_chain
from corpus.text.tokenizers import split_otherwise_warnings

MAX_ERROR_EXAMPLES = 200
ALL_STAGES = (*STAGES, "select", "dedup")


def stage_counts(report: dict) -> list[StageCounts]:
    """A shard report's counts in pipeline order (the JSON keeps them sorted by name)."""
    return [StageCounts.from_dict(stage, report["stages"][stage]) for stage in STAGES]


def _dedup_summary(job: Job, counts: StageCounts | None) -> dict | None:
    if not job.dedup.steps:
        return None
    summary = {
        "steps": list(job.dedup.steps),
        "received": counts.received if counts else None,
        "dropped": dict(counts.dropped) if counts else None,
    }
    if "minhash" in job.dedup.steps:
        bands, rows = job.dedup.minhash.bands_rows()
        summary["minhash"] = {**job.dedup.minhash.model_dump(), "bands": bands, "rows": rows}
    return summary


EVERY_DOCUMENT_MIN = 20  # under this many documents, one threshold failing all of them says little


def _thresholds_failing_everything(thresholds: list, failing: Counter, select: StageCounts | None) -> list[str]:
    """A threshold that every selected document fails is most likely a mistake in its value (a percentage where a
    fraction is meant): said, not left to be found in an empty corpus."""
    if select is None or select.received < EVERY_DOCUMENT_MIN:
        return []
    return [
        f"{t.reason} = {t.value} fails every one of the {select.received:,} documents: check its value"
        for t in thresholds
        if failing[t.reason] == select.received
    ]


def _language_funnel(languages: dict[str, list[int]], thresholds: list) -> dict[str, dict]:
    """Per language key, most documents first: documents, those the thresholds keep, and whose thresholds applied
    ("per_language": its own, from `[select] per_language`; "job": the job's)."""
    configured = {key for t in thresholds for key, _ in t.by_language}
    return {
        key: {"documents": n, "kept_by_rules": kept, "thresholds": "per_language" if key in configured else "job"}
        for key, (n, kept) in sorted(languages.items(), key=lambda item: (-item[1][0], item[0]))
    }


def _empty_inputs(reports: list[dict]) -> list[str]:
    """A warning naming the inputs that held no record at all (an empty or truncated file, a wrong path in a
    listing): complete, but likely not what the user meant to read."""
    empty = [r["source"] for r in reports if r["stages"]["read"]["received"] == 0 and r.get("part") is None]
    if not empty:
        return []
    more = f" and {len(empty) - 1:,} more" if len(empty) > 1 else ""
    return [f"{len(empty):,} input(s) held no record at all: {empty[0]}{more}; check that they are the files meant"]


def summarize(
    job: Job,
    reports: list[dict],
    selections: dict[str, dict],
    failed: dict[str, str],
    wall_seconds: float,
    thresholds: list,
    tokenized: dict[str, dict] | None = None,
    emptied: int = 0,
    chars: tuple[int, int] = (0, 0),
) -> dict:
    """Everything a run did, from its shard reports (including shards completed by an earlier attempt) and the
    selection of each shard; `emptied` and `chars` (stored, after the modifiers): what the tokenize tasks
    counted of the kept documents."""
    stages = {stage: StageCounts(stage) for stage in ALL_STAGES}
    errors: list[dict] = []
    failing: Counter = Counter()
    languages: dict[str, list[int]] = {}
    split_otherwise: Counter = Counter()
    per_shard = {}
    for report in reports:
        chain = stage_counts(report)
        selection = selections.get(report["id"])
        if selection is not None:
            chain.append(StageCounts.from_dict("select", selection["select"]))
            failing.update(selection["failing"])
            split_otherwise.update(selection.get("split_otherwise", {}))
            for key, (documents, kept_by_rules) in selection.get("languages", {}).items():
                funnel = languages.setdefault(key, [0, 0])
                funnel[0] += documents
                funnel[1] += kept_by_rules
            if "dedup" in selection:
                chain.append(StageCounts.from_dict("dedup", selection["dedup"]))
        check_chain(chain, f"shard {report['id']}")
        for counts in chain:
            stages[counts.stage].merge(counts)
        errors.extend(report["errors"])
        per_shard[report["id"]] = {"source": report["source"], "stages": {c.stage: c.to_dict() for c in chain}}
    if len(selections) < len(reports):
        del stages["select"]  # a shard failed selection: totals stop at annotate, and the run reports it
    if "select" not in stages or not job.dedup.steps:
        del stages["dedup"]

    chain = list(stages.values())
    records = chain[0].received if chain else 0
    kept = chain[-1].kept if chain else 0
    dropped: Counter = Counter()
    error_counts: Counter = Counter()
    for counts in chain:
        dropped.update(counts.dropped)
        error_counts.update(counts.errors)
    fresh = [r for r in reports if not r.get("skipped")]
    fresh_records = sum(r["stages"]["read"]["received"] for r in fresh)
    fresh_documents = sum(r["documents"]["rows"] for r in fresh if r["documents"])
    return {
        "job": job.name,
        "job_file": job.source_file,
        "job_sha256": job.source_sha256,
        "corpus_version": __version__,
        "output": job.output,
        "documents_from": job.documents_from or None,  # an ablation variant: the run holding its documents
        "shards": {
            "planned": len(reports) + len(set(failed) - {r["source"] for r in reports}),
            "complete": len(reports),
            "skipped_complete": sum(1 for r in reports if r.get("skipped")),
            "failed": len(failed),
        },
        "failed_shards": failed,
        "input_retries": sum(r.get("input_retries", 0) for r in fresh),  # remote reads made again, this run
        "totals": {
            "records": records,
            "kept": kept,
            "dropped": dict(sorted(dropped.items())),
            "errors": dict(sorted(error_counts.items())),
            "unaccounted": records - kept - sum(dropped.values()) - sum(error_counts.values()),
        },
        "stages": {name: counts.to_dict() for name, counts in stages.items()},
        "rules": {
            threshold.reason: {
                "value": threshold.value,
                "failing": failing[threshold.reason],
                "dropped_first": stages["select"].dropped[threshold.reason] if "select" in stages else 0,
            }
            for threshold in thresholds
        },
        "dedup": _dedup_summary(job, stages.get("dedup")),
        "languages": _language_funnel(languages, thresholds),
        "warnings": _thresholds_failing_everything(thresholds, failing, stages.get("select"))
        + _empty_inputs(reports)
        + languages_without_settings(languages, thresholds)
        + split_otherwise_warnings(split_otherwise),
        "tokens": (
            {
                "documents": sum(r["documents"] for r in tokenized.values()),
                "tokens": sum(r["tokens"] for r in tokenized.values()),
                "files": sum(len(r["files"]) for r in tokenized.values()),
                "emptied_by_modifiers": emptied,  # counted by the shards' tokenize tasks, not by shuffle buckets
                # the kept documents' characters as stored, and as the modifiers left them to be tokenized
                "characters": {"stored": chars[0], "after_modifiers": chars[1]},
            }
            if tokenized is not None
            else None
        ),
        "per_shard": per_shard,
        "throughput": {
            "wall_seconds": round(wall_seconds, 3),
            "records_this_run": fresh_records,
            "documents_this_run": fresh_documents,
            "records_per_s": round(fresh_records / wall_seconds, 2) if wall_seconds else None,
            "documents_per_s": round(fresh_documents / wall_seconds, 2) if wall_seconds else None,
        },
        "error_examples": errors[:MAX_ERROR_EXAMPLES],
    }
