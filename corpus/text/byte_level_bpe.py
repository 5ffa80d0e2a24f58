"""A Hugging Face byte-level BPE `tokenizer.json` encoded by tiktoken's BPE: the same tokens, faster.

GPT-2's family (GPT-NeoX, OLMo's, the ones `corpus tokenizer train` makes) split text with the GPT-2 pattern, then
merge byte pairs by the merges list's order. tiktoken merges by the rank of the merged token instead; the two agree
when every merge makes a token of its own whose id grows with the merge's place in the list (how BPE is trained),
and when each token, encoded alone, is itself (tiktoken takes a piece that is a token as that token). `twin_of`
checks all of that on the file and on its whole vocabulary, and answers None for a file it cannot vouch for: such
a file keeps the `tokenizers` library. Added tokens that are not special (GPT-NeoX's runs of spaces) are split off
first, leftmost-longest, as `tokenizers` does; special ones are text, as the tokenize stage wants.
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import cache

# GPT-2's pre-tokenizer pattern, as `tokenizers`' ByteLevel and tiktoken's r50k_base write it.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_UTF8_BYTES = frozenset(range(0xF5)) - {0xC0, 0xC1}  # the bytes UTF-8 text can hold


@cache
def byte_of_character() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the character `tokenizers` writes for each byte (one dict, not to be changed)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    unprintable = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(unprintable)}


class ByteLevelBPE:
    """Encodes texts as the `tokenizers` file it was made from would (special tokens as text)."""

    def __init__(self, encoding, nfc: bool, added: dict[str, int]):
        self.encoding = encoding
        self.nfc = nfc
        self.added = added
        self._split = re.compile("(" + _trie_pattern(added) + ")") if added else None
        starts = {word[:2] for word in added}
        # a text holding none of the tokens' first two characters has none to split off: a few substring searches
        # in C, where the split scans in Python's regex engine (extracted texts seldom hold a run of spaces)
        self._starts = tuple(starts) if len(starts) <= 8 else None

    def encode(self, text: str) -> list[int]:
        if self.nfc:
            text = unicodedata.normalize("NFC", text)
        if self._split is None or (self._starts and not any(start in text for start in self._starts)):
            return self.encoding.encode_ordinary(text)
        tokens: list[int] = []
        for position, piece in enumerate(self._split.split(text)):
            if position % 2:
                tokens.append(self.added[piece])
            elif piece:
                tokens.extend(self.encoding.encode_ordinary(piece))
        return tokens


def _trie_pattern(words) -> str:
    """A pattern matching the longest of `words` at a position: their trie, each word's end an optional tail, so a
    greedy match backs off to the longest word (`tokenizers` matches added tokens leftmost-longest). Faster than
    an alternation of the words, which tries each one at every space of a text."""
    trie: dict = {}
    for word in words:
        node = trie
        for character in word:
            node = node.setdefault(character, {})
        node[""] = {}  # a word ends here

    def pattern(node: dict) -> str:
        tails = [re.escape(character) + pattern(child) for character, child in node.items() if character]
        if not tails:
            return ""
        body = tails[0] if len(tails) == 1 else "(?:" + "|".join(tails) + ")"
        return f"(?:{body})?" if "" in node else body

    return pattern(trie)


def twin_of(tokenizer) -> ByteLevelBPE | None:
    """tiktoken's twin of a loaded `tokenizers.Tokenizer` (special tokens encoded as text), or None when it is not
    one the twin reproduces exactly."""
    spec = json.loads(tokenizer.to_str())
    twin = _build(spec)
    if twin is None:
        return None
    pieces = _vocabulary_texts(spec["model"]["vocab"])
    ours = [twin.encode(piece) for piece in pieces]
    theirs = [encoding.ids for encoding in tokenizer.encode_batch_fast(pieces, add_special_tokens=False)]
    return twin if ours == theirs else None


def _build(spec: dict) -> ByteLevelBPE | None:
    model, pre, normalizer = spec.get("model") or {}, spec.get("pre_tokenizer") or {}, spec.get("normalizer")
    if model.get("type") != "BPE" or model.get("dropout") or model.get("byte_fallback"):
        return None
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None
    if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space") or not pre.get("use_regex", True):
        return None
    if normalizer not in (None, {"type": "NFC"}):
        return None
    added: dict[str, int] = {}
    for token in spec.get("added_tokens") or []:
        if token.get("special"):
            continue  # written in a document, it is text
        content = token["content"]
        plain = not (token.get("single_word") or token.get("lstrip") or token.get("rstrip"))
        matched_as_written = token.get("normalized", True) and unicodedata.normalize("NFC", content) == content
        if not (content and plain and matched_as_written):
            return None
        added[content] = token["id"]
    vocab: dict[str, int] = model["vocab"]
    byte_of = byte_of_character()
    ranks: dict[bytes, int] = {}
    for character, byte in byte_of.items():
        if character in vocab:
            ranks[bytes([byte])] = vocab[character]
        elif byte in _UTF8_BYTES:
            return None
    previous = -1
    for merge in model["merges"]:
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        token = left + right
        if left not in vocab or right not in vocab or token not in vocab or vocab[token] <= previous:
            return None  # a merge whose id does not grow with its place, or that makes a token twice
        previous = vocab[token]
        ranks[bytes(byte_of[c] for c in token)] = previous
    import tiktoken

    encoding = tiktoken.Encoding("byte-level-bpe", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
    return ByteLevelBPE(encoding, normalizer is not None, added)


def _vocabulary_texts(vocab: dict[str, int]) -> list[str]:
    """Every vocabulary entry that is whole UTF-8 text, as that text."""
    byte_of = byte_of_character()
    texts = []
    for token in vocab:
        try:
            texts.append(bytes(byte_of[c] for c in token).decode("utf-8"))
        except (KeyError, UnicodeDecodeError):
            continue  # a piece of a character, or an added token's own entry
    return texts
