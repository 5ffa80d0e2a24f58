"""Line-level dedup: lines that many documents of the corpus share are boilerplate; a modifier removes them.

Llama 3 (Dubey et al. 2024, section 3.1.1): "we remove lines that appeared more than 6 times in each bucket of
30M documents", after CCNet (Wenzek et al. 2020, section 3.2), which hashes normalised lines (lower case, digits
as 0) across a shard of documents; `normalise = false` compares lines character for character (surrounding
whitespace aside). The first pass counts, per normalised line, the documents that contain it
(summed over all shards: the bucket is the run); the second gives each document the lines it would lose and
their share of its characters. `remove_repeated_lines` is the modifier that cuts them (the tokenize stage applies
it to the text it writes). Select on the share, e.g.
`[select.line_dedup] chars_removed_frac.max = 0.5`, to drop pages that are mostly boilerplate.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit
from pydantic import Field

from corpus.rulebook import CorpusRule, RuleOptions, Signal, register
from corpus.text.batch import DocumentBatch
from corpus.text.characters import DIGIT, SPACE, character_classes, lower_case_table
from corpus.text.hashing import FNV_OFFSET, FNV_PRIME


@njit(cache=True)
def _line_hashes(points, text_offsets, flags, lower, normalise):
    """Per text (CSR offsets): each non-blank line's hash (stripped; when `normalise`, lower-cased with digits as
    0) and its characters with its newline."""
    offsets = np.zeros(len(text_offsets), np.int64)
    hashes = np.empty(len(points) + len(text_offsets), np.uint64)
    sizes = np.empty(len(points) + len(text_offsets), np.int64)
    n = 0
    for t in range(len(text_offsets) - 1):
        start, end = text_offsets[t], text_offsets[t + 1]
        line = start
        while line < end:
            stop = line
            while stop < end and points[stop] != 10:
                stop += 1
            first, last = line, stop
            while first < last and flags[points[first]] & SPACE:
                first += 1
            while last > first and flags[points[last - 1]] & SPACE:
                last -= 1
            if last > first:
                h = FNV_OFFSET
                for i in range(first, last):
                    if not normalise:
                        c = np.uint64(points[i])
                    elif flags[points[i]] & DIGIT:
                        c = np.uint64(48)
                    else:
                        c = np.uint64(lower[points[i]])
                    h = (h ^ c) * FNV_PRIME
                hashes[n] = h
                sizes[n] = min(stop + 1, end) - line
                n += 1
            line = stop + 1
        offsets[t + 1] = n
    return offsets, hashes[:n], sizes[:n]


def line_hashes(docs: DocumentBatch, normalise: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(CSR offsets per document, hash of each non-blank line, its characters with its newline)."""
    return _line_hashes(*docs.code_points, character_classes(), lower_case_table(), normalise)


def remove_cut_units(texts: list[str], offsets: np.ndarray, cut: np.ndarray, paragraphs: bool = False) -> list[str]:
    """Each text without its units marked in `cut` (CSR by `offsets`): its non-blank lines, or with `paragraphs`
    its runs of non-blank lines; blank lines stay."""
    out = []
    for text, first, last in zip(texts, offsets[:-1], offsets[1:], strict=True):
        if not cut[first:last].any():
            out.append(text)
            continue
        kept, unit, in_unit = [], first - 1, False
        for line in text.split("\n"):
            if line.strip():
                unit += not (paragraphs and in_unit)
                in_unit = True
                if not cut[unit]:
                    kept.append(line)
            else:
                in_unit = False
                kept.append(line)
        out.append("\n".join(kept))
    return out


def remove_repeated_lines(texts: list[str], repeated: np.ndarray, normalise: bool = True) -> list[str]:
    """The modifier: each text without its lines whose hash is in `repeated` (blank lines stay). The lines of the
    whole batch are hashed in one kernel call."""
    offsets, hashes, _ = line_hashes(DocumentBatch(texts), normalise)
    return remove_cut_units(texts, offsets, np.isin(hashes, repeated))


@register
class LineDedup(CorpusRule):
    """Lines shared by more than `max_copies` documents of the corpus (Llama 3, CCNet)."""

    class Options(RuleOptions):
        max_copies: int = Field(6, ge=1)  # a line in more documents than this is removed (0 would remove every line)
        normalise: bool = True  # lines compare lower-cased with digits as 0 (CCNet); false: character for character

    name = "line_dedup"
    signals = (
        Signal("lines_removed", pa.int32(), "lines found in more than max_copies documents of the corpus"),
        Signal("chars_removed_frac", pa.float32(), "share of the characters those lines hold", most=1),
    )

    summary_schema = pa.schema([("line", pa.uint64()), ("documents", pa.int64())])
    summary_keys = ("line",)

    @staticmethod
    def unit_hashes(docs: DocumentBatch, normalise: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(CSR offsets per document, each unit's hash, its characters): the unit here is a line."""
        return line_hashes(docs, normalise)

    @staticmethod
    def remove_units(texts: list[str], repeated: np.ndarray, normalise: bool) -> list[str]:
        return remove_repeated_lines(texts, repeated, normalise)

    def accumulate(self, docs: DocumentBatch) -> pa.Table:
        """Each unit's hash and the documents containing it."""
        offsets, hashes, _ = self.unit_hashes(docs, self.options.normalise)
        document = np.repeat(np.arange(len(docs), dtype=np.uint64), np.diff(offsets))
        pairs = np.unique(np.stack([document, hashes], axis=1), axis=0)  # a document counts a unit once
        units, documents = np.unique(pairs[:, 1], return_counts=True)
        return pa.table([units, documents.astype(np.int64)], schema=self.summary_schema)

    def finish(self, summary: pa.Table) -> pa.Table:
        return summary.filter(pc.greater(summary.column("documents"), self.options.max_copies))

    def modify_texts(self, texts: list[str], summary: pa.Table) -> list[str]:
        return self.remove_units(texts, summary.column(0).to_numpy(), self.options.normalise)

    def corpus_signals(self, docs: DocumentBatch, summary: pa.Table) -> dict:
        repeated_hashes = summary.column(0).to_numpy()
        offsets, hashes, sizes = self.unit_hashes(docs, self.options.normalise)
        removed = np.isin(hashes, repeated_hashes)
        counts = np.add.reduceat(np.r_[removed, 0].astype(np.int64), offsets[:-1]) * (np.diff(offsets) > 0)
        chars = np.add.reduceat(np.r_[sizes * removed, 0], offsets[:-1]) * (np.diff(offsets) > 0)
        removed_signal, chars_signal = (signal.name for signal in self.signals)
        return {
            removed_signal: counts.astype(np.int32),
            chars_signal: (chars / np.maximum(docs.text_lengths, 1)).astype(np.float32),
        }
