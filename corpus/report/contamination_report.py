"""Contamination in a run report: per evaluation set, its items found in the run, in how many documents, where.

What a lab states when it ships a corpus (GPT-3's and Llama 3's contamination tables): for each evaluation set the
`decontamination` rule looked for, the items whose n-grams the crawl holds, the documents holding them, how many
of those the selection dropped, and the domains that carry the most.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa

RULE = "decontamination"
SIGNALS = ("ngrams", "sets", "item_ids")
TOP_DOMAINS = 5


def contamination_columns(job) -> list[str]:
    """The columns the report reads for contamination: the rule's, where the job computes it."""
    return [f"{RULE}.{signal}" for signal in SIGNALS] if RULE in dict(job.rule_settings) else []


def _set_sizes(rules: list) -> dict[str, tuple[int, int]]:
    """Per evaluation set of the run's rule: (its items, those shorter than the n-gram, never looked for); {} where
    its index cannot be made here (the evaluation files are gone)."""
    from corpus.rules.decontamination import evaluation_index

    rule = next((rule for rule in rules if rule.name == RULE), None)
    try:
        index = evaluation_index(rule.options)
    except (OSError, ValueError):
        return {}
    sizes = np.bincount(np.asarray(index.item_sets), minlength=len(index.sets))
    return {name: (int(sizes[s]), index.skipped[s]) for s, name in enumerate(index.sets)}


def contamination_table(documents: pa.Table, job, rules: list) -> list[dict]:
    """Per evaluation set found, most documents first: {"set", "items", "of", "too_short", "documents", "dropped",
    "domains"}; `documents` is the report's table (with `kept` and `domain`), `rules` the run's rule objects.
    Items found are counted from the ids each document stores (its first 32), so a document matching more items
    adds only those; "of" and "too_short" are the set's items and those shorter than the n-gram (None where the
    index cannot be made here)."""
    if not contamination_columns(job):
        return []
    sizes = _set_sizes(rules)
    found = np.flatnonzero(documents.column(f"{RULE}.ngrams").fill_null(0).to_numpy() > 0)
    chosen = documents.take(pa.array(found, pa.int64()))
    items, docs, dropped, domains = defaultdict(set), Counter(), Counter(), defaultdict(Counter)
    columns = (f"{RULE}.sets", f"{RULE}.item_ids", "kept", "domain")
    for sets, ids, kept, domain in zip(*(chosen.column(name).to_pylist() for name in columns), strict=True):
        for name in (sets or "").split(","):
            docs[name] += 1
            dropped[name] += not kept
            domains[name][domain or "(no domain)"] += 1
        for item in (ids or "").split(","):
            items[item.split("/", 1)[0]].add(item)
    return [
        {
            "set": name,
            "items": len(items[name]),
            "of": sizes.get(name, (None, None))[0],
            "too_short": sizes.get(name, (None, None))[1],
            "documents": count,
            "dropped": dropped[name],
            "domains": ", ".join(f"{domain} ({n})" for domain, n in domains[name].most_common(TOP_DOMAINS)),
        }
        for name, count in sorted(docs.items(), key=lambda pair: (-pair[1], pair[0]))
    ]
