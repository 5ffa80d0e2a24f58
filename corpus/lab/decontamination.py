"""Decontamination: the documents of a run that share n-grams with what an ablation scores its models on.

Each stored document's n-grams of `ngram` words (13, as GPT-3; MinHash's shingle kernel) are looked up in the
n-grams of each reference set and of each task's scored items. Documents sharing any are excluded from every
variant, and each variant's summary says how many that removed, per reference set or task.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from corpus.config.job import Job
from corpus.engine import RunFolder


def overlap_counts(texts: list[str], reference: np.ndarray, ngram: int) -> np.ndarray:
    """Per text, how many of its n-grams of `ngram` words (MinHash's shingles) occur in `reference` (sorted unique
    n-gram hashes)."""
    from corpus.stages.dedup import shingle_hashes
    from corpus.text.batch import DocumentBatch

    offsets, hashes = shingle_hashes(DocumentBatch(texts), ngram)
    found = np.isin(hashes, reference, assume_unique=False).astype(np.int64)
    sums = np.concatenate([[0], np.cumsum(found)])
    return (sums[offsets[1:]] - sums[offsets[:-1]]).astype(np.int32)


def decontaminate(documents: Job, scored_texts: dict[str, list[str]], tokenizer, ngram: int) -> pa.Table:
    """Per stored document, in one pass over the texts: its id, its tokens (of the extracted text and a separator,
    for the variants' counts) and, per reference set or task, how many of its n-grams the set holds."""
    from corpus.stages.dedup import shingle_hashes
    from corpus.text.batch import DocumentBatch, sorted_unique

    sets = {name: sorted_unique(shingle_hashes(DocumentBatch(texts), ngram)[1]) for name, texts in scored_texts.items()}
    parts = []
    for table in RunFolder(documents.output).document_batches(["id", "text"], documents.read.batch_size):
        texts = table.column("text").to_pylist()
        tokens = [len(ids) + 1 for ids in tokenizer.encode(texts)]  # + the separator, as the token shards count
        columns = {"id": table.column("id"), "tokens": pa.array(tokens, pa.int64())}
        columns.update({name: pa.array(overlap_counts(texts, hashes, ngram)) for name, hashes in sets.items()})
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


def contamination_removed(selection: pa.Table, overlap: pa.Table, references: list[str]) -> dict:
    """Per reference set, the documents (and their shared n-grams) the variant lost to decontamination."""
    removed = selection.filter(pc.equal(selection.column("first_failure"), "excluded")).column("id")
    lost = overlap.filter(pc.is_in(overlap.column("id"), value_set=removed.combine_chunks()))
    return {
        reference: {
            "documents": int((lost.column(reference).to_numpy() > 0).sum()),
            "ngrams": int(lost.column(reference).to_numpy().sum()),
        }
        for reference in references
    }
