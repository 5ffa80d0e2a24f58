"""Dataset inputs: Parquet, JSONL and Hugging Face folders of real documents, filtered, deduplicated, accounted."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support import real_documents, write_job

from corpus.api import apply_rules
from corpus.config.job import load_job
from corpus.engine import run_job
from corpus.engine.inputs import job_inputs
from corpus.errors import JobError

MAPPING = '[dataset]\ntext = "body"\nid = "doc_id"\nurl = "link"\n'
RULES = '[annotate]\nrules = ["language", "gopher_quality", "gopher_repetition"]\n'
RULES += '[rules.language]\nlanguages = ["en", "de"]\n'
DEDUP = '[dedup]\nsteps = ["exact", "minhash"]\n[dedup.minhash]\nverify_threshold = 0.7\n'


@pytest.fixture(scope="module")
def documents() -> pa.Table:
    """300 real documents, then 20 exact copies of the first 20 and 10 copies of the next 10 with a sentence added
    (near duplicates), under their own ids; and a `crawl` column an input might carry."""
    real = real_documents()
    real = real.filter(pc.equal(real.column("lang"), "en")).slice(0, 300)
    texts = real.column("text").to_pylist()
    ids = real.column("id").to_pylist()
    urls = real.column("url").to_pylist()
    copies = [(f"copy-{i}", texts[i], urls[i]) for i in range(20)]
    copies += [(f"near-{i}", texts[20 + i] + "\nShared on a forum.", urls[20 + i]) for i in range(10)]
    return pa.table(
        {
            "doc_id": ids + [c[0] for c in copies],
            "body": texts + [c[1] for c in copies],
            "link": urls + [c[2] for c in copies],
            "crawl": pa.array(range(330), pa.int32()),
        }
    )


def _run(folder, inputs, extra):
    job = load_job(write_job(folder, [str(i) for i in inputs], folder / "out", extra))
    return job, run_job(job, use_ray=False)


def _kept(folder) -> dict[str, tuple]:
    selection = pq.read_table(folder / "out" / "selection")
    return {
        row["id"]: (row["kept"], row["first_failure"], row["duplicate_of"])
        for row in selection.select(["id", "kept", "first_failure", "duplicate_of"]).to_pylist()
    }


@pytest.fixture(scope="module")
def parquet_run(documents, tmp_path_factory):
    folder = tmp_path_factory.mktemp("parquet")
    pq.write_table(documents, folder / "docs.parquet", row_group_size=120)  # parts start inside row groups
    job, stats = _run(folder, [folder / "docs.parquet"], MAPPING + "split_rows = 100\n" + RULES + DEDUP)
    return folder, stats


def test_a_parquet_dataset_is_filtered_and_deduplicated_in_parts(parquet_run, documents):
    folder, stats = parquet_run
    assert stats["shards"] == {"planned": 4, "complete": 4, "skipped_complete": 0, "failed": 0}  # 100 rows a part
    read = stats["stages"]["read"]
    assert (read["received"], read["kept"], read["dropped"], read["errors"]) == (330, 330, {}, {})
    assert stats["stages"]["extract"]["dropped"] == {}  # no page to extract: the texts are taken as given
    assert stats["totals"]["unaccounted"] == 0
    decided = _kept(folder)
    assert len(decided) == 330
    for i in range(20):  # every exact copy is dropped as one, pointing at its original (if that was kept)
        original = documents.column("doc_id")[i].as_py()
        if decided[original][0]:
            assert decided[f"copy-{i}"] == (False, "exact_duplicate", original)
    originals = [documents.column("doc_id")[20 + i].as_py() for i in range(10)]
    near = [decided[f"near-{i}"] for i, original in enumerate(originals) if decided[original][0]]
    assert len(near) >= 5 and all(reason == "minhash_duplicate" for _, reason, _ in near)
    dedup = stats["stages"]["dedup"]["dropped"]
    assert dedup["exact_duplicate"] >= 10 and dedup["minhash_duplicate"] >= len(near)  # and natural ones
    # the selection before dedup is what corpus.api decides for the same documents
    given = pa.table({"id": documents["doc_id"], "text": documents["body"], "url": documents["link"]})
    api = apply_rules(
        given,
        rules=["language", "gopher_quality", "gopher_repetition"],
        settings={"language": {"languages": ["en", "de"]}},
    )
    rule_selection = pq.read_table(folder / "out" / "rule_selection").sort_by("id")
    api = api.sort_by("id")
    assert rule_selection.column("id").equals(api.column("id"))
    assert rule_selection.column("first_failure").to_pylist() == api.column("first_failure").to_pylist()
    stored = pq.read_table(folder / "out" / "documents")
    assert stored.schema.field("crawl").type == pa.int32()  # the input's own column, with its type
    assert sorted(stored.column("crawl").to_pylist()) == list(range(330))
    assert "body" not in stored.column_names and "doc_id" not in stored.column_names  # mapped, not copied


def test_a_jsonl_dataset_decides_as_the_same_parquet_and_accounts_for_bad_lines(
    parquet_run, documents, tmp_path_factory
):
    folder = tmp_path_factory.mktemp("jsonl")
    lines = [json.dumps(row) for row in documents.to_pylist()]
    bad = {100: "{not json", 200: json.dumps({"doc_id": "nul", "body": None}), 250: json.dumps(["a", "list"])}
    bad[300] = json.dumps({"doc_id": "num", "body": 42, "link": None})
    for at in sorted(bad, reverse=True):
        lines.insert(at, bad[at])
    (folder / "docs.jsonl").write_text("\n".join(lines) + "\n")
    job, stats = _run(folder, [folder / "docs.jsonl"], MAPPING + "split_bytes = 500000\n" + RULES + DEDUP)
    assert stats["shards"]["complete"] == stats["shards"]["planned"] > 2
    read = stats["stages"]["read"]
    assert read["received"] == 334 and read["kept"] == 330
    assert read["dropped"] == {"text_missing": 1, "text_not_string": 1}
    assert read["errors"] == {"json_parse_error": 2}
    errors = sorted(stats["error_examples"], key=lambda e: e["offset"])
    assert [e["message"].split(":")[0] for e in errors] == ["line 101", "line 253"]  # 1-based, after the inserts
    assert errors[1]["message"] == "line 253: a JSON list, not an object"
    text = (folder / "docs.jsonl").read_bytes()
    assert text[errors[0]["offset"] :].startswith(b"{not json") and errors[0]["source"].endswith("docs.jsonl")
    assert _kept(folder) == _kept(parquet_run[0])  # the same documents, the same decisions
    stored = pq.read_table(folder / "out" / "documents", columns=["id", "metadata"])
    metadata = dict(zip(stored.column("id").to_pylist(), stored.column("metadata").to_pylist(), strict=True))
    assert json.loads(metadata["copy-3"]) == {"crawl": 303}  # the other fields of the line, as JSON


def test_compressed_jsonl_and_a_hugging_face_folder(documents, tmp_path):
    datasets = pytest.importorskip("datasets", reason="the dev extra installs Hugging Face datasets")
    small = documents.slice(0, 40)
    with gzip.open(tmp_path / "docs.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in small.to_pylist())
    parts = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(small.slice(0, 30).to_pydict()),
            "test": datasets.Dataset.from_dict(small.slice(30).to_pydict()),
        }
    )
    parts.save_to_disk(str(tmp_path / "hf"))
    job, stats = _run(tmp_path, [tmp_path / "docs.jsonl.gz", tmp_path / "hf"], MAPPING + RULES)
    assert stats["shards"]["complete"] == 3  # the .gz whole, and one Arrow file per split
    assert stats["stages"]["read"]["received"] == stats["stages"]["read"]["kept"] == 80
    stored = pq.read_table(tmp_path / "out" / "documents", columns=["id", "source", "lang"])
    sources = [source.removeprefix(str(tmp_path) + "/") for source in stored.column("source").to_pylist()]
    assert {source: sources.count(source) for source in sources} == {
        "docs.jsonl.gz": 40,
        "hf/train/data-00000-of-00001.arrow": 30,
        "hf/test/data-00000-of-00001.arrow": 10,
    }
    assert None not in stored.column("lang").to_pylist()  # identified, as no `lang` column is mapped


def test_inputs_with_other_columns_and_their_own_mappings_store_one_dataset_every_reader_reads(documents, tmp_path):
    """A Parquet input with its own columns, a second one with other columns (one widened from int32 to int64), and
    a JSONL file whose text is in another field (mapped for it alone): every documents file has one schema, with
    every input's columns (null where an input lacks one), read whole by pyarrow, polars, duckdb and `datasets`."""
    datasets = pytest.importorskip("datasets", reason="the dev extra installs Hugging Face datasets")
    import duckdb
    import polars

    pq.write_table(documents.slice(0, 30), tmp_path / "a.parquet")
    widened = documents.slice(30, 30).set_column(3, "crawl", documents.slice(30, 30).column("crawl").cast(pa.int64()))
    pq.write_table(widened.append_column("topic", pa.array(["news"] * 30)), tmp_path / "b.parquet")
    lines = [
        {"content": row["body"], "key": row["doc_id"], "site": "forum"} for row in documents.slice(60, 30).to_pylist()
    ]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    own = '[dataset.per_input."c.jsonl"]\ntext = "content"\nid = "key"\nurl = ""\n'
    inputs = [tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.jsonl"]
    job, stats = _run(tmp_path, inputs, MAPPING + own + RULES)
    assert stats["stages"]["read"]["kept"] == 90 and stats["totals"]["unaccounted"] == 0
    files = sorted((tmp_path / "out" / "documents").glob("*.parquet"))
    assert len(files) == 3 and len({pq.read_schema(file) for file in files}) == 1
    stored = pq.read_table(tmp_path / "out" / "documents").sort_by("id")
    assert stored.schema.field("crawl").type == pa.int64() and stored.schema.field("topic").type == pa.string()
    rows = {row["id"]: row for row in stored.select(["id", "crawl", "topic", "metadata", "url"]).to_pylist()}
    first, second, third = (documents.column("doc_id")[i].as_py() for i in (0, 30, 60))
    assert (rows[first]["crawl"], rows[first]["topic"], rows[first]["metadata"]) == (0, None, None)
    assert (rows[second]["crawl"], rows[second]["topic"]) == (30, "news")
    assert (rows[third]["crawl"], rows[third]["url"], json.loads(rows[third]["metadata"])) == (
        None,
        None,
        {"site": "forum"},
    )
    pattern = str(tmp_path / "out" / "documents" / "*.parquet")
    read = {
        "polars": polars.read_parquet(pattern),
        "duckdb": duckdb.sql(f"SELECT * FROM read_parquet('{pattern}')").to_arrow_table(),
        "datasets": datasets.load_dataset("parquet", data_files=pattern, split="train"),
    }
    for reader, table in read.items():
        names = table.columns if reader == "polars" else table.column_names
        assert len(table) == 90 and list(names) == stored.column_names, reader
    assert read["polars"]["topic"].null_count() == 60
    # read back without its inputs (a report, an ablation's variants), the run keys its shards as it made them
    from corpus.engine import RunFolder
    from corpus.engine.export import job_of_run
    from corpus.engine.plan import make_plan, planned_job
    from corpus.engine.shards import shard_key

    run = RunFolder(str(tmp_path / "out"))
    stored_job = job_of_run(run, run.stats())
    made, read_back = make_plan(job), make_plan(stored_job)
    assert read_back.input_schema == made.input_schema != b""
    assert shard_key(planned_job(stored_job, read_back)) == shard_key(planned_job(job, made))


def test_a_per_input_mapping_that_matches_no_input_is_refused_at_load(documents, tmp_path):
    pq.write_table(documents.slice(0, 5), tmp_path / "docs.parquet")
    own = '[dataset.per_input."forum-*.jsonl"]\ntext = "content"\n'
    job = write_job(tmp_path, [str(tmp_path / "docs.parquet")], tmp_path / "out", MAPPING + own)
    with pytest.raises(JobError, match=r"key 'dataset.per_input.forum-\*.jsonl': no input's path ends in this glob"):
        job_inputs(load_job(job))


def test_bad_dataset_inputs_are_refused_at_load_naming_the_file_and_its_columns(documents, tmp_path):
    pq.write_table(documents.slice(0, 5), tmp_path / "docs.parquet")
    job = write_job(tmp_path, [str(tmp_path / "docs.parquet")], tmp_path / "out")
    with pytest.raises(JobError, match=r"docs.parquet has no column for dataset.text = 'text'; its columns are: "
                       r"doc_id, body, link, crawl"):  # fmt: skip
        job_inputs(load_job(job))
    (tmp_path / "lines.jsonl").write_text(json.dumps({"content": "x"}) + "\n")
    job = write_job(tmp_path, [str(tmp_path / "lines.jsonl")], tmp_path / "out", MAPPING)
    with pytest.raises(
        JobError, match=r"lines.jsonl has no column for dataset.text = 'body'; its columns are: content"
    ):
        job_inputs(load_job(job))
    (tmp_path / "folder").mkdir()
    job = write_job(tmp_path, [str(tmp_path / "folder")], tmp_path / "out")
    with pytest.raises(JobError, match="is a folder but not a Hugging Face dataset"):
        job_inputs(load_job(job))
    as_numbers = documents.slice(0, 5).append_column("length", pc.utf8_length(documents.slice(0, 5).column("body")))
    pq.write_table(as_numbers, tmp_path / "numbers.parquet")
    job = write_job(tmp_path, [str(tmp_path / "numbers.parquet")], tmp_path / "out", dataset={"text": "length"})
    refused = r"key 'dataset.text': column 'length' of .*numbers.parquet holds int32, not text; set dataset.text to "
    with pytest.raises(JobError, match=refused + r"a string column \(its string columns: doc_id, body, link\)$"):
        job_inputs(load_job(job))


def test_dictionary_encoded_texts_are_read_a_column_of_lists_is_counted_and_a_null_id_gets_its_position():
    from corpus.stages.dataset import DatasetOptions, read_dataset

    texts = [
        "A first document, long enough to read.",
        None,
        "A second document.",
        "A first document, long enough to read.",
    ]
    encoded = pa.table(  # pandas categoricals are stored so
        {"text": pa.array(texts).dictionary_encode(), "doc_id": ["a", "b", None, "d"]}
    )
    listed = pa.table(
        {"text": pa.array([["a", "b"], None, ["c"]])}
    )  # a remote file past the first: not checked at load
    read = {}
    for name, table in (("encoded", encoded), ("listed", listed)):
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        options = DatasetOptions(id="doc_id" if name == "encoded" else "")
        _, batches = read_dataset(pa.BufferReader(sink.getvalue()), name, "parquet", None, options, 1000, name)
        read[name] = list(batches)
    assert [b.table.column("text").to_pylist() for b in read["encoded"]] == [[t for t in texts if t is not None]]
    assert read["encoded"][0].counts.dropped == {"text_missing": 1}
    assert read["encoded"][0].table.column("id").to_pylist() == ["a", "encoded:2", "d"]  # a null id: its position's
    assert read["listed"][0].table.num_rows == 0
    assert read["listed"][0].counts.dropped == {"text_missing": 1, "text_not_string": 2}
