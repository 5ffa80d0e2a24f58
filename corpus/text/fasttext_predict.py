"""fastText's `predict` for supervised models, with fastText's own arithmetic, as Numba kernels over a model's arrays
(`ModelArrays`, built by `corpus.text.fasttext_model` from a model file): the same tokens (`readWord`'s delimiters,
the end-of-sentence word), the signed-char FNV-1a sub-word hashes, float32 sums in fastText's order, and the
hierarchical-softmax tree walked as `dfs` walks it for k = 1 (or softmax, or one-vs-all's sigmoid table)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

HS, NS, SOFTMAX, OVA = 1, 2, 3, 4  # fastText's loss_name
LABEL_BYTES = np.frombuffer(b"__label__", np.uint8)


class BucketRows(NamedTuple):
    """Which sub-word buckets have an input row, and which: a bit per bucket, the rows by rank among the set bits,
    and the set bits before each 64-bit word. lid.176 keeps 42,765 of 2,000,000 buckets: ~0.5 MB that stays in the
    cache, where an array of a row per bucket is 8 MB read at random, once per character n-gram of the text."""

    bits: np.ndarray  # uint64, bucket b at bit b % 64 of word b // 64
    ranks: np.ndarray  # int64: set bits in the words before
    rows: np.ndarray  # int32: the input row of the k-th bucket with a row


def bucket_rows_of(rows: np.ndarray) -> BucketRows:
    """`BucketRows` of an array of a row per bucket (-1: none)."""
    kept = rows >= 0
    padded = np.zeros(-(-len(rows) // 64) * 64, np.bool_)
    padded[: len(rows)] = kept
    bits = np.packbits(padded, bitorder="little").view("<u8").astype(np.uint64)
    per_word = padded.reshape(-1, 64).sum(axis=1, dtype=np.int64)
    return BucketRows(bits, np.cumsum(per_word) - per_word, rows[kept].astype(np.int32))


@njit(cache=True, inline="always")
def _popcount(x):
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True, inline="always")
def bucket_row(buckets, b):
    """The input row of bucket b, or -1."""
    word = buckets.bits[b >> 6]
    bit = np.uint64(1) << np.uint64(b & 63)
    if not word & bit:
        return -1
    return buckets.rows[buckets.ranks[b >> 6] + _popcount(word & (bit - np.uint64(1)))]


class ModelArrays(NamedTuple):
    """What prediction reads of a model: the vocabulary (words, each word's input rows), the bucket -> input row
    map of its sub-words, the input rows (quantized ones decoded), the output rows, the hierarchical-softmax tree
    where the loss is `hs`, and the sigmoid table of one-vs-all losses."""

    loss: int
    minn: int
    maxn: int
    word_ngrams: int
    bucket: int
    eos: int  # the end-of-sentence word's id, -1 if the model has none
    eos_hash: np.uint64
    vocab_table: np.ndarray  # open addressing: word id + 1 at a slot, 0 = empty
    word_hashes: np.ndarray  # fastText's 32-bit hash of each word, as int64
    word_bytes: np.ndarray
    word_offsets: np.ndarray
    word_rows: np.ndarray  # the input rows of each word (its own and its sub-words'), by word_row_offsets
    word_row_offsets: np.ndarray
    buckets: BucketRows  # input row of each sub-word bucket, none where the model pruned it
    input_rows: np.ndarray  # float32 (rows, dim)
    output_rows: np.ndarray  # float32 (labels or tree nodes, dim)
    tree_left: np.ndarray
    tree_right: np.ndarray
    sigmoid: np.ndarray  # fastText's 513-entry sigmoid table


@njit(cache=True)
def sigmoid_table():
    """fastText's `t_sigmoid_`: x from -8 to 8 in 512 steps (float32), 1 / (1 + exp(-x)) with the C library's
    float exp, as fastText's `std::exp` of a float (numpy's own float32 exp may differ in the last bit)."""
    table = np.empty(513, np.float32)
    for i in range(513):
        x = np.float32(i * 2 * 8) / np.float32(512) - np.float32(8)
        table[i] = 1.0 / (1.0 + np.float64(np.exp(-x)))
    return table


@njit(cache=True, inline="always")
def fnv32(h, byte):
    """One step of fastText's 32-bit FNV-1a, whose bytes are signed chars (0x80.. extend to 0xFFFFFF80..); in 64-bit
    arithmetic, as Numba widens 32-bit integers."""
    b = np.uint64(byte) | np.uint64(0xFFFFFF00) if byte >= 128 else np.uint64(byte)
    return ((h ^ b) * np.uint64(16777619)) & np.uint64(0xFFFFFFFF)


@njit(cache=True)
def subword_rows(token, end, minn, maxn, bucket, buckets, out, count):
    """fastText's `computeSubwords` over token[:end] (the word between '<' and '>'): the input rows of its
    character n-grams (minn..maxn code points; a lone '<' or '>' not counted), appended to `out` from `count`."""
    for i in range(end):
        if (token[i] & 0xC0) == 0x80:
            continue
        h = np.uint64(2166136261)
        j = i
        n = 1
        while j < end and n <= maxn:
            h = fnv32(h, token[j])
            j += 1
            while j < end and (token[j] & 0xC0) == 0x80:
                h = fnv32(h, token[j])
                j += 1
            if n >= minn and not (n == 1 and (i == 0 or j == end)):
                row = bucket_row(buckets, np.int64(h % np.uint64(bucket)))
                if row >= 0:
                    out[count] = row
                    count += 1
            n += 1
    return count


@njit(cache=True, inline="always")
def _is_space(c):
    return c == 32 or c == 10 or c == 13 or c == 9 or c == 11 or c == 12 or c == 0


@njit(cache=True)
def _word_id(data, start, end, h, m):
    """The vocabulary id of the word data[start:end] (fastText hash h), or -1."""
    vocab_table, word_hashes, word_bytes, word_offsets = m.vocab_table, m.word_hashes, m.word_bytes, m.word_offsets
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
        if text[start + k] != LABEL_BYTES[k]:
            return False
    return True


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
def top_label(text, max_chars, m):
    """fastText's `predict` with k = 1 for the first `max_chars` code points of the UTF-8 bytes `text` read as one
    line: (label index, probability), or (-1, 0) when no input row is found. `m`: the model's `ModelArrays`."""
    # the prefix of max_chars code points
    end = 0
    chars = 0
    while end < len(text):
        if (text[end] & 0xC0) != 0x80:
            if chars == max_chars:
                break
            chars += 1
        end += 1
    dim = m.input_rows.shape[1]
    hidden = np.zeros(dim, np.float32)
    rows = 0
    token_hashes = np.empty(end + 1, np.int64)
    tokens = 0
    token = np.empty(end + 2, np.uint8)
    scratch = np.empty((end + 2) * (m.maxn + 1), np.int32)
    i = 0
    while i <= end:
        while i < end and _is_space(text[i]):
            i += 1
        if i == end:  # the line's end: fastText's end-of-sentence word
            w = m.eos
            h = m.eos_hash
            i += 1
        else:
            start = i
            h = np.uint64(2166136261)
            while i < end and not _is_space(text[i]):
                h = fnv32(h, text[i])
                i += 1
            if _has_label_prefix(text, start, i):  # a `__label__…` token is never a word
                continue
            w = _word_id(text, start, i, h, m)
            if w < 0 and m.maxn > 0:
                length = i - start
                token[0] = 60
                token[1 : length + 1] = text[start:i]
                token[length + 1] = 62
                count = subword_rows(token, length + 2, m.minn, m.maxn, m.bucket, m.buckets, scratch, 0)
                for k in range(count):
                    _add_row(hidden, m.input_rows, scratch[k])
                rows += count
        if w >= 0:
            for k in range(m.word_row_offsets[w], m.word_row_offsets[w + 1]):
                _add_row(hidden, m.input_rows, m.word_rows[k])
            rows += m.word_row_offsets[w + 1] - m.word_row_offsets[w]
        token_hashes[tokens] = np.int64(np.int32(h))
        tokens += 1
    for a in range(tokens):  # word n-grams, as fastText's addWordNgrams
        h64 = np.uint64(token_hashes[a])
        for b in range(a + 1, min(tokens, a + m.word_ngrams)):
            h64 = h64 * np.uint64(116049371) + np.uint64(token_hashes[b])
            r = bucket_row(m.buckets, np.int64(h64 % np.uint64(m.bucket)))
            if r >= 0:
                _add_row(hidden, m.input_rows, r)
                rows += 1
    if rows == 0:
        return -1, np.float32(0.0)
    scale = np.float32(1.0 / rows)
    for j in range(dim):
        hidden[j] *= scale
    floor = _std_log(np.float32(0.0))
    if m.loss == HS:
        best, best_score = _tree_best(hidden, m.output_rows, m.tree_left, m.tree_right, floor)
        return best, np.exp(best_score)
    osz = m.output_rows.shape[0]
    output = np.empty(osz, np.float32)
    for o in range(osz):
        d = np.float32(0.0)
        for j in range(dim):
            d += m.output_rows[o, j] * hidden[j]
        output[o] = d
    if m.loss == SOFTMAX:
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
        for o in range(osz):
            x = output[o]
            if x < -8:
                output[o] = 0.0
            elif x > 8:
                output[o] = 1.0
            else:
                output[o] = m.sigmoid[np.int64((x + np.float32(8)) * np.float32(512) / np.float32(8) / np.float32(2))]
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


@njit(cache=True)
def top_labels(data, offsets, max_chars, m):
    """`top_label` of each text data[offsets[i]:offsets[i + 1]]: (label indices, probabilities)."""
    labels = np.empty(len(offsets) - 1, np.int64)
    scores = np.empty(len(offsets) - 1, np.float32)
    for i in range(len(offsets) - 1):
        labels[i], scores[i] = top_label(data[offsets[i] : offsets[i + 1]], max_chars, m)
    return labels, scores
