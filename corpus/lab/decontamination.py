"""Decontamination: the documents of a run that share n-grams with what an ablation scores its models on.

The same index and lookup as the pipeline's `decontamination` rule (`corpus.text.ngram_index`: n-grams of `ngram`
words, 13 as GPT-3, NFKC, case and punctuation folded): each stored document's n-grams are looked up in the
n-grams of each reference set and of each task's scored items. Documents sharing any are excluded from every
variant, and each variant's summary says how many that removed, per reference set or task.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.config.job import Job
from corpus.engine import RunFolder
from corpus.text.batch import DocumentBatch
from corpus.text.ngram_index import NgramIndex, build_index, find_matches, ngrams_per_set


def scored_index(scored_texts: dict[str, list[str]], ngram: int) -> NgramIndex:
    """The index of every reference set's and task's texts, a set per name."""
    return build_index({name: [(f"{name}/{n}", text) for n, text in enumerate(texts)] for name, texts in
                        scored_texts.items()}, ngram)  # fmt: skip


def overlap_counts(texts: list[str], index: NgramIndex) -> np.ndarray:
    """(texts, sets): how many of each text's n-grams each set of the index holds."""
    return ngrams_per_set(find_matches(DocumentBatch(texts), index), index, len(texts))


def decontaminate(documents: Job, scored_texts: dict[str, list[str]], tokenizer, ngram: int) -> pa.Table:
    """Per stored document, in one pass over the texts: its id, its tokens (of the extracted text and a separator,
    for the variants' counts) and, per reference set or task, how many of its n-grams the set holds."""
    index = scored_index(scored_texts, ngram)
    parts = []
    for table in RunFolder(documents.output).document_batches(["id", "text"], documents.read.batch_size):
        texts = table.column("text").to_pylist()
        tokens = [len(ids) + 1 for ids in tokenizer.encode(texts)]  # + the separator, as the token shards count
        columns = {"id": table.column("id"), "tokens": pa.array(tokens, pa.int64())}
        counts = overlap_counts(texts, index)
        columns.update({name: pa.array(counts[:, s].astype(np.int32)) for s, name in enumerate(index.sets)})
        parts.append(pa.table(columns))
    return pa.concat_tables(parts)


def write_exclusions(folder: RunFolder, overlap: pa.Table, scored: list[str], drop: bool) -> int:
    """`decontamination.parquet` (`overlap`: per document its tokens and the n-grams it shares with each reference
    set and task) and `excluded.parquet` (the documents sharing any, when `drop`); returns how many share any."""
    with folder.parquet_writer("decontamination.parquet", overlap.schema) as writer:
        writer.write(overlap)
    contaminated = np.zeros(overlap.num_rows, bool)
    for name in scored:
        contaminated |= overlap.column(name).to_numpy() > 0
    dropped = contaminated if drop else np.zeros_like(contaminated)
    excluded = overlap.select(["id"]).filter(pa.array(dropped))
    with folder.parquet_writer("excluded.parquet", excluded.schema) as writer:
        writer.write(excluded)
    return int(contaminated.sum())


def _sharing(documents: pa.Table, references: list[str]) -> dict:
    return {
        reference: {
            "documents": int((documents.column(reference).to_numpy() > 0).sum()),
            "ngrams": int(documents.column(reference).to_numpy().sum()),
        }
        for reference in references
    }


def contamination_removed(selection: pa.Table, overlap: pa.Table, references: list[str]) -> dict:
    """Per reference set, the documents (and their shared n-grams) the variant lost to decontamination."""
    removed = selection.filter(pc.equal(selection.column("first_failure"), "excluded")).column("id")
    return _sharing(overlap.filter(pc.is_in(overlap.column("id"), value_set=removed.combine_chunks())), references)


def contamination_kept(selection: pa.Table, overlap: pa.Table, references: list[str]) -> dict:
    """Per reference set, the documents (and their shared n-grams) the variant's training data still holds: none
    where decontamination drops them, else what its rules kept."""
    kept = selection.filter(selection.column("kept")).column("id")
    return _sharing(overlap.filter(pc.is_in(overlap.column("id"), value_set=kept.combine_chunks())), references)
