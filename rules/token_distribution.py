"""Token-distribution outliers: documents whose words are distributed unlike the corpus's.

Llama 3 (Dubey et al. 2024, section 3.1.1): "we use a token-distribution Kullback-Leibler divergence to filter
out documents containing excessive numbers of outlier tokens compared to the training corpus distribution".
A first pass counts the corpus's word unigrams (lower-cased runs of letters, digits and '_') in 2^22 hashed
buckets, summed over all shards; a second pass gives each document KL(document || corpus) in nats (no
smoothing is needed: the corpus contains the document) and the share of its words seen at most `rare_count`
times in the whole corpus.
Select the top tail away with a quantile, e.g. `[select.token_distribution] kl.max_quantile = 0.99`, or an
absolute threshold.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

from corpus.rulebook import CorpusRule, RuleOptions, Signal, register
from corpus.text.batch import DocumentBatch

BUCKETS = 1 << 22


def bucketed_words(docs: DocumentBatch) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, bucket of each word) for the batch: words are runs of letters, digits or '_', lower-cased. Their
    own simple split (`folded_words`), not the shared spaCy-like words: no parity to keep here, and cheaper."""
    offsets, hashes = docs.folded_words
    return offsets, (hashes % np.uint64(BUCKETS)).astype(np.int64)


@njit(cache=True)
def _divergence(offsets, buckets, corpus, total, rare_count):
    n_docs = len(offsets) - 1
    kl = np.zeros(n_docs, np.float32)
    rare = np.zeros(n_docs, np.float32)
    for d in range(n_docs):
        words = np.sort(buckets[offsets[d] : offsets[d + 1]])
        n = len(words)
        if n == 0:
            continue
        divergence = 0.0
        rare_words = 0
        i = 0
        while i < n:
            j = i
            while j < n and words[j] == words[i]:
                j += 1
            p = (j - i) / n
            q = corpus[words[i]] / total  # > 0: the corpus contains this document
            divergence += p * np.log(p / q)
            if corpus[words[i]] <= rare_count:
                rare_words += j - i
            i = j
        kl[d] = divergence
        rare[d] = rare_words / n
    return kl, rare


@register
class TokenDistribution(CorpusRule):
    """KL divergence of a document's word distribution from the corpus's, and its share of rare words (Llama 3)."""

    class Options(RuleOptions):
        rare_count: int = 2  # a word seen at most this often in the whole corpus is rare

    name = "token_distribution"
    version = 2
    signals = (
        Signal("kl", pa.float32(), "KL(document || corpus) over word unigrams, nats"),
        Signal("rare_frac", pa.float32(), "share of the document's words that are rare in the corpus", most=1),
    )

    summary_schema = pa.schema([("bucket", pa.int64()), ("count", pa.int64())])
    summary_keys = ("bucket",)

    def accumulate(self, docs: DocumentBatch) -> pa.Table:
        """Word buckets and their counts, sparse: a shard's summary is as large as its vocabulary, not 2^22."""
        buckets, counts = np.unique(bucketed_words(docs)[1], return_counts=True)
        return pa.table([buckets.astype(np.int64), counts.astype(np.int64)], schema=self.summary_schema)

    def corpus_signals(self, docs: DocumentBatch, summary: pa.Table) -> dict:
        buckets, counts = summary.column("bucket").to_numpy(), summary.column("count").to_numpy()
        corpus = np.zeros(BUCKETS, np.int64)
        corpus[buckets] = counts
        offsets, buckets = bucketed_words(docs)
        kl, rare = _divergence(offsets, buckets, corpus, float(counts.sum()), self.options.rare_count)
        return {"kl": kl, "rare_frac": rare}
