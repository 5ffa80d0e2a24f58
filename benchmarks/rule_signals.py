"""Every signal of every rule family on >= 5,000 real documents, against datatrove's filter chain, on one core.

Ours: every rule (the UT1 blocklist, FineWeb's word lists and LDNOOBW from ../shared/data), every signal of
every document: the annotate stage's document rules plus both passes of the corpus rules (token distribution,
PII domains). Peer: datatrove's GopherRepetitionFilter ->
GopherQualityFilter -> C4QualityFilter -> FineWebQualityFilter chain, which stops at a document's first failing
filter (so it does less work per document than we do). Goal: ours >= 20x the peer's docs/s.

datatrove is the one the `parity` extra installs beside corpus (`--datatrove-python PYTHON`: one of another venv):

    pip install -e '.[parity]'
    python benchmarks/rule_signals.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from real_documents import benchmark_arguments, real_documents

BATCH = 1000

DATATROVE_CHAIN = r"""
import json, sys, time
import pyarrow.parquet as pq
from datatrove.data import Document
from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                        GopherRepetitionFilter)
texts = pq.read_table(sys.argv[1], columns=["text"]).column("text").to_pylist()
chain = [GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(), FineWebQualityFilter()]
chain[1].filter(Document(text="warm up the tokenizer", id="0"))
started = time.perf_counter()
kept = 0
for i, text in enumerate(texts):
    doc = Document(text=text, id=str(i))
    for step in chain:
        verdict = step.filter(doc)
        if verdict is not True and (not isinstance(verdict, tuple) or verdict[0] is not True):
            break
    else:
        kept += 1
print(json.dumps({"seconds": time.perf_counter() - started, "kept": kept, "documents": len(texts)}))
"""


def our_rules(shared: Path):
    from corpus.rulebook import discover

    registry = discover()
    lists = shared / "lists-datatrove"
    settings = {
        "url": {
            "blocklist": str(lists / "url_filterblacklistsv0_3_0.tar.gz"),
            "banned_words": str(lists / "banned_words.txt"),
            "banned_subwords": str(lists / "banned_subwords.txt"),
            "soft_banned_words": str(lists / "soft_banned_words.txt"),
        },
        "dirty_words": {"lists": str(shared / "lists-ldnoobw")},
    }
    order = [
        "url",
        "language",
        "gopher_repetition",
        "gopher_quality",
        "c4",
        "fineweb",
        "olmo2",
        "top_word",
        "dirty_words",
        "pii",
        "token_distribution",
        "pii_domains",
        "line_dedup",
    ]
    return [registry[name](registry[name].Options.model_validate(settings.get(name, {}))) for name in order]


def main() -> None:
    args = benchmark_arguments(__doc__, datatrove=True)

    import pyarrow as pa

    from corpus.rules.url import hashed_list
    from corpus.stages.annotate import annotate_documents
    from corpus.text.batch import DocumentBatch
    from corpus.text.tokenizers import forget_chunks

    documents = real_documents(args.shared)
    words = sum(len(t.split()) for t in documents.column("text").to_pylist()) / documents.num_rows
    print(f"{documents.num_rows:,} real documents from {args.shared}, {words:.0f} words on average; 1 core\n")

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    blocklist = hashed_list(str(args.shared / "lists-datatrove" / "url_filterblacklistsv0_3_0.tar.gz"), "domains")
    load_s = time.perf_counter() - started
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"UT1 blocklist: {len(blocklist):,} domains loaded in {load_s:.2f} s, {blocklist.nbytes / 2**20:.0f} MiB "
        f"held (peak RSS +{(rss_after - rss_before) / 1024:.0f} MiB while loading)"
    )

    rules = our_rules(args.shared)
    base = pa.table(
        {
            "id": documents.column("id"),
            "url": documents.column("url"),
            "text": documents.column("text"),
            "lang": documents.column("lang"),
            "lang_score": pa.array([1.0] * documents.num_rows, pa.float32()),
        }
    )
    from corpus.stages.schema import DOCUMENTS

    table = pa.table(
        {
            name: base.column(name) if name in base.column_names else pa.nulls(base.num_rows, field.type)
            for name, field in zip(DOCUMENTS.names, DOCUMENTS, strict=True)
        },
        schema=DOCUMENTS,
    )
    from corpus.rulebook import CorpusRule

    document_rules = [rule for rule in rules if not isinstance(rule, CorpusRule)]
    corpus_rules = [rule for rule in rules if isinstance(rule, CorpusRule)]
    annotate_documents(table.slice(0, 50), document_rules)  # compile the Numba kernels
    # Each language's word tokenizer is loaded once per process (spaCy's French rules take ~3 s to build): loaded
    # here before the clock, as datatrove's side loads its one; the chunk caches then start empty.
    first_of = dict(zip(documents.column("lang").to_pylist(), documents.column("text").to_pylist(), strict=True))
    started = time.perf_counter()
    _ = DocumentBatch([text[:300] for text in first_of.values()], langs=list(first_of)).words
    print(f"word tokenizers of {len(first_of)} languages loaded in {time.perf_counter() - started:.1f} s")
    forget_chunks()
    for rule in corpus_rules:
        small = DocumentBatch.from_table(table.slice(0, 50))
        rule.corpus_signals(small, rule.summarize([rule.accumulate(small)]))

    def every_signal(chosen: list) -> tuple[float, dict]:
        """Seconds for pass 1 (document rules, corpus summaries) and pass 2 (corpus rules' signals) over all
        documents, and the corpus rules' summaries."""
        started = time.perf_counter()
        corpus = [rule for rule in chosen if isinstance(rule, CorpusRule)]
        per_document = [rule for rule in chosen if rule not in corpus]
        parts: dict[str, list] = {rule.name: [] for rule in corpus}
        for offset in range(0, table.num_rows, BATCH):
            annotate_documents(table.slice(offset, BATCH), per_document)
            docs = DocumentBatch.from_table(table.slice(offset, BATCH))
            for rule in corpus:
                parts[rule.name].append(rule.accumulate(docs))
        summaries = {rule.name: rule.summarize(parts[rule.name]) for rule in corpus}
        for offset in range(0, table.num_rows, BATCH):
            docs = DocumentBatch.from_table(table.slice(offset, BATCH))
            for rule in corpus:
                rule.corpus_signals(docs, summaries[rule.name])
        return time.perf_counter() - started, summaries

    signals = sum(len(rule.signals) for rule in rules)
    seconds, combined = every_signal(rules)
    ours_rate = table.num_rows / seconds
    default_rules = [rule for rule in rules if not rule.opt_in]  # olmo2: GPT-NeoX tokenization, opt-in
    default_signals = sum(len(rule.signals) for rule in default_rules)
    default_rate = table.num_rows / every_signal(default_rules)[0]

    per_rule = {}
    for rule in rules:
        started = time.perf_counter()
        for offset in range(0, table.num_rows, BATCH):
            docs = DocumentBatch.from_table(table.slice(offset, BATCH))
            if isinstance(rule, CorpusRule):
                rule.corpus_signals(docs, combined[rule.name])
            else:
                rule.modify(docs) if rule.modifies_text else rule.compute(docs)
        per_rule[rule.name] = time.perf_counter() - started
    print(
        "ours, per family alone (each re-tokenising its batch): "
        + ", ".join(f"{name} {table.num_rows / s:,.0f}/s" for name, s in per_rule.items())
    )

    peer_rate = None
    if args.datatrove_python:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "docs.parquet"
            import pyarrow.parquet as pq

            pq.write_table(documents.select(["text"]), path)
            script = Path(tmp) / "chain.py"
            script.write_text(DATATROVE_CHAIN)
            done = subprocess.run(
                [args.datatrove_python, str(script), str(path)], capture_output=True, text=True, check=True
            )
            peer = json.loads(done.stdout.strip().splitlines()[-1])
            peer_rate = peer["documents"] / peer["seconds"]

    print()
    print(f"{'measure':<58}{'ours':>10}{'datatrove':>12}{'ratio':>9}")
    peer_text = f"{peer_rate:>12,.1f}" if peer_rate else f"{'-':>12}"
    for label, rate in (
        (f"docs/s, all {signals} signals vs Gopher+C4+FineWeb chain", ours_rate),
        (f"docs/s, the {default_signals} of the default families (no opt-in olmo2)", default_rate),
    ):
        ratio = f"{rate / peer_rate:>8.1f}x" if peer_rate else f"{'-':>9}"
        print(f"{label:<58}{rate:>10,.0f}{peer_text}{ratio}")
    print("\ngoal: ours >= 20x datatrove's chain per core, ours computing every signal of every family")


if __name__ == "__main__":
    main()
