"""Language: keep the languages a corpus wants, with the identifier's confidence.

Reads the extraction stage's fastText lid.176 `lang` and `lang_score` (FineWeb keeps English at score >= 0.65), and
keys each document as FineWeb-2 does (`cmn_Hani`: language and script, `corpus.text.languages`): what per-language
thresholds (`[select] per_language`) and word segmentation go by.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from corpus.rulebook import Rule, RuleOptions, Signal, register
from corpus.text.batch import DocumentBatch


@register
class Language(Rule):
    """The document's language is one of `languages`, and how sure the identifier is (FineWeb: en, 0.65)."""

    class Options(RuleOptions):
        languages: list[str] = ["en"]
        """Language-ID labels to keep; "*" keeps every language (FineWeb-2's recipe, with `[select] per_language`)."""

    name = "language"
    version = 2
    position = 20  # FineWeb's order: url, language, Gopher repetition and quality, C4, FineWeb
    signals = (
        Signal("allowed", pa.bool_(), "lang is one of the job's `languages`"),
        Signal("score", pa.float32(), "lang_score when allowed, else 0", most=1),
        Signal("key", pa.string(), "FineWeb-2's language key: ISO 639-3 code and script (cmn_Hani), from lang"),
    )
    defaults = {"allowed": {"min": True}, "score": {"min": 0.65}}

    def compute(self, docs: DocumentBatch) -> dict:
        wanted = set(self.options.languages)
        every = "*" in wanted
        allowed = np.array([lang is not None and (every or lang in wanted) for lang in docs.langs], np.bool_)
        scores = np.array([s if s is not None else 0.0 for s in docs.lang_scores], np.float32)
        return {
            "allowed": allowed,
            "score": np.where(allowed, scores, 0).astype(np.float32),
            "key": docs.language_keys,
        }
