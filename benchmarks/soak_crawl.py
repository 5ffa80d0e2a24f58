"""A synthetic Common Crawl for the soak benchmark: WARCs shaped like CC's, made deterministically from real pages.

Every file starts with a warcinfo record, then per page a request, a response and a metadata record, each its own
gzip member (as CC writes them). Pages come from the shared data's real HTML (the shared WARCs' pages and the
extraction evaluation sets' pages), chosen so that English is Common Crawl's share of pages. A page is one of:
  unique  a real page with every fifth word of its text nodes replaced by a word drawn for this page (from
          WikiText-2's vocabulary): each 5-word shingle holds one drawn word, so no two unique pages share shingles
          beyond chance, while the page keeps its markup, length and language;
  exact   the bytes of an earlier page (a mirror), under its own URL;
  near    an earlier page with one word in a hundred replaced (at least one), under its own URL.
Page k is a pure function of (seed, k), so any file can be written alone, in parallel, and again.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from corpus.sample.generate import WarcWriter

EXACT_SHARE, NEAR_SHARE = 0.05, 0.10
CC_ENGLISH_SHARE = 0.41862  # Common Crawl's share of English pages (as benchmarks/fineweb_recipe.py cites it)
CRAWL_START = datetime(2026, 9, 1, tzinfo=UTC)
_TAG = re.compile(rb"(<[^>]*>)")
_SKIPPED_ELEMENTS = re.compile(rb"<(script|style)\b", re.IGNORECASE)


@dataclass
class BasePage:
    """A real page cut into markup and words: `parts` joined is the page; `slots` index the words to redraw."""

    parts: list[bytes]
    slots: np.ndarray  # positions in `parts` of every fifth word of the text nodes
    words: np.ndarray  # positions in `parts` of every word of the text nodes
    charset: str
    url: str
    english: bool


def _cut(html: bytes) -> tuple[list[bytes], list[int]]:
    """The page as parts (tags, words, the white space between) and the positions of its text nodes' words
    (outside <script> and <style>)."""
    parts: list[bytes] = []
    words: list[int] = []
    skipping = False
    for piece in _TAG.split(html):
        if piece.startswith(b"<"):
            skipping = bool(_SKIPPED_ELEMENTS.match(piece))
            parts.append(piece)
            continue
        if skipping or not piece.strip():
            parts.append(piece)
            continue
        for token in re.split(rb"(\s+)", piece):
            if token and not token.isspace() and not token.startswith(b"&"):
                words.append(len(parts))
            parts.append(token)
    return parts, words


class Crawl:
    """The pages of the synthetic crawl, by number."""

    def __init__(self, shared: Path, seed: int = 1):
        self.seed = seed
        self.bases = _base_pages(shared)
        self.vocabulary = _vocabulary(shared)
        english = np.array([base.english for base in self.bases])
        weights = np.where(english, CC_ENGLISH_SHARE / max(1, english.sum()),
                           (1 - CC_ENGLISH_SHARE) / max(1, (~english).sum()))  # fmt: skip
        self.base_weights = weights / weights.sum()

    def _rng(self, k: int, purpose: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, k, purpose])

    def kind(self, k: int) -> tuple[str, int]:
        """("unique", k), or ("exact" | "near", the page it copies)."""
        rng = self._rng(k, 0)
        draw = rng.random()
        if k < 100 or draw >= EXACT_SHARE + NEAR_SHARE:
            return "unique", k
        _, root = self.kind(int(rng.integers(0, k)))  # a copy of a copy copies its unique page
        return ("exact" if draw < EXACT_SHARE else "near"), root

    def _base(self, k: int) -> BasePage:
        """The real page unique page k is made from."""
        return self.bases[int(self._rng(k, 1).choice(len(self.bases), p=self.base_weights))]

    def url(self, k: int) -> str:
        base = self._base(self.kind(k)[1]).url
        return f"{base}&soak={k}" if "?" in base else f"{base.rstrip('/')}/soak-{k}"

    def _unique_parts(self, k: int) -> tuple[BasePage, list[bytes]]:
        base = self._base(k)
        rng = self._rng(k, 3)
        parts = list(base.parts)
        drawn = self.vocabulary[rng.integers(0, len(self.vocabulary), len(base.slots))]
        for slot, word in zip(base.slots.tolist(), drawn.tolist(), strict=True):
            parts[slot] = word
        return base, parts

    def page(self, k: int) -> tuple[str, bytes, str, str, int]:
        """(URL, HTML bytes, charset, kind, the page it copies) of page k."""
        kind, original = self.kind(k)
        base, parts = self._unique_parts(original)
        if kind == "near":
            rng = self._rng(k, 2)
            edits = rng.choice(base.words, max(1, len(base.words) // 100), replace=False) if len(base.words) else []
            for slot in np.asarray(edits).tolist():
                parts[slot] = self.vocabulary[int(rng.integers(0, len(self.vocabulary)))]
        return self.url(k), b"".join(parts), base.charset, kind, original


def _base_pages(shared: Path) -> list[BasePage]:
    """The real HTML pages every synthetic one is made from, with their language (the full path's judgment)."""
    from real_documents import html_pages  # beside this script

    from corpus.stages.extract import LanguageIdentifier, decode_html, main_text
    from corpus.stages.read import ReadOptions, read_records

    found: list[tuple[bytes, str, str]] = []
    for path in sorted(shared.glob("warc-*/*.warc.gz")):
        with open(path, "rb") as stream:
            for batch in read_records(stream, str(path), ReadOptions()):
                for row in batch.table.select(["kind", "payload", "http_charset", "url"]).to_pylist():
                    if row["kind"] == "html" and row["url"]:
                        found.append((row["payload"], row["http_charset"] or "utf-8", row["url"]))
    for number, (_, html, url) in enumerate(html_pages(shared)):
        found.append(
            (html, "utf-8", url if re.match(r"https?://[^/]+", url or "") else f"https://pages.example/{number}")
        )
    identify, bases = LanguageIdentifier(), []
    for html, charset, url in found:
        text, used = decode_html(html, charset if charset != "utf-8" else None)
        lang, score = identify(main_text("resiliparse", text, url) or "")
        parts, words = _cut(html)
        words_array = np.array(words, np.int64)
        bases.append(BasePage(parts, words_array[4::5], words_array, used, url, lang == "en" and (score or 0) >= 0.65))
    return bases


def _vocabulary(shared: Path) -> np.ndarray:
    """WikiText-2's distinct alphabetic words (as bytes), the words drawn into pages."""
    text = " ".join(path.read_text() for path in sorted((shared / "text-wikitext2").glob("*.txt")))
    words = sorted({word for word in text.split() if word.isalpha() and 2 <= len(word) <= 12})
    return np.array([word.encode() for word in words], dtype=object)


class _FileWriter(WarcWriter):
    """The sample's WARC writer, each record's gzip member written to a file as it is made."""

    def __init__(self, stream) -> None:
        super().__init__()
        self.stream = stream

    def _record(self, headers: dict[str, str], block: bytes) -> None:
        head = "WARC/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head += f"Content-Length: {len(block)}\r\n\r\n"
        self.stream.write(gzip.compress(head.encode() + block + b"\r\n\r\n", compresslevel=1, mtime=0))


def write_file(crawl: Crawl, path: Path, first: int, stop: int) -> pa.Table:
    """Pages [first, stop) as one WARC at `path` (written under a temporary name, then renamed); returns each
    page's URL, kind and the URL of the page it copies."""
    rows: dict[str, list] = {"url": [], "kind": [], "original_url": []}
    temporary = path.with_suffix(".tmp")
    with open(temporary, "wb") as stream:
        writer = _FileWriter(stream)
        writer.warcinfo()
        for k in range(first, stop):
            url, html, charset, kind, original = crawl.page(k)
            when = CRAWL_START + timedelta(seconds=k)
            writer.exchange(url, when, html, f"text/html; charset={charset}")
            rows["url"].append(url)
            rows["kind"].append(kind)
            rows["original_url"].append(None if kind == "unique" else crawl.url(original))
    temporary.rename(path)
    return pa.table(rows)
