"""Run reports: what each rule threw away, read from a run's stored signals and selection, no pipeline re-run.

`load_run(run_dir)` gathers, per document, its URL, domain, word count, every signal the job's thresholds read,
and its selection (kept, first failure, every failure, the duplicate it matched). With `select_file` (a TOML file
with a `[select]` table, as in a job), that file's thresholds replace the job's same ones and are applied to the
stored signals: "what would this threshold delete?" (dedup is not re-run: the run's duplicates stay duplicates).

`report_data` computes the funnel (down to what the token shards hold), per-rule drops (alone and exclusively:
documents, words, and tokens by the run's tokenizer when it has one), the overlap between rules, samples of
dropped documents with their offending span and of kept ones nearest each threshold, and the top domains by
documents dropped; `corpus.report.html_page` renders it as one page.
"""

from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.config.job import Job, resolve_rules
from corpus.errors import JobError
from corpus.report.contamination_report import contamination_columns, contamination_table
from corpus.report.score_report import score_columns, score_tables
from corpus.rulebook import load_once
from corpus.stages.dedup import STEP_REASONS
from corpus.stages.extract import PREPASS_DROP, PREPASS_SCHEMA
from corpus.stages.select import EXCLUDED, LANGUAGE_KEY, select_documents
from corpus.stages.tokenize import TextTokenizer

if TYPE_CHECKING:
    from corpus.engine import StoredRun

EXCERPT_CHARS = 240
TOKEN_SHARDS_STEP = "in token shards"
# Why the funnel's last two rows differ in tokens: said under the funnel, on the page and in the terminal.
TOKENS_NOTE = (
    "tokens: of each document's stored text, by the run's tokenizer; the token shards hold the texts after the "
    "job's text modifiers (line removal, masking), a separator after each document"
)


@dataclass
class RunView:
    job: Job  # the run's, with the select file's thresholds where one is given
    run: StoredRun
    documents: pa.Table  # id, url, domain, words, (tokens), shard, row, thresholds' columns, the selection
    thresholds: list  # stages.select.Threshold, resolved
    hypothetical: bool
    prefiltered: pa.Table | None = None  # pages [prefilter] rules dropped: id, url, source, offset, reasons, signals
    prepassed: pa.Table | None = None  # pages the language pre-pass dropped: id, url, source, offset, language, score

    @property
    def stats(self) -> dict:
        return self.run.stats


def load_run(run_dir: str | Path, select_file: str | Path | None = None) -> RunView:
    """A complete run's documents with their signals and selection (or `select_file`'s)."""
    from corpus.engine import StoredRun
    from corpus.stages.prefilter import prefiltered_schema

    run = StoredRun(run_dir)
    job_file, job = run.job_file, run.job
    if select_file is not None:
        select_path = Path(select_file)
        try:
            select = tomllib.loads(select_path.read_text()).get("select", {})
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise JobError(f"{select_path}: cannot read a [select] table: {exc}") from None
        try:  # the job's own paths stay relative to the job file; a mistake in [select] names the select file
            _, thresholds = resolve_rules(job.model_copy(update={"select": merged(job.select, select)}), job_file)
        except JobError as exc:
            raise JobError(exc.rendered(file=str(select_path))) from None
        job = job.model_copy(update={"thresholds": thresholds})
    thresholds = run.thresholds(job)
    columns = [threshold.column for threshold in thresholds] + ([LANGUAGE_KEY] if run.keyed_by_language() else [])
    columns = list(dict.fromkeys(columns + score_columns(job) + contamination_columns(job)))
    parts = []
    for shard_id in run.shard_ids:
        signals = run.signals(shard_id, columns)
        documents = run.documents(shard_id, ["url", "domain", "text"])
        if select_file is None:
            selection = run.selection(shard_id).select(["kept", "first_failure", "failures", "duplicate_of"])
        else:
            selected = select_documents(signals, thresholds)[0].table
            ran = run.selection(shard_id, ["first_failure", "duplicate_of"])
            selection = _with_run_duplicates(selected, ran)
        words = pc.list_value_length(pc.utf8_split_whitespace(documents.column("text")))
        table = signals
        for name in ("url", "domain"):
            table = table.append_column(name, documents.column(name))
        table = table.append_column("words", words.cast(pa.int64()))
        # Texts stay on disk (samples read theirs back): a report holds signals, not a corpus.
        table = table.append_column("shard", pa.array([shard_id] * table.num_rows, pa.string()))
        table = table.append_column("row", pa.array(np.arange(table.num_rows), pa.int64()))
        if job.tokenize.tokenizer:  # tokens of the stored text by the run's tokenizer (dropped documents too)
            tokenizer = load_once(TextTokenizer, job.tokenize.tokenizer, job.tokenize.separator)
            counts = [len(tokens) for tokens in tokenizer.encode(documents.column("text").to_pylist())]
            table = table.append_column("tokens", pa.array(counts, pa.int64()))
        for name in selection.column_names:
            table = table.append_column(name, selection.column(name))
        parts.append(table)
    if not parts:
        raise JobError(f"{run.url} holds no shard of its job")
    prefiltered = prepassed = None
    if job.prefilter.rules:
        prefilter_rules = [rule for rule in run.rules(job) if rule.name in job.prefilter.rules]
        prefiltered = run.stored_pages("prefiltered", prefiltered_schema(prefilter_rules))
    if job.extract.prepass_languages:
        prepassed = run.stored_pages("prepassed", PREPASS_SCHEMA)
    return RunView(job, run, pa.concat_tables(parts), thresholds, select_file is not None, prefiltered, prepassed)


def merged(job_select: dict, select: dict) -> dict:
    """The job's `[select]` with a select file's on top: each threshold the file sets replaces the job's, every other
    stays (a file that sets `words.min` leaves the job's `words.max` and other rules as they were); a file that
    lists `rules` selects by those rules only."""
    result = dict(job_select)
    if "rules" in select:
        result = {key: value for key, value in result.items() if not isinstance(value, dict) or key in select["rules"]}
    for key, value in select.items():
        both_tables = isinstance(value, dict) and isinstance(result.get(key), dict)
        result[key] = merged(result[key], value) if both_tables else value
    return result


def _with_run_duplicates(selected: pa.Table, ran: pa.Table) -> pa.Table:
    """A hypothetical selection with the run's dedup decisions: dedup is not re-run, so a document the run dropped
    as a duplicate is one still, where the new thresholds keep it."""
    kept = selected.column("kept").to_numpy(zero_copy_only=False).copy()
    first = selected.column("first_failure").to_pylist()
    failures = selected.column("failures").to_pylist()
    duplicate_of = [None] * len(kept)
    for row, (reason, original) in enumerate(zip(*(ran.column(c).to_pylist() for c in ran.column_names), strict=True)):
        if kept[row] and reason in STEP_REASONS.values():
            kept[row], first[row], failures[row], duplicate_of[row] = False, reason, [reason], original
    return pa.table(
        {
            "kept": pa.array(kept),
            "first_failure": pa.array(first, pa.string()),
            "failures": pa.array(failures, selected.schema.field("failures").type),
            "duplicate_of": pa.array(duplicate_of, pa.string()),
        }
    )


def _rule_of(reasons: pa.Array) -> np.ndarray:
    """The rule of each reason (`rule.signal.bound` -> `rule`; a dedup reason or `excluded` is its own), as an
    object array (None where the reason is null)."""
    return pc.list_element(pc.split_pattern(reasons, ".", max_splits=1), 0).to_numpy(zero_copy_only=False)


def _failing_matrix(docs: pa.Table, names: list[str]) -> np.ndarray:
    """(documents, rules) booleans: the document (or prefiltered page) fails some threshold of the rule."""
    failures = docs.column("failures").combine_chunks()
    rules = _rule_of(pc.list_flatten(failures))
    parents = pc.list_parent_indices(failures).to_numpy()
    matrix = np.zeros((docs.num_rows, len(names)), bool)
    for column, name in enumerate(names):
        matrix[parents[rules == name], column] = True
    return matrix


def report_data(view: RunView, sample: int = 5, seed: int = 0) -> dict:
    """Everything the report shows, as plain data (the HTML and the terminal render it)."""
    docs = view.documents
    words = docs.column("words").to_numpy()
    tokens = docs.column("tokens").to_numpy() if "tokens" in docs.column_names else None

    def amount(mask: np.ndarray) -> dict:
        return {"words": int(words[mask].sum()), "tokens": int(tokens[mask].sum()) if tokens is not None else None}

    kept = docs.column("kept").to_numpy(zero_copy_only=False)
    first = docs.column("first_failure").combine_chunks()
    first_rule = _rule_of(first)
    reasons = [t.reason for t in view.thresholds]
    rule_names = list(dict.fromkeys(t.rule for t in view.thresholds))
    fails = _failing_matrix(docs, rule_names)
    stages = view.stats["stages"]

    def pages(step: str, documents: int) -> dict:  # a step counting pages or records: no text to count in
        return {"step": step, "documents": documents, "words": None, "tokens": None}

    funnel = [pages("records read", view.stats["totals"]["records"])]
    funnel.append(pages("HTML pages and texts", stages["read"]["kept"]))
    if view.job.prefilter.rules:  # what those rules dropped was never extracted: not among the documents
        funnel.append(pages(f"before extraction: {', '.join(view.job.prefilter.rules)}", stages["prefilter"]["kept"]))
    if view.job.extract.prepass_languages:  # pages the pre-pass read as another language, never extracted
        left = stages["prefilter"]["kept"] - stages["extract"]["dropped"].get(PREPASS_DROP, 0)
        funnel.append(pages("before extraction: language pre-pass", left))
    remaining = np.ones(len(docs), bool)
    funnel.append({"step": "extracted", "documents": len(docs), **amount(remaining)})
    order = rule_names + [EXCLUDED] * bool((first_rule == EXCLUDED).any())
    order += [STEP_REASONS[step] for step in view.job.dedup.steps]
    for rule in order:
        remaining &= first_rule != rule
        funnel.append({"step": rule, "documents": int(remaining.sum()), **amount(remaining)})
    funnel.append({"step": "kept", "documents": int(kept.sum()), **amount(kept)})
    written = view.stats.get("tokens")
    if written and not view.hypothetical:  # what the shards hold: the texts after the job's modifiers
        funnel.append({**pages(TOKEN_SHARDS_STEP, written["documents"]), "tokens": written["tokens"]})

    rules = []
    exclusive_of_all = fails & (fails.sum(axis=1) == 1)[:, None]
    for column, rule in enumerate(rule_names):
        alone, exclusive = fails[:, column], exclusive_of_all[:, column]
        rules.append(
            {
                "rule": rule,
                "documents": int(alone.sum()),
                **amount(alone),
                "exclusive_documents": int(exclusive.sum()),
                "exclusive": amount(exclusive),
                "dropped_first": int((first_rule == rule).sum()),
            }
        )
    early = view.job.prefilter.rules if view.prefiltered is not None else []  # rules that dropped pages, not documents
    dropped_early = _failing_matrix(view.prefiltered, early) if early else np.zeros((0, 0), bool)
    for row in rules:
        row["before_extraction"] = int(dropped_early[:, early.index(row["rule"])].sum()) if row["rule"] in early else 0
    counted = {
        row["values"]: row["counts"] for row in pc.value_counts(pc.list_flatten(docs.column("failures"))).to_pylist()
    }
    failing = {reason: counted.get(reason, 0) for reason in reasons}
    overlap = (fails.T.astype(np.int64) @ fails.astype(np.int64)).tolist()
    dedup = {STEP_REASONS[step]: int((first_rule == STEP_REASONS[step]).sum()) for step in view.job.dedup.steps}

    rng = np.random.default_rng(seed)
    sampled: dict[str, list[int]] = {}
    for rule in [*rule_names, *dedup]:
        rows = np.flatnonzero(fails[:, rule_names.index(rule)] if rule in rule_names else first_rule == rule)
        sampled[rule] = _sample(rng, rows, sample)
    nearest: dict = {}
    for threshold in view.thresholds:
        values = docs.column(threshold.column)
        if pa.types.is_boolean(values.type) or threshold.value is None:
            continue
        numbers = values.cast(pa.float64()).to_numpy(zero_copy_only=False)
        candidates = np.flatnonzero(kept & ~np.isnan(numbers))
        if len(candidates) == 0 or np.ptp(numbers[candidates]) == 0:
            continue  # every kept document has the same value: none is nearer the threshold than another
        distance = np.abs(numbers[candidates] - float(threshold.value))
        nearest[threshold] = candidates[np.argsort(distance, kind="stable")[:sample]].tolist()
    texts = _texts(view, [row for rows in [*sampled.values(), *nearest.values()] for row in rows])
    rule_objects = {rule.name: rule for rule in view.run.rules(view.job)}
    samples = {
        rule: [_document(view, row, texts[row], rule_objects.get(rule)) for row in rows]
        for rule, rows in sampled.items()
    }
    for column, rule in enumerate(early):  # a rule run before extraction dropped pages, not documents: its sample
        chosen = _sample(rng, np.flatnonzero(dropped_early[:, column]), sample)
        samples[rule] = samples.get(rule, []) + [_prefiltered_page(view, row, rule_objects[rule]) for row in chosen]
    if view.prepassed is not None and view.prepassed.num_rows:  # the language pre-pass dropped pages, too
        chosen = _sample(rng, np.arange(view.prepassed.num_rows), sample)
        samples[PREPASS_DROP] = [_prepassed_page(view.prepassed.slice(row, 1).to_pylist()[0]) for row in chosen]
    near = {
        threshold.reason: [_document(view, row, texts[row], rule_objects.get(threshold.rule)) for row in rows]
        for threshold, rows in nearest.items()
    }

    by_domain = (
        pa.table({"domain": docs.column("domain"), "dropped": pc.invert(docs.column("kept")).cast(pa.int64())})
        .group_by("domain")
        .aggregate([("dropped", "sum"), ("dropped", "count")])
        .to_pylist()
    )
    by_domain = sorted(
        (row for row in by_domain if row["dropped_sum"]), key=lambda r: (-r["dropped_sum"], str(r["domain"]))
    )
    top_domains = [
        {"domain": row["domain"], "dropped": row["dropped_sum"], "documents": row["dropped_count"]}
        for row in by_domain[:20]
    ]
    return {
        "job": view.job.name,
        "run": view.job.output,
        "hypothetical": view.hypothetical,
        "before_extraction": early,  # the rules run before extraction, whose drops are pages, not documents
        "funnel": funnel,
        "languages": _language_funnel(view, first_rule, amount),
        "scores": score_tables(docs, view.job),
        "contamination": contamination_table(docs, view.job, list(rule_objects.values())),
        "rules": rules,
        "failing": failing,
        "thresholds": {t.reason: t.value for t in view.thresholds},
        "overlap": {"rules": rule_names, "matrix": overlap},
        "dedup": dedup,
        "samples": samples,
        "near_threshold": near,
        "domains": top_domains,
    }


def _language_funnel(view: RunView, first_rule: np.ndarray, amount) -> list[dict]:
    """Per language key, most documents first: documents, those left after each rule and dedup, kept words, and
    whose thresholds it had (its own from `[select] per_language`, or the job's)."""
    docs = view.documents
    if LANGUAGE_KEY not in docs.column_names:
        return []
    keys = np.array(pc.fill_null(docs.column(LANGUAGE_KEY), "none").to_pylist(), dtype=object)
    kept = docs.column("kept").to_numpy(zero_copy_only=False)
    configured = {key for t in view.thresholds for key, _ in t.by_language}
    rows = []
    for key in sorted(set(keys), key=lambda k: (-(keys == k).sum(), k)):
        mine = keys == key
        rows.append(
            {
                "language": key,
                "documents": int(mine.sum()),
                "dropped_by": dict(Counter(first_rule[mine & ~kept].tolist()).most_common()),
                "kept": int((mine & kept).sum()),
                "kept_words": amount(mine & kept)["words"],
                "thresholds": "per_language" if key in configured else "job",
            }
        )
    return rows


def _texts(view: RunView, rows: list[int]) -> dict[int, str]:
    """The stored texts of these rows of the view, one read per shard."""
    wanted = np.unique(np.asarray(rows, np.int64))
    shards = view.documents.column("shard").take(pa.array(wanted)).to_numpy(zero_copy_only=False)
    within = view.documents.column("row").take(pa.array(wanted)).to_numpy()
    texts: dict[int, str] = {}
    for shard in np.unique(shards):
        here = shards == shard
        texts.update(zip(wanted[here].tolist(), view.run.texts_at(shard, within[here]), strict=True))
    return texts


def _document(view: RunView, row: int, text: str, rule) -> dict:
    docs = view.documents
    url = docs.column("url")[row].as_py()
    values = {
        t.column: docs.column(t.column)[row].as_py()
        for t in view.thresholds
        if rule is not None and t.rule == rule.name
    }
    span = rule.offending_span(text, url) if rule is not None else None
    source = (url or "") if span is not None and span.in_url else text
    start, end = (span.start, span.end) if span is not None else (0, 0)
    begin = max(0, start - EXCERPT_CHARS // 2)
    return {
        "id": docs.column("id")[row].as_py(),
        "url": url,
        "signals": values,
        "failures": docs.column("failures")[row].as_py() or [],
        "duplicate_of": _described(docs, docs.column("duplicate_of")[row].as_py()),
        "span_label": span.label if span is not None else None,
        "span_in_url": bool(span is not None and span.in_url),
        "before": source[begin:start] if span is not None else "",
        "match": source[start:end] if span is not None else "",
        "after": source[end : end + EXCERPT_CHARS // 2] if span is not None else text[:EXCERPT_CHARS],
        "before_extraction": None,  # where a page dropped before extraction was (`_prefiltered_page`)
    }


def _sample(rng: np.random.Generator, rows: np.ndarray, sample: int) -> list[int]:
    """Up to `sample` of `rows`, drawn without replacement, in order."""
    return sorted(rng.choice(rows, min(sample, len(rows)), replace=False).tolist()) if len(rows) else []


def _prefiltered_page(view: RunView, row: int, rule) -> dict:
    """A page a rule dropped before extraction: its signals, and the span of its URL the rule objects to."""
    page = view.prefiltered.slice(row, 1).to_pylist()[0]
    signals = {t.column: page[t.column] for t in view.thresholds if t.rule == rule.name}
    shown = _page_dropped_early(page, signals, page["failures"] or [])
    url = page["url"] or ""
    span = rule.offending_span("", url)
    if span is None:
        return shown
    begin = max(0, span.start - EXCERPT_CHARS // 2)
    return shown | {
        "span_label": span.label,
        "span_in_url": True,
        "before": url[begin : span.start],
        "match": url[span.start : span.end],
        "after": url[span.end : span.end + EXCERPT_CHARS // 2],
    }


def _prepassed_page(page: dict) -> dict:
    """A page the language pre-pass dropped: the language and score it read."""
    signals = {name: page[name] for name in (f"{PREPASS_DROP}.lang", f"{PREPASS_DROP}.score")}
    return _page_dropped_early(page, signals, [PREPASS_DROP])


def _page_dropped_early(page: dict, signals: dict, failures: list[str]) -> dict:
    """A page dropped before extraction as `_document` gives a document: no text, where its record is."""
    return {
        "id": page["id"],
        "url": page["url"],
        "signals": signals,
        "failures": failures,
        "duplicate_of": None,
        "span_label": None,
        "span_in_url": False,
        "before": "",
        "match": "",
        "after": "",
        "before_extraction": f"{page['source']} at byte {page['offset']:,}",
    }


def _described(docs: pa.Table, doc_id: str | None) -> str | None:
    """A document named by its URL (ids such as `urn:uuid:...` mean nothing to a reader), else its id."""
    if doc_id is None:
        return None
    at = pc.index(docs.column("id"), doc_id).as_py()
    url = docs.column("url")[at].as_py() if at >= 0 else None
    return url or doc_id
