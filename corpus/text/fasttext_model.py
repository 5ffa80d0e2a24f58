"""fastText supervised model files (lid.176 for language ID) read into arrays.

They are applied to UTF-8 text by `corpus.text.fasttext_predict` with fastText's own arithmetic, so the top label
and its probability are fastText's (`tests/text/test_fasttext_model.py` compares them on real pages and trained
models). Only the top label: the quality classifier, which needs the probability of one given label, keeps the
library's `predict`.

Why not the library's `predict`: a pruned model (`.ftz`, as lid.176.ftz is) looks every sub-word's bucket up in a
`std::unordered_map` twice, two thirds of lid.176's time per page; here a bucket's row is one array read. And the text
goes in as the UTF-8 bytes the extractor already made, with no Python string slicing, replacing or re-encoding.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from numba import njit

from corpus.errors import ModelFileError
from corpus.text.fasttext_predict import (
    HS,
    NS,
    OVA,
    SOFTMAX,
    ModelArrays,
    bucket_rows_of,
    fnv32,
    sigmoid_table,
    subword_rows,
    top_label,
    top_labels,
)

_MAGIC, _VERSIONS = 793712314, (11, 12)
_SUPERVISED = 3
_EOS = b"</s>"
_KSUB = 256  # centroids per sub-quantizer (fastText's 8 bits)
_ENTRY_TAIL = struct.Struct("<qb")


@dataclass(frozen=True)
class FastTextModel:
    """A supervised model's labels (without `__label__`) and the arrays prediction reads."""

    labels: tuple[str, ...]
    arrays: ModelArrays

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "model") -> FastTextModel:
        return _parse(data, name)

    def predict(self, text: bytes | np.ndarray, max_chars: int) -> tuple[str | None, float | None]:
        """The top label and its probability for the first `max_chars` characters of UTF-8 `text`, its line breaks
        read as spaces: what fastText's `predict` says of that prefix."""
        data = np.frombuffer(text, np.uint8) if isinstance(text, bytes) else text
        return self._answer(*top_label(data, max_chars, self.arrays))

    def predict_many(
        self, data: np.ndarray, offsets: np.ndarray, max_chars: int
    ) -> tuple[list[str | None], list[float | None]]:
        """`predict` of each text data[offsets[i]:offsets[i + 1]] (uint8 UTF-8, int64 offsets), in one kernel call."""
        labels, scores = top_labels(data, offsets, max_chars, self.arrays)
        answers = [self._answer(label, score) for label, score in zip(labels.tolist(), scores.tolist(), strict=True)]
        return [label for label, _ in answers], [score for _, score in answers]

    def _answer(self, label: int, score: float) -> tuple[str | None, float | None]:
        return (None, None) if label < 0 else (self.labels[label], min(float(score), 1.0))


class _Reader:
    def __init__(self, data: bytes, name: str):
        self.data, self.name, self.at = data, name, 0

    def take(self, dtype, count: int = 1) -> np.ndarray:
        size = np.dtype(dtype).itemsize * count
        if self.at + size > len(self.data):
            raise ModelFileError(f"{self.name}: the file ends inside the model (truncated?); download it again")
        out = np.frombuffer(self.data, dtype, count, self.at)
        self.at += size
        return out

    def one(self, dtype):
        return self.take(dtype)[0].item()

    def entry(self) -> tuple[bytes, int, int]:
        """A vocabulary entry: the word up to its NUL, its count (int64), its type (int8: 0 word, 1 label)."""
        end = self.data.find(b"\0", self.at)
        if end < 0 or end + 10 > len(self.data):
            raise ModelFileError(f"{self.name}: a vocabulary entry has no end; not a fastText model file")
        word = self.data[self.at : end]
        count, kind = _ENTRY_TAIL.unpack_from(self.data, end + 1)
        self.at = end + 10
        return word, count, kind


def check_header(head: bytes, name: str) -> None:
    """Raises `ModelFileError` unless the file's first 64 bytes start a fastText classifier (supervised model)."""
    r = _Reader(head, name)
    magic, version = (r.one("<i4"), r.one("<i4")) if len(head) >= 8 else (None, None)
    if magic != _MAGIC or version not in _VERSIONS:
        raise ModelFileError(f"{name}: not a fastText model file; give a fastText .bin or .ftz classifier")
    if r.take("<i4", 8)[7] != _SUPERVISED:
        raise ModelFileError(f"{name}: a fastText word-vector model, not a classifier; give a supervised model")


def _parse(data: bytes, name: str) -> FastTextModel:
    check_header(data[:64], name)
    r = _Reader(data, name)
    version = r.take("<i4", 2)[1]
    dim, _ws, _epoch, _min_count, _neg, word_ngrams, loss, _model, bucket, minn, maxn, _lr_rate = r.take("<i4", 12)
    r.take("<f8")  # t
    if version == 11:  # fastText's rule: supervised models of version 11 have no character n-grams
        maxn = 0
    size, nwords, nlabels = r.take("<i4", 3)
    r.take("<i8")  # tokens seen in training
    pruned = r.one("<i8")
    words, counts, types = zip(*(r.entry() for _ in range(size)), strict=True) if size else ((), (), ())
    prune_pairs = r.take("<i4", 2 * max(pruned, 0)).reshape(-1, 2)
    quantized = r.one("<u1")
    input_rows = _quantized_rows(r) if quantized else _dense_rows(r)
    quantized_output = r.one("<u1")
    if quantized and quantized_output:
        raise ModelFileError(
            f"{name}: its output matrix is quantized (qout), which corpus does not read; quantize "
            "the model without qout"
        )
    output_rows = _dense_rows(r)
    if input_rows.shape[1] != dim or output_rows.shape[1] != dim:
        raise ModelFileError(
            f"{name}: matrices of {input_rows.shape[1]} and {output_rows.shape[1]} columns in a "
            f"model of dimension {dim}; the file is damaged"
        )
    if loss not in (HS, NS, SOFTMAX, OVA):
        raise ModelFileError(f"{name}: loss {loss} is not one of fastText's (hs, ns, softmax, ova)")

    if pruned < 0:  # not pruned: bucket b is row nwords + b
        bucket_rows = np.arange(nwords, nwords + bucket, dtype=np.int32)
    else:  # pruned: only the kept buckets have rows (none when the model kept none)
        bucket_rows = np.full(bucket, -1, np.int32)
        bucket_rows[prune_pairs[:, 0]] = nwords + prune_pairs[:, 1]
    encoded = words[:nwords]
    word_offsets = np.zeros(nwords + 1, np.int64)
    np.cumsum([len(w) for w in encoded], out=word_offsets[1:])
    word_bytes = np.frombuffer(b"".join(encoded) or b"\0", np.uint8)
    word_hashes = _hashes32(word_bytes, word_offsets)
    vocab_table = _vocab_table(word_hashes)
    eos = encoded.index(_EOS) if _EOS in encoded else -1
    buckets = bucket_rows_of(bucket_rows)
    word_rows, word_row_offsets = _word_rows(word_bytes, word_offsets, eos, minn, maxn, bucket, buckets)
    labels = tuple(w.decode("utf-8", "replace").removeprefix("__label__") for w in words[nwords:])
    label_counts = np.array(counts[nwords:], np.int64)
    if len(labels) != nlabels or any(t != 1 for t in types[nwords:]):
        raise ModelFileError(f"{name}: its vocabulary lists {len(labels)} labels where it declares {nlabels}")
    left = right = np.zeros(0, np.int32)
    if loss == HS:
        left, right = _huffman_tree(label_counts)
    arrays = ModelArrays(
        int(loss),
        int(minn),
        int(maxn),
        int(word_ngrams),
        int(bucket),
        eos,
        np.uint64(_hash32(_EOS)),
        vocab_table,
        word_hashes,
        word_bytes,
        word_offsets,
        word_rows,
        word_row_offsets,
        buckets,
        input_rows,
        output_rows,
        left,
        right,
        sigmoid_table(),
    )
    return FastTextModel(labels, arrays)


def _dense_rows(r: _Reader) -> np.ndarray:
    m, n = r.take("<i8", 2)
    return r.take("<f4", int(m * n)).reshape(int(m), int(n)).copy()


def _quantizer(r: _Reader) -> tuple[int, int, int, int, np.ndarray]:
    dim, nsubq, dsub, lastdsub = (int(v) for v in r.take("<i4", 4))
    return dim, nsubq, dsub, lastdsub, r.take("<f4", dim * _KSUB)


def _quantized_rows(r: _Reader) -> np.ndarray:
    """A product-quantized matrix decoded to float32 rows: each coordinate is its centroid value (times the row's
    quantized norm), the one term fastText's `addcode` adds for it, so sums over decoded rows are fastText's."""
    qnorm = r.one("<u1")
    m, n = (int(v) for v in r.take("<i8", 2))
    codesize = r.one("<i4")
    codes = r.take("<u1", codesize)
    dim, nsubq, dsub, lastdsub, centroids = _quantizer(r)
    rows = np.empty((m, n), np.float32)
    codes = codes.reshape(m, nsubq)
    for q in range(nsubq):
        width = lastdsub if q == nsubq - 1 else dsub
        base = q * _KSUB * dsub
        table = centroids[base : base + _KSUB * width].reshape(_KSUB, width)
        rows[:, q * dsub : q * dsub + width] = table[codes[:, q]]
    if qnorm:
        norm_codes = r.take("<u1", m)
        norm_centroids = _quantizer(r)[4]
        rows *= norm_centroids[norm_codes][:, None]
    return rows


def _hash32(word: bytes) -> int:
    return int(_hashes32(np.frombuffer(word, np.uint8), np.array([0, len(word)], np.int64))[0])


@njit(cache=True)
def _hashes32(data, offsets):
    out = np.empty(len(offsets) - 1, np.int64)
    for w in range(len(offsets) - 1):
        h = np.uint64(2166136261)
        for k in range(offsets[w], offsets[w + 1]):
            h = fnv32(h, data[k])
        out[w] = h
    return out


@njit(cache=True)
def _vocab_table(word_hashes):
    size = 1
    while size < 2 * len(word_hashes) + 2:
        size *= 2
    table = np.zeros(size, np.int32)
    for word in range(len(word_hashes)):
        slot = word_hashes[word] & (size - 1)
        while table[slot]:
            slot = (slot + 1) & (size - 1)
        table[slot] = word + 1
    return table


def _huffman_tree(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fastText's `HierarchicalSoftmaxLoss::buildTree` over the labels' counts (in the file's order)."""
    n = len(counts)
    count = np.full(2 * n - 1, 10**15, np.int64)
    count[:n] = counts
    left = np.full(2 * n - 1, -1, np.int32)
    right = np.full(2 * n - 1, -1, np.int32)
    leaf, node = n - 1, n
    for i in range(n, 2 * n - 1):
        pair = []
        for _ in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                pair.append(leaf)
                leaf -= 1
            else:
                pair.append(node)
                node += 1
        left[i], right[i] = pair
        count[i] = count[pair[0]] + count[pair[1]]
    return left, right


@njit(cache=True)
def _word_rows(word_bytes, word_offsets, eos, minn, maxn, bucket, buckets):
    """Each vocabulary word's input rows, as fastText's `initNgrams`: its own, then its sub-words' (none for the
    end-of-sentence word)."""
    nwords = len(word_offsets) - 1
    offsets = np.zeros(nwords + 1, np.int64)
    # a word of b bytes has at most (b + 2) * maxn sub-words ('<' and '>' around it): room for all, and its own row
    rows = np.empty(nwords + (len(word_bytes) + 2 * nwords) * (maxn + 1), np.int32)
    count = 0
    token = np.empty(len(word_bytes) + 2, np.uint8)
    for w in range(nwords):
        rows[count] = w
        count += 1
        if w != eos and maxn > 0:
            length = word_offsets[w + 1] - word_offsets[w]
            token[0] = 60
            token[1 : length + 1] = word_bytes[word_offsets[w] : word_offsets[w + 1]]
            token[length + 1] = 62
            count = subword_rows(token, length + 2, minn, maxn, bucket, buckets, rows, count)
        offsets[w + 1] = count
    return rows[:count].copy(), offsets
