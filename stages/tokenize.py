"""Tokenize stage: selected documents into Parquet token shards a training loop can stream.

A Hugging Face `tokenizer.json` (the `tokenizers` library; `corpus tokenizer train` makes a byte-level BPE one
from a run's selected documents, so nothing needs the hub) encodes each document; a separator token (the end of
text) follows every document, so documents can be packed back to back. Token shards (schema `token_schema`):

    doc_id    string            the document's id
    tokens    list<uint16>      its tokens then the separator (list<uint32> when the vocabulary exceeds 65,536)
    n_tokens  int32             len(tokens)
    variant   string            the selection the shard was made from (the job's name by default)

zstd-compressed, row groups of `row_group_documents` documents, written in document order: the same input and
options give byte-identical shards.
"""

from __future__ import annotations

import time
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
from pydantic import Field

from corpus.errors import TokenizerError
from corpus.stages.accounting import StageCounts, StageResult
from corpus.stages.options import StageOptions
from corpus.text.byte_level_bpe import twin_of


class TokenizeOptions(StageOptions):
    tokenizer: str = Field("", description="a tokenizer.json or <encoding>.tiktoken file; empty = no token shards")
    separator: str = Field("<|endoftext|>", description="the token after every document")
    tokens_per_shard: int = Field(100_000_000, ge=1, description="a token shard is closed past this many tokens")
    row_group_documents: int = Field(1000, ge=1, description="documents per Parquet row group")
    variant: str = Field("", description="the selection's name in the shards; empty = the job's name")
    shuffle_seed: int | None = Field(None, description="set: documents shuffled across all shards by this seed")
    shuffle_buckets: int = Field(16, ge=1, le=4096, description="with shuffle_seed: output groups, a Ray task each")
    modifiers: list[str] | None = Field(
        None, description="modifier rules applied to the training text (C4 lines, PII, line dedup); default: all"
    )


STAGE = "tokenize"
END_OF_TEXT = "<|endoftext|>"
MIN_VOCABULARY = 257  # a byte-level BPE's 256 bytes and END_OF_TEXT


class TextTokenizer:
    """A tokenizer file as the stage uses it: a Hugging Face `tokenizer.json` (the `tokenizers` library), or a
    tiktoken BPE file (`<encoding>.tiktoken`, the file OpenAI publishes for that encoding, read from disk: its name
    picks the encoding's split pattern and special tokens, so nothing is fetched). Refuses a missing or unreadable
    file, or a separator the tokenizer lacks."""

    def __init__(self, path: str, separator: str):
        self.path = path
        if not Path(path).is_file():
            raise TokenizerError(
                f"tokenizer file {path!r} does not exist (a job file's relative paths are read from its folder): "
                "give a tokenizer.json or <encoding>.tiktoken, or make one with `corpus tokenizer train`"
            )
        if path.endswith(".tiktoken"):
            self.kind = "tiktoken"
            self._encoding = _tiktoken_encoding(path)
            self.vocab_size = self._encoding.n_vocab
            separator_id = self._encoding._special_tokens.get(separator)
        else:
            from tokenizers import Tokenizer

            self.kind = "tokenizers"
            try:
                self._tokenizer = Tokenizer.from_file(path)
            except Exception as exc:  # noqa: BLE001 - the library raises plain Exceptions for bad files
                raise TokenizerError(f"{path} is not a tokenizers JSON file: {exc}") from None
            self._tokenizer.encode_special_tokens = True  # a page's "<|endoftext|>" is text, not the separator
            self.vocab_size = self._tokenizer.get_vocab_size()
            separator_id = self._tokenizer.token_to_id(separator)
        if separator_id is None:
            raise TokenizerError(f"{path} has no token {separator!r} to put after documents; set [tokenize] separator")
        self.separator_id = separator_id

    @cached_property
    def _byte_level_bpe(self):
        """tiktoken's BPE for a byte-level BPE file it reproduces exactly, else None; checked at the first encode, on
        the file's whole vocabulary (~1 s, which the driver, loading the file to validate a job, never pays)."""
        return twin_of(self._tokenizer) if self.kind == "tokenizers" else None

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Each text's tokens; special tokens written in a text are encoded as plain text."""
        if self.kind == "tiktoken":
            return self._encoding.encode_ordinary_batch(texts)
        if self._byte_level_bpe is not None:
            return [self._byte_level_bpe.encode(text) for text in texts]
        return [encoding.ids for encoding in self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)]

    def decode(self, tokens: list[int]) -> str:
        if self.kind == "tiktoken":
            return self._encoding.decode(tokens)
        return self._tokenizer.decode(tokens, skip_special_tokens=False)


def _tiktoken_encoding(path: str):
    import tiktoken
    import tiktoken_ext.openai_public as published
    from tiktoken.load import load_tiktoken_bpe

    name = Path(path).name.removesuffix(".tiktoken")
    if name not in published.ENCODING_CONSTRUCTORS:
        known = ", ".join(sorted(published.ENCODING_CONSTRUCTORS))
        raise TokenizerError(f"{path}: a tiktoken file is named after its encoding, one of {known}; rename it")
    try:
        ranks = load_tiktoken_bpe(path)
    except Exception as exc:  # noqa: BLE001 - base64 and parse errors alike mean the same to the user
        raise TokenizerError(f"{path} is not a tiktoken BPE file (lines of 'base64-token rank'): {exc}") from None
    # The published constructor knows the pattern and special tokens but fetches its ranks: give it this file's.
    originals = published.load_tiktoken_bpe, published.data_gym_to_mergeable_bpe_ranks
    published.load_tiktoken_bpe = published.data_gym_to_mergeable_bpe_ranks = lambda *args, **kwargs: ranks
    try:
        spec = published.ENCODING_CONSTRUCTORS[name]()
    finally:
        published.load_tiktoken_bpe, published.data_gym_to_mergeable_bpe_ranks = originals
    spec.pop("explicit_n_vocab", None)  # a file with fewer ranks than the published one is still usable
    return tiktoken.Encoding(**spec)


def token_schema(vocab_size: int) -> pa.Schema:
    token_type = pa.uint16() if vocab_size <= 1 << 16 else pa.uint32()
    return pa.schema(
        [
            pa.field("doc_id", pa.string(), nullable=False),
            pa.field("tokens", pa.list_(token_type), nullable=False),
            pa.field("n_tokens", pa.int32(), nullable=False),
            pa.field("variant", pa.string(), nullable=False),
        ]
    )


def tokenize_documents(ids: pa.Array, texts: list[str], tokenizer: TextTokenizer, variant: str) -> StageResult:
    """One row per document: its tokens followed by the separator."""
    started = time.perf_counter()
    schema = token_schema(tokenizer.vocab_size)
    encoded = tokenizer.encode(texts)
    lengths = np.fromiter((len(tokens) + 1 for tokens in encoded), np.int64, len(encoded))
    flat = np.empty(int(lengths.sum()), schema.field("tokens").type.value_type.to_pandas_dtype())
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    for tokens, start, end in zip(encoded, offsets[:-1], offsets[1:], strict=True):
        flat[start : end - 1] = tokens
        flat[end - 1] = tokenizer.separator_id
    table = pa.Table.from_arrays(
        [
            ids,
            pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat)),
            pa.array(lengths, pa.int32()),
            pa.array([variant] * len(texts), pa.string()),
        ],
        schema=schema,
    )
    counts = StageCounts(STAGE, received=len(texts), kept=len(texts))
    counts.seconds = time.perf_counter() - started
    return StageResult(table, counts)


def train_tokenizer(texts, vocab_size: int, out: str) -> int:
    """A byte-level BPE tokenizer (GPT-2 style pre-tokenisation) with `END_OF_TEXT`, trained on `texts`; returns its
    vocabulary's size (under `vocab_size` when the texts hold fewer merges)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < MIN_VOCABULARY:
        raise TokenizerError(
            f"a vocabulary of {vocab_size} is too small: a byte-level BPE holds the 256 bytes and {END_OF_TEXT}, so "
            f"give at least {MIN_VOCABULARY}"
        )

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.save(out)
    return tokenizer.get_vocab_size()
