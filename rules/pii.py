"""PII: e-mail addresses, phone numbers and IP addresses, counted, and masked with fixed placeholders.

As in the PII steps of Dolma (Soldaini et al. 2024, section 3.1) and FineWeb's `PIIFormatter`: regular
expressions find e-mail addresses, IPv4 addresses and phone numbers (an optional country code, then 3-3-4 digits
with the usual separators); as a modifier the rule replaces each with a fixed placeholder, so the rules after it
and the tokens trained on never see them. No default threshold: a job can drop documents by count if it wants.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from corpus.rules import Rule, Signal, Span, register
from corpus.text import DocumentBatch

EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
IP_ADDRESS = re.compile(
    r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\d.])"
)
PHONE = re.compile(r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{3}\)|\d{3})[ .-]?\d{3}[ .-]\d{4}(?!\w)")
PLACEHOLDERS = (
    ("emails", EMAIL, "<EMAIL>"),
    ("ip_addresses", IP_ADDRESS, "<IP_ADDRESS>"),
    ("phones", PHONE, "<PHONE>"),
)


@register
class Pii(Rule):
    """E-mail addresses, phone numbers and IP addresses: counts, and masked by fixed placeholders (modifier)."""

    name = "pii"
    modifies_text = True
    signals = (
        Signal("emails", pa.int32(), "e-mail addresses"),
        Signal("phones", pa.int32(), "phone numbers"),
        Signal("ip_addresses", pa.int32(), "IPv4 addresses"),
        Signal("per_1k_words", pa.float32(), "all three per 1,000 words"),
    )

    def compute(self, docs: DocumentBatch) -> dict:
        return self.modify(docs)[0]

    def modify(self, docs: DocumentBatch) -> tuple[dict, list[str]]:
        n = len(docs)
        counts = {name: np.zeros(n, np.int32) for name, _, _ in PLACEHOLDERS}
        masked = []
        for i, text in enumerate(docs.texts):
            if "@" in text or any(ch.isdigit() for ch in text):
                for name, pattern, placeholder in PLACEHOLDERS:
                    text, counts[name][i] = pattern.subn(placeholder, text)
            masked.append(text)
        total = counts["emails"] + counts["phones"] + counts["ip_addresses"]
        per_1k = (1000 * total / np.maximum(docs.word_counts, 1)).astype(np.float32)
        return {**counts, "per_1k_words": per_1k}, masked

    def offending_span(self, text: str, url: str | None) -> Span | None:
        found = [(m.start(), m.end(), name) for name, pattern, _ in PLACEHOLDERS if (m := pattern.search(text))]
        if not found:
            return None
        start, end, name = min(found)
        return Span(start, end, name.rstrip("s").replace("_", " "))
