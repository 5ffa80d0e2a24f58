"""URL rules: blocklisted domains and URLs, banned words and sub-words in the URL, and a job's own domains.

FineWeb's `URLFilter` (Penedo et al. 2024, section 3.3.1; datatrove): the UT1 adult blocklist (4.5M domains and
19.6k URLs, the `url_filterblacklistsv0_3_0.tar.gz` datatrove ships, or plain one-per-line files), banned words
matched against the URL's alphanumeric words, soft-banned words counted (FineWeb drops at 2), and banned
sub-words found anywhere in the lower-cased alphanumeric URL with Aho-Corasick (pyahocorasick). A host is
blocked when it or any parent domain (down to two labels) is listed, which covers datatrove's registered
domain and full host checks. `drop_domains` lists domains a job drops outright, e.g. ones heavy with personal
data.

The 4.5M domains are held as a sorted array of 64-bit FNV-1a hashes, built by one Numba pass over the raw
bytes (no Python string per domain): ~36 MB, looked up with `searchsorted`; hashed once per machine (~1.5 s) into
the user's cache folder, which later workers load in ~20 ms.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
from functools import cache

import numpy as np
import pyarrow as pa
from numba import njit

from corpus import user_cache_dir
from corpus.rulebook import FilePath, Rule, RuleOptions, Signal, Span, register
from corpus.text.batch import DocumentBatch, sorted_unique, stable_hashes
from corpus.text.hashing import FNV_OFFSET, FNV_PRIME

_NON_ALNUM = re.compile(r"[^a-zA-Z0-9]+")


@njit(cache=True)
def _hash_lines(data):
    """FNV-1a hash of each line of a byte buffer, stripped of spaces and CR, skipping blanks and '#' comments."""
    out = np.empty(len(data) // 2 + 1, np.uint64)
    count = 0
    start = 0
    n = len(data)
    while start < n:
        end = start
        while end < n and data[end] != 10:
            end += 1
        a, b = start, end
        while a < b and (data[a] == 32 or data[a] == 9):
            a += 1
        while b > a and (data[b - 1] == 32 or data[b - 1] == 13 or data[b - 1] == 9):
            b -= 1
        if b > a and data[a] != 35:
            h = FNV_OFFSET
            for i in range(a, b):
                h = (h ^ np.uint64(data[i])) * FNV_PRIME
            out[count] = h
            count += 1
        start = end + 1
    return out[:count]


def _hash_bytes(data: bytes) -> np.ndarray:
    return sorted_unique(_hash_lines(np.frombuffer(data, np.uint8)))


@cache
def _hashed_tar_members(path: str) -> dict[str, np.ndarray]:
    """Each member of a UT1 tarball ('domains', 'urls'), hashed, from one pass over the archive; kept in the user's
    cache folder (keyed by the file's path, size and modification time), as gunzipping and hashing 4.6M lines
    costs every worker process ~1.5 s and loading them back ~30 ms."""
    stat = os.stat(path)
    key = hashlib.sha256(f"{os.path.realpath(path)}|{stat.st_size}|{stat.st_mtime_ns}|v1".encode()).hexdigest()[:24]
    cached = user_cache_dir() / "lists" / f"{key}.npz"
    try:
        with np.load(cached) as stored:
            return {name: stored[name] for name in stored.files}
    except (OSError, ValueError):  # not cached yet, or a partial file: compute it
        pass
    with tarfile.open(path) as tar:
        files = [member for member in tar.getmembers() if member.isfile()]
        members = {member.name.rsplit("/", 1)[-1]: _hash_bytes(tar.extractfile(member).read()) for member in files}
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        temporary = cached.with_name(f"{key}.{os.getpid()}.tmp.npz")
        np.savez(temporary, **members)
        os.replace(temporary, cached)  # whole or not at all: concurrent workers may write the same entry
    except OSError:  # a read-only cache folder only costs the next process the same 1.5 s
        pass
    return members


@cache
def hashed_list(path: str, member: str) -> np.ndarray:
    """Sorted unique hashes of a list's lines (or of one member of a UT1 tarball), once per worker process."""
    if not path:
        return np.empty(0, np.uint64)
    if path.endswith((".tar.gz", ".tgz", ".tar")):
        members = _hashed_tar_members(path)
        if member not in members:
            raise ValueError(f"{path} has no member named {member!r} (members: {', '.join(sorted(members))})")
        return members[member]
    with open(path, "rb") as fh:
        return _hash_bytes(fh.read())


@cache
def word_list(path: str) -> frozenset[str]:
    """A word list normalised as datatrove does: lower case, alphanumerics only, '#' lines skipped."""
    if not path:
        return frozenset()
    with open(path, encoding="utf-8") as fh:
        return frozenset(_NON_ALNUM.sub("", line).lower() for line in fh if line.strip() and line[0] != "#")


@cache
def _automaton(path: str):
    import ahocorasick

    automaton = ahocorasick.Automaton()
    for word in word_list(path):
        if word:
            automaton.add_word(word, word)
    if len(automaton):
        automaton.make_automaton()
    return automaton


def _contains(sorted_hashes: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    if not len(sorted_hashes) or not len(hashes):
        return np.zeros(len(hashes), np.bool_)
    positions = np.minimum(np.searchsorted(sorted_hashes, hashes), len(sorted_hashes) - 1)
    return sorted_hashes[positions] == hashes


def host_of(url: str | None) -> str:
    if not url or "://" not in url:
        return ""
    host = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    return host.rsplit("@", 1)[-1].split(":", 1)[0].lower().rstrip(".")


def parent_domains(host: str) -> list[str]:
    """The host and each parent down to two labels: a.b.example.com, b.example.com, example.com."""
    labels = host.split(".")
    return [".".join(labels[i:]) for i in range(max(len(labels) - 1, 1))] if host else []


@register
class Url(Rule):
    """UT1 blocklisted domains/URLs, banned and soft-banned words and sub-words in the URL (FineWeb)."""

    class Options(RuleOptions):
        blocklist: FilePath = ""  # UT1 tarball (members 'domains' and 'urls') or a file of domains
        blocklist_urls: FilePath = ""  # a file of URLs, when `blocklist` is a plain domains file
        banned_words: FilePath = ""
        banned_subwords: FilePath = ""
        soft_banned_words: FilePath = ""
        drop_domains: list[str] = []

    name = "url"
    position = 10  # FineWeb's order: url, language, Gopher repetition and quality, C4, FineWeb
    reads_text = False
    signals = (
        Signal("blocked_domain", pa.bool_(), "the host or a parent domain is on the blocklist"),
        Signal("blocked_url", pa.bool_(), "the exact URL is on the URL blocklist"),
        Signal("banned_word", pa.bool_(), "a banned word is one of the URL's alphanumeric words"),
        Signal("soft_banned_words", pa.int8(), "soft-banned words among the URL's words"),
        Signal("banned_subword", pa.bool_(), "a banned sub-word occurs in the lower-cased alphanumeric URL"),
        Signal("dropped_domain", pa.bool_(), "the host or a parent is in the job's drop_domains"),
    )
    defaults = {
        "blocked_domain": {"max": False},
        "blocked_url": {"max": False},
        "banned_word": {"max": False},
        "soft_banned_words": {"max": 1},
        "banned_subword": {"max": False},
        "dropped_domain": {"max": False},
    }

    @staticmethod
    def _url_list_source(options) -> tuple[str, str]:
        if options.blocklist_urls:
            return options.blocklist_urls, "urls"
        if options.blocklist.endswith((".tar.gz", ".tgz", ".tar")):
            return options.blocklist, "urls"
        return "", "urls"

    @classmethod
    def check(cls, options) -> None:
        """Read every list once when the job loads, so a bad file is named now.

        Not in every shard after its first batch; the blocklist's hashes land in the cache the workers read."""
        for path, member in ((options.blocklist, "domains"), cls._url_list_source(options)):
            try:
                hashed_list(path, member)
            except (OSError, ValueError, tarfile.TarError) as exc:
                reason = str(exc).splitlines()[0].rstrip(":")
                raise ValueError(
                    f"cannot read the blocklist {path}: {reason}; give UT1's tarball (members domains and urls) or "
                    "a file of domains, one a line"
                ) from None
        for path in (options.banned_words, options.soft_banned_words, options.banned_subwords):
            try:
                word_list(path)
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"cannot read the word list {path}: {exc}; give UTF-8 text, one word a line") from None

    def compute(self, docs: DocumentBatch) -> dict:
        o = self.options
        domains = hashed_list(o.blocklist, "domains")
        urls = hashed_list(*self._url_list_source(o))
        dropped = sorted_unique(stable_hashes([d.lower() for d in o.drop_domains]))
        banned, soft, subwords = (
            word_list(o.banned_words),
            word_list(o.soft_banned_words),
            _automaton(o.banned_subwords),
        )

        hosts = [host_of(url) for url in docs.urls]
        candidates = [parent_domains(host) for host in hosts]
        flat = [c for cs in candidates for c in cs]
        owner = np.repeat(np.arange(len(docs)), [len(cs) for cs in candidates])
        flat_hashes = stable_hashes(flat)
        n = len(docs)
        out = {
            "blocked_domain": np.zeros(n, np.bool_),
            "blocked_url": _contains(urls, stable_hashes([url or "" for url in docs.urls])),
            "banned_word": np.zeros(n, np.bool_),
            "soft_banned_words": np.zeros(n, np.int8),
            "banned_subword": np.zeros(n, np.bool_),
            "dropped_domain": np.zeros(n, np.bool_),
        }
        np.logical_or.at(out["blocked_domain"], owner, _contains(domains, flat_hashes))
        np.logical_or.at(out["dropped_domain"], owner, _contains(dropped, flat_hashes))
        for i, url in enumerate(docs.urls):
            if not url:
                continue
            words = set(_NON_ALNUM.split(url))
            out["banned_word"][i] = not banned.isdisjoint(words)
            out["soft_banned_words"][i] = min(len(soft & words), 127)
            if len(subwords):
                out["banned_subword"][i] = next(subwords.iter(_NON_ALNUM.sub("", url).lower()), None) is not None
        return out

    def offending_span(self, text: str, url: str | None) -> Span | None:
        """The listed domain in the URL, or the first banned word or sub-word."""
        if not url:
            return None
        o = self.options
        host = host_of(url)
        domains = hashed_list(o.blocklist, "domains")
        for candidate in parent_domains(host):
            if _contains(domains, stable_hashes([candidate]))[0] or candidate in [d.lower() for d in o.drop_domains]:
                at = url.lower().find(candidate)
                return Span(at, at + len(candidate), "listed domain", in_url=True)
        for word in _NON_ALNUM.split(url):
            if word in word_list(o.banned_words) or word in word_list(o.soft_banned_words):
                at = url.find(word)
                return Span(at, at + len(word), "banned word", in_url=True)
        return None
