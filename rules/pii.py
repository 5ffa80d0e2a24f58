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
from numba import njit

from corpus.rulebook import Rule, Signal, Span, register
from corpus.text.batch import DocumentBatch
from corpus.text.words import DIGIT, character_classes

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


def _is_ip(address: str) -> bool:
    return all(int(octet) <= 255 and (octet == "0" or not octet.startswith("0")) for octet in address.split("."))


def _mask_ips(text: str) -> tuple[str, int]:
    found = 0

    def mask(match: re.Match) -> str:
        nonlocal found
        if _is_ip(match.group()):
            found += 1
            return "<IP_ADDRESS>"
        return match.group()

    return IP_ADDRESS.sub(mask, text), found


@njit(cache=True)
def _may_hold(points, text_offsets, flags):
    """Per text: (may hold a phone: 3 digits, one of ' .-', 4 digits; may hold an IP: '.' then twice 1-3 digits
    and '.'). Both full expressions are slow to try at every position of every text; few texts pass these tests."""
    n = len(text_offsets) - 1
    phone = np.zeros(n, np.bool_)
    ip = np.zeros(n, np.bool_)
    for t in range(n):
        start, end = text_offsets[t], text_offsets[t + 1]
        run = 0  # digits just before i
        last_dot, groups = -1, 0  # the last '.' and how many '.'+(1-3 digits) groups end there
        for i in range(start, end):
            c = points[i]
            if flags[c] & DIGIT:
                run += 1
                continue
            if (
                run >= 3
                and (c == 32 or c == 46 or c == 45)
                and i + 4 < end
                and flags[points[i + 1]] & flags[points[i + 2]] & flags[points[i + 3]] & flags[points[i + 4]] & DIGIT
            ):
                phone[t] = True
            if c == 46:
                groups = groups + 1 if 1 <= run <= 3 and last_dot == i - run - 1 else 0
                last_dot = i
                if groups >= 2:
                    ip[t] = True
            run = 0
    return phone, ip


def mask_pii(docs: DocumentBatch) -> tuple[dict[str, np.ndarray], list[str]]:
    """(counts of e-mails, IP addresses and phones per text, the texts with each replaced by its placeholder)."""
    points, text_offsets = docs.code_points
    may_hold_phone, may_hold_ip = _may_hold(points, text_offsets, character_classes())
    counts = {name: np.zeros(len(docs), np.int32) for name, _, _ in PLACEHOLDERS}
    masked = []
    for i, text in enumerate(docs.texts):
        if "@" in text:
            text, counts["emails"][i] = EMAIL.subn("<EMAIL>", text)
        if may_hold_ip[i]:
            text, counts["ip_addresses"][i] = _mask_ips(text)
        if may_hold_phone[i]:
            text, counts["phones"][i] = PHONE.subn("<PHONE>", text)
        masked.append(text)
    return counts, masked


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

    def modify(self, docs: DocumentBatch) -> tuple[dict, list[str]]:
        counts, masked = mask_pii(docs)
        total = counts["emails"] + counts["phones"] + counts["ip_addresses"]
        per_1k = (1000 * total / np.maximum(docs.word_counts, 1)).astype(np.float32)
        return {**counts, "per_1k_words": per_1k}, masked

    def offending_span(self, text: str, url: str | None) -> Span | None:
        found = [
            (m.start(), m.end(), name)
            for name, pattern, _ in PLACEHOLDERS
            for m in pattern.finditer(text)
            if name != "ip_addresses" or _is_ip(m.group())
        ]
        if not found:
            return None
        start, end, name = min(found)
        return Span(start, end, name.rstrip("s").replace("_", " "))
