"""fastText supervised models (lid.176 for language ID) read from their file bytes and applied to UTF-8 text in Numba,
with fastText's own arithmetic: the same tokens, sub-word hashes, float32 sums and tree walk, so the top label and its
probability are fastText's (`tests/test_fasttext_model.py` compares them on real pages and trained models). Only the
top label: the quality classifier, which needs the probability of one given label, keeps the library's `predict`.

Why not the library's `predict`: a pruned model (`.ftz`, as lid.176.ftz is) looks every sub-word's bucket up in a
`std::unordered_map` twice, two thirds of lid.176's time per page; here a bucket's row is one array read. And the text
goes in as the UTF-8 bytes the extractor already made, with no Python string slicing, replacing or re-encoding.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from numba import njit

_MAGIC, _VERSIONS = 793712314, (11, 12)
_HS, _NS, _SOFTMAX, _OVA = 1, 2, 3, 4
_SUPERVISED = 3
_LABEL_PREFIX = b"__label__"
_EOS = b"</s>"
_KSUB = 256  # centroids per sub-quantizer (fastText's 8 bits)
_ENTRY_TAIL = struct.Struct("<qb")


class ModelFileError(ValueError):
    pass


@dataclass(frozen=True)
class FastTextModel:
    """What prediction needs of a supervised model, as arrays: the vocabulary (words, each word's input rows), the
    bucket -> input row map of its sub-words, the input rows (quantized ones decoded), the output rows, and the
    hierarchical-softmax tree where the loss is `hs`."""

    labels: tuple[str, ...]
    loss: int
    minn: int
    maxn: int
    word_ngrams: int
    bucket: int
    eos: int  # the end-of-sentence word's id, -1 if the model has none
    eos_hash: int
    vocab_table: np.ndarray  # open addressing: word id + 1 at a slot, 0 = empty
    word_hashes: np.ndarray  # fastText's 32-bit hash of each word, as int64
    word_bytes: np.ndarray
    word_offsets: np.ndarray
    word_rows: np.ndarray  # the input rows of each word (its own and its sub-words'), by word_row_offsets
    word_row_offsets: np.ndarray
    bucket_rows: np.ndarray  # input row of each sub-word bucket, -1 where the model pruned it
    input_rows: np.ndarray  # float32 (rows, dim)
    output_rows: np.ndarray  # float32 (labels or tree nodes, dim)
    tree_left: np.ndarray
    tree_right: np.ndarray

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "model") -> FastTextModel:
        return _parse(data, name)

    def predict(self, text: bytes | np.ndarray, max_chars: int) -> tuple[str | None, float | None]:
        """The top label (without `__label__`) and its probability for the first `max_chars` characters of UTF-8
        `text`, its line breaks read as spaces: what fastText's `predict` says of that prefix."""
        data = np.frombuffer(text, np.uint8) if isinstance(text, bytes) else text
        label, score = _predict(
            data,
            max_chars,
            self.loss,
            self.minn,
            self.maxn,
            self.word_ngrams,
            self.bucket,
            self.eos,
            self.eos_hash,
            self.vocab_table,
            self.word_hashes,
            self.word_bytes,
            self.word_offsets,
            self.word_rows,
            self.word_row_offsets,
            self.bucket_rows,
            self.input_rows,
            self.output_rows,
            self.tree_left,
            self.tree_right,
        )
        if label < 0:
            return None, None
        return self.labels[label], min(float(score), 1.0)


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
    if loss not in (_HS, _NS, _SOFTMAX, _OVA):
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
    word_rows, word_row_offsets = _word_rows(word_bytes, word_offsets, eos, minn, maxn, bucket, bucket_rows)
    labels = tuple(w.decode("utf-8", "replace").removeprefix("__label__") for w in words[nwords:])
    label_counts = np.array(counts[nwords:], np.int64)
    if len(labels) != nlabels or any(t != 1 for t in types[nwords:]):
        raise ModelFileError(f"{name}: its vocabulary lists {len(labels)} labels where it declares {nlabels}")
    left = right = np.zeros(0, np.int32)
    if loss == _HS:
        left, right = _huffman_tree(label_counts)
    return FastTextModel(
        labels,
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
        bucket_rows,
        input_rows,
        output_rows,
        left,
        right,
    )


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
            h = _fnv32(h, data[k])
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
def _word_rows(word_bytes, word_offsets, eos, minn, maxn, bucket, bucket_rows):
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
            count = _subword_rows(token, 0, length + 2, minn, maxn, bucket, bucket_rows, rows, count)
        offsets[w + 1] = count
    return rows[:count].copy(), offsets


@njit(cache=True, inline="always")
def _fnv32(h, byte):
    """One step of fastText's 32-bit FNV-1a, whose bytes are signed chars (0x80.. extend to 0xFFFFFF80..); in 64-bit
    arithmetic, as Numba widens 32-bit integers."""
    b = np.uint64(byte) | np.uint64(0xFFFFFF00) if byte >= 128 else np.uint64(byte)
    return ((h ^ b) * np.uint64(16777619)) & np.uint64(0xFFFFFFFF)


@njit(cache=True)
def _subword_rows(token, start, end, minn, maxn, bucket, bucket_rows, out, count):
    """fastText's `computeSubwords` over token[start:end] (the word between '<' and '>'): the input rows of its
    character n-grams (minn..maxn code points; a lone '<' or '>' not counted), appended to `out` from `count`."""
    for i in range(start, end):
        if (token[i] & 0xC0) == 0x80:
            continue
        h = np.uint64(2166136261)
        j = i
        n = 1
        while j < end and n <= maxn:
            h = _fnv32(h, token[j])
            j += 1
            while j < end and (token[j] & 0xC0) == 0x80:
                h = _fnv32(h, token[j])
                j += 1
            if n >= minn and not (n == 1 and (i == start or j == end)):
                row = bucket_rows[np.int64(h % np.uint64(bucket))]
                if row >= 0:
                    out[count] = row
                    count += 1
            n += 1
    return count


@njit(cache=True, inline="always")
def _is_space(c):
    return c == 32 or c == 10 or c == 13 or c == 9 or c == 11 or c == 12 or c == 0


@njit(cache=True)
def _word_id(data, start, end, h, vocab_table, word_hashes, word_bytes, word_offsets):
    mask = len(vocab_table) - 1
    slot = np.int64(h) & mask
    length = end - start
    while vocab_table[slot] != 0:
        w = vocab_table[slot] - 1
        if word_hashes[w] == np.int64(h) and word_offsets[w + 1] - word_offsets[w] == length:
            base = word_offsets[w]
            same = True
            for k in range(length):
                if word_bytes[base + k] != data[start + k]:
                    same = False
                    break
            if same:
                return w
        slot = (slot + 1) & mask
    return -1


@njit(cache=True, inline="always")
def _add_row(hidden, input_rows, row):
    for j in range(hidden.shape[0]):
        hidden[j] += input_rows[row, j]


@njit(cache=True, inline="always")
def _has_label_prefix(text, start, end):
    if end - start < 9:
        return False
    for k in range(9):  # noqa: SIM110 - a loop Numba compiles, where all() over a generator it does not
        if text[start + k] != _LABEL_BYTES[k]:
            return False
    return True


_LABEL_BYTES = np.frombuffer(_LABEL_PREFIX, np.uint8)


@njit(cache=True)
def _sigmoid_table():
    table = np.empty(513, np.float32)
    for i in range(513):
        x = np.float32(i * 2 * 8) / np.float32(512) - np.float32(8)
        table[i] = 1.0 / (1.0 + np.float64(np.exp(-x)))
    return table


@njit(cache=True, inline="always")
def _std_log(x):
    return np.float32(np.log(np.float64(x) + 1e-5))


@njit(cache=True)
def _tree_best(hidden, output_rows, left, right, floor):
    """fastText's `HierarchicalSoftmaxLoss::dfs` for k = 1: depth first from the root, left before right, a branch
    left as soon as its score falls below the floor or the best leaf so far; the best leaf and its log-probability."""
    osz = output_rows.shape[0]
    nodes = np.empty(2 * osz, np.int64)
    scores = np.empty(2 * osz, np.float32)
    nodes[0] = 2 * osz - 2
    scores[0] = 0.0
    depth = 1
    best = -1
    best_score = np.float32(0.0)
    while depth:
        depth -= 1
        node = nodes[depth]
        score = scores[depth]
        if score < floor or (best >= 0 and score < best_score):
            continue
        if left[node] == -1 and right[node] == -1:
            best = node
            best_score = score
            continue
        f = np.float32(0.0)
        for j in range(hidden.shape[0]):
            f += output_rows[node - osz, j] * hidden[j]
        f = np.float32(1.0 / np.float64(np.float32(1.0) + np.exp(-f)))
        nodes[depth] = right[node]
        scores[depth] = score + _std_log(f)
        nodes[depth + 1] = left[node]
        scores[depth + 1] = score + _std_log(np.float32(1.0) - f)
        depth += 2
    return best, best_score


@njit(cache=True)
def _predict(
    text,
    max_chars,
    loss,
    minn,
    maxn,
    word_ngrams,
    bucket,
    eos,
    eos_hash,
    vocab_table,
    word_hashes,
    word_bytes,
    word_offsets,
    word_rows,
    word_row_offsets,
    bucket_rows,
    input_rows,
    output_rows,
    left,
    right,
):
    # the prefix of max_chars code points
    end = 0
    chars = 0
    while end < len(text):
        if (text[end] & 0xC0) != 0x80:
            if chars == max_chars:
                break
            chars += 1
        end += 1
    dim = input_rows.shape[1]
    hidden = np.zeros(dim, np.float32)
    rows = 0
    token_hashes = np.empty(end + 1, np.int64)
    tokens = 0
    token = np.empty(end + 2, np.uint8)
    scratch = np.empty((end + 2) * (maxn + 1), np.int32)
    i = 0
    while i <= end:
        while i < end and _is_space(text[i]):
            i += 1
        if i == end:  # the line's end: fastText's end-of-sentence word
            w = eos
            h = eos_hash
            i += 1
        else:
            start = i
            h = np.uint64(2166136261)
            while i < end and not _is_space(text[i]):
                h = _fnv32(h, text[i])
                i += 1
            if _has_label_prefix(text, start, i):  # a `__label__…` token is never a word
                continue
            w = _word_id(text, start, i, h, vocab_table, word_hashes, word_bytes, word_offsets)
            if w < 0 and maxn > 0:
                length = i - start
                token[0] = 60
                token[1 : length + 1] = text[start:i]
                token[length + 1] = 62
                count = _subword_rows(token, 0, length + 2, minn, maxn, bucket, bucket_rows, scratch, 0)
                for k in range(count):
                    _add_row(hidden, input_rows, scratch[k])
                rows += count
        if w >= 0:
            for k in range(word_row_offsets[w], word_row_offsets[w + 1]):
                _add_row(hidden, input_rows, word_rows[k])
            rows += word_row_offsets[w + 1] - word_row_offsets[w]
        token_hashes[tokens] = np.int64(np.int32(h))
        tokens += 1
    for a in range(tokens):  # word n-grams, as fastText's addWordNgrams
        h64 = np.uint64(token_hashes[a])
        for b in range(a + 1, min(tokens, a + word_ngrams)):
            h64 = h64 * np.uint64(116049371) + np.uint64(token_hashes[b])
            r = bucket_rows[np.int64(h64 % np.uint64(bucket))]
            if r >= 0:
                _add_row(hidden, input_rows, r)
                rows += 1
    if rows == 0:
        return -1, np.float32(0.0)
    scale = np.float32(1.0 / rows)
    for j in range(dim):
        hidden[j] *= scale
    floor = _std_log(np.float32(0.0))
    if loss == _HS:
        best, best_score = _tree_best(hidden, output_rows, left, right, floor)
        return best, np.exp(best_score)
    osz = output_rows.shape[0]
    output = np.empty(osz, np.float32)
    for o in range(osz):
        d = np.float32(0.0)
        for j in range(dim):
            d += output_rows[o, j] * hidden[j]
        output[o] = d
    if loss == _SOFTMAX:
        top = output[0]
        for o in range(osz):
            top = max(output[o], top)
        z = np.float32(0.0)
        for o in range(osz):
            output[o] = np.exp(output[o] - top)
            z += output[o]
        for o in range(osz):
            output[o] /= z
    else:
        table = _sigmoid_table()
        for o in range(osz):
            x = output[o]
            if x < -8:
                output[o] = 0.0
            elif x > 8:
                output[o] = 1.0
            else:
                output[o] = table[np.int64((x + np.float32(8)) * np.float32(512) / np.float32(8) / np.float32(2))]
    best = -1
    best_score = np.float32(0.0)
    for o in range(osz):
        if output[o] < 0.0:
            continue
        s = _std_log(output[o])
        if best >= 0 and s < best_score:
            continue
        best, best_score = o, s
    return best, np.exp(best_score)
