"""PII: e-mail addresses, phone numbers and IP addresses, counted, and masked with fixed placeholders.

As in the PII steps of Dolma (Soldaini et al. 2024, section 3.1) and FineWeb's `PIIFormatter`: regular
expressions find e-mail addresses, IPv4 addresses (not a version number: `version 1.2.3.4`) and phone numbers of
7 to 15 digits (international `+44 20 7946 0958`, North American 3-3-4 digits, national with the trunk 0:
`020 7946 0958`, `01 23 45 67 89`, with the usual separators); as a modifier the rule replaces each with a
fixed placeholder, so the rules after it and the tokens trained on never see them. No default threshold: a job
can drop documents by count if it wants.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

import numpy as np
import pyarrow as pa
from numba import njit

from corpus.rulebook import Rule, RuleOptions, Signal, Span, register
from corpus.text.batch import DocumentBatch
from corpus.text.characters import DIGIT, character_classes

EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
# Not inside a longer dotted number on either side; a full stop ending the sentence is not part of one.
IP_ADDRESS = re.compile(
    r"(?<!\d)(?<!\d\.)(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?!\.?\d)"
)
PHONE = re.compile(
    r"(?<![\w+])(?:"
    r"\+\d{1,3}(?:[ .-]?(?:\(\d{1,4}\)|\d{1,4})){2,5}"  # international: +44 20 7946 0958, +1 (555) 123-4567
    r"|(?:\(\d{3}\)|\d{3})[ .-]?\d{3}[ .-]\d{4}"  # North American: (555) 123-4567, 555.123.4567
    r"|\(?0\d{1,4}\)?[ .-]?\d{3,4}[ .-]\d{3,4}"  # national, with the trunk 0: 020 7946 0958, (030) 1234 5678
    r"|0\d(?:[ .-]\d\d){4}"  # in pairs: 01 23 45 67 89
    r")(?!\w)"
)
PHONE_DIGITS = (7, 15)  # a phone number has 7 to 15 digits (E.164's most); fewer is a score or a date
# A dotted quad after these words is a version number, not an address.
VERSION_BEFORE = re.compile(r"(?i)\b(?:version|ver\.?|v|release|build|rev\.?|revision|firmware)\s*$")
PiiKind = Literal["email", "phone", "ip"]
KINDS: tuple[PiiKind, ...] = get_args(PiiKind)
PLACEHOLDERS = {"email": "<EMAIL>", "phone": "<PHONE>", "ip": "<IP_ADDRESS>"}
PATTERNS = {"email": EMAIL, "phone": PHONE, "ip": IP_ADDRESS}
SIGNAL_OF = {"email": "emails", "phone": "phones", "ip": "ip_addresses"}


@njit(cache=True)
def _may_hold(points, text_offsets, flags):
    """Per text: (may hold a phone: 3 digits, one of ' .-', 4 digits; or '+' then a digit; or four pairs of digits
    apart by ' .-'; may hold an IP: '.' then twice 1-3 digits and '.'). Both full expressions are slow to try at
    every position of every text; few texts pass these tests."""
    n = len(text_offsets) - 1
    phone = np.zeros(n, np.bool_)
    ip = np.zeros(n, np.bool_)
    for t in range(n):
        start, end = text_offsets[t], text_offsets[t + 1]
        run = 0  # digits just before i
        last_dot, groups = -1, 0  # the last '.' and how many '.'+(1-3 digits) groups end there
        last_sep, pairs = -1, 0  # the last ' .-' after 2+ digits, and how many digit groups chain up to it
        for i in range(start, end):
            c = points[i]
            if flags[c] & DIGIT:
                run += 1
                continue
            if c == 43 and i + 1 < end and flags[points[i + 1]] & DIGIT:
                phone[t] = True
            if c == 32 or c == 46 or c == 45:
                pairs = pairs + 1 if run == 2 and last_sep == i - 3 and pairs > 0 else (1 if run >= 2 else 0)
                last_sep = i
                if pairs >= 3 and i + 2 < end and flags[points[i + 1]] & flags[points[i + 2]] & DIGIT:
                    phone[t] = True
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


def mask_pii(docs: DocumentBatch, kinds: tuple[PiiKind, ...] = KINDS) -> tuple[dict[str, np.ndarray], list[str]]:
    """(counts of every kind per text as `emails`, `phones`, `ip_addresses`; the texts with the given `kinds`
    replaced by their placeholders). E-mails are found first, so an address's digits never count as a phone."""
    points, text_offsets = docs.code_points
    may_hold_phone, may_hold_ip = _may_hold(points, text_offsets, character_classes())
    counts = {SIGNAL_OF[kind]: np.zeros(len(docs), np.int32) for kind in KINDS}
    masked = []
    for i, text in enumerate(docs.texts):
        candidates = {"email": "@" in text, "ip": may_hold_ip[i], "phone": may_hold_phone[i]}
        found = text  # every kind masked in turn: what one kind found is not found again as another
        for kind in ("email", "ip", "phone"):
            if candidates[kind]:
                found, counts[SIGNAL_OF[kind]][i] = _replaced(kind, found)
        if set(kinds) == set(KINDS):
            masked.append(found)
            continue
        for kind in ("email", "ip", "phone"):
            if kind in kinds and counts[SIGNAL_OF[kind]][i]:
                text = _replaced(kind, text)[0]
        masked.append(text)
    return counts, masked


def _is_pii(kind: str, match: re.Match) -> bool:
    """Whether a match of the kind's expression is one: a phone number has 7-15 digits; a dotted quad right after
    'version', 'v', 'build' … is a version number."""
    if kind == "phone":
        digits = sum(ch.isdigit() for ch in match.group(0))
        return PHONE_DIGITS[0] <= digits <= PHONE_DIGITS[1]
    if kind == "ip":
        return VERSION_BEFORE.search(match.string, max(0, match.start() - 12), match.start()) is None
    return True


def _replaced(kind: str, text: str) -> tuple[str, int]:
    """(the text with every PII of this kind replaced by its placeholder, how many)."""
    found = 0

    def replace(match: re.Match) -> str:
        nonlocal found
        if not _is_pii(kind, match):
            return match.group(0)
        found += 1
        return PLACEHOLDERS[kind]

    return PATTERNS[kind].sub(replace, text), found


@register
class Pii(Rule):
    """E-mail addresses, phone numbers and IP addresses: counts, and masked by fixed placeholders (modifier)."""

    class Options(RuleOptions):
        mask: list[PiiKind] = list(KINDS)  # the kinds replaced by placeholders; all three are counted

    name = "pii"
    version = 3
    modifies_text = True
    signals = (
        Signal("emails", pa.int32(), "e-mail addresses"),
        Signal("phones", pa.int32(), "phone numbers"),
        Signal("ip_addresses", pa.int32(), "IPv4 addresses"),
        Signal("per_1k_words", pa.float32(), "all three per 1,000 words"),
    )

    def modify(self, docs: DocumentBatch) -> tuple[dict, list[str]]:
        counts, masked = mask_pii(docs, tuple(self.options.mask))
        total = counts["emails"] + counts["phones"] + counts["ip_addresses"]
        per_1k = (1000 * total / np.maximum(docs.word_counts, 1)).astype(np.float32)
        return {**counts, "per_1k_words": per_1k}, masked

    def offending_span(self, text: str, url: str | None) -> Span | None:
        found = [
            (m.start(), m.end(), kind)
            for kind, pattern in PATTERNS.items()
            for m in pattern.finditer(text)
            if _is_pii(kind, m)
        ]
        if not found:
            return None
        start, end, kind = min(found)
        return Span(start, end, {"email": "email", "phone": "phone", "ip": "IP address"}[kind])
