"""The tokenize stage (encode + token shard rows + zstd Parquet) against the raw `tokenizers` batch encode, one core.

Same 5,545 real documents, same byte-level BPE tokenizer (trained here on them, 32,000 tokens), batches of 1,000
documents; the stage encodes such a file through tiktoken's BPE (`corpus.text.byte_level_bpe`), the same tokens.
Goal: the stage >= 0.8x the raw encoder's tokens/s.

    python benchmarks/tokenize_stage.py

(Not `tokenize.py`: a script's folder comes first on sys.path, and that name would shadow the standard library's
`tokenize` for every benchmark here.)
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

os.environ["RAYON_NUM_THREADS"] = "1"  # `tokenizers` parallelises batches with Rayon; one core each side
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from real_documents import benchmark_arguments, real_documents  # noqa: E402 - beside this script

BATCH = 1000


def main() -> None:
    args = benchmark_arguments(__doc__)

    from tokenizers import Tokenizer

    from corpus.stages.tokenize import END_OF_TEXT, TextTokenizer, token_schema, tokenize_documents, train_tokenizer

    documents = real_documents(args.shared)
    texts = documents.column("text").to_pylist()
    ids = documents.column("id").combine_chunks()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "tokenizer.json")
        train_tokenizer(texts, 32_000, path)
        tokenizer = TextTokenizer(path, END_OF_TEXT)
        raw = Tokenizer.from_file(path)

        raw.encode_batch_fast(texts[:BATCH])  # warm up, so that neither side pays first-use costs
        started = time.perf_counter()
        raw_tokens = 0
        for offset in range(0, len(texts), BATCH):
            raw_tokens += sum(len(e.ids) for e in raw.encode_batch_fast(texts[offset : offset + BATCH]))
        raw_s = time.perf_counter() - started

        started = time.perf_counter()
        stage_tokens = 0
        with pq.ParquetWriter(Path(tmp) / "tokens.parquet", token_schema(32_000), compression="zstd") as writer:
            for offset in range(0, len(texts), BATCH):
                result = tokenize_documents(
                    ids.slice(offset, BATCH), texts[offset : offset + BATCH], tokenizer, "bench"
                )
                writer.write_table(result.table)
                stage_tokens += pa.compute.sum(result.table.column("n_tokens")).as_py()
        stage_s = time.perf_counter() - started

    print(f"{len(texts):,} real documents, {raw_tokens:,} tokens (byte-level BPE, 32,000), 1 core\n")
    print(f"{'measure':<58}{'stage':>12}{'raw encode':>12}{'ratio':>8}")
    stage_rate, raw_rate = stage_tokens / stage_s, raw_tokens / raw_s
    print(
        f"{'tokens/s: encode + rows + zstd Parquet vs encode_batch_fast':<58}"
        f"{stage_rate:>12,.0f}{raw_rate:>12,.0f}{stage_rate / raw_rate:>7.2f}x"
    )
    print("goal: the stage >= 0.8x the raw encoder (the stage's tokens include one separator per document)")


if __name__ == "__main__":
    main()
