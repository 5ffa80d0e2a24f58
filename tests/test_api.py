"""corpus.api gives the pipeline's own decisions: each function against a job run over the same real pages."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support import REPO, documentation, shared, write_job

from corpus.api import (
    apply_rules,
    exact_duplicate_lines,
    extract_text,
    identify_language,
    mask_pii,
    near_duplicates,
)
from corpus.config.job import load_job
from corpus.engine import run_job
from corpus.stages.read import ReadOptions, read_records

WARCS = ["warc-aut/example.warc.gz", "warc-ukwa-govuk/BL-20140325121225068-00000-32090~opera~8443.warc.gz"]
RULES = ["url", "language", "gopher_quality", "gopher_repetition", "pii", "c4", "line_dedup", "token_distribution"]
SELECT = """[select]
token_distribution.kl.max_quantile = 0.9
c4.chars_removed_frac.max = 0.4
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A job over two real WARCs with per-document and corpus rules, a quantile threshold and verified MinHash
    dedup: (its folder, its documents in corpus order, its selection)."""
    folder = tmp_path_factory.mktemp("api")
    rules = ", ".join(f'"{rule}"' for rule in RULES)
    extra = (
        f"[annotate]\nrules = [{rules}]\n[rules.line_dedup]\nmax_copies = 2\n{SELECT}"
        '[dedup]\nsteps = ["minhash"]\n[dedup.minhash]\nverify_threshold = 0.6\n'
    )
    inputs = [str(shared(warc)) for warc in WARCS]
    run_job(load_job(write_job(folder, inputs, folder / "out", extra)), use_ray=False)
    out = folder / "out"
    plan = pq.read_table(out / "plan.parquet").sort_by("ordinal")
    documents = pa.concat_tables(
        pq.read_table(out / "documents" / f"{shard}.parquet") for shard in plan["id"].to_pylist()
    )
    selection = pq.read_table(out / "selection")
    return out, documents, selection


def test_apply_rules_gives_back_a_data_frame_for_a_data_frame_and_maps_its_columns():
    """A DataFrame in, a DataFrame out, its rows in order; `columns` names the text and id columns, and a column
    named as a mapped one (`id` here) keeps its values as `input.id`."""
    frame = pd.DataFrame(
        {
            "doc_id": ["a", "b"],
            "body": [
                "The committee met on Tuesday to discuss the new library, which opens in the spring. " * 6,
                "buy now " * 50,
            ],
            "id": [7, 8],
        }
    )
    decided = apply_rules(frame, rules=["gopher_quality", "top_word"], columns={"text": "body", "id": "doc_id"})
    assert isinstance(decided, pd.DataFrame)
    assert decided["id"].tolist() == ["a", "b"] and decided["input.id"].tolist() == [7, 8]
    assert decided["kept"].tolist() == [True, False]
    assert decided["first_failure"].isna().tolist() == [True, False]
    assert decided["first_failure"][1] == "gopher_quality.stop_words.min"
    assert isinstance(apply_rules(pa.Table.from_pandas(frame), columns={"text": "body"}), pa.Table)


def test_the_api_imports_in_a_fresh_interpreter():
    names = "extract_text, apply_rules, mask_pii, near_duplicates, identify_language"
    subprocess.run([sys.executable, "-c", f"from corpus.api import {names}"], check=True)


@pytest.mark.slow  # runs a whole job
def test_extract_text_gives_the_pipelines_text_and_drops(run):
    _, documents, _ = run
    texts = dict(zip(documents.column("id").to_pylist(), documents.column("text").to_pylist(), strict=True))
    compared = empty = 0
    for warc in WARCS:
        with open(shared(warc), "rb") as stream:
            for batch in read_records(stream, warc, ReadOptions()):
                for record in batch.table.to_pylist():
                    text = extract_text(record["payload"], record["url"], charset=record["http_charset"])
                    assert text == texts.get(record["id"]), record["url"]
                    compared += 1
                    empty += text is None
    assert compared == 176 and 0 < empty < compared  # every HTML record of both files; some the pipeline dropped


@pytest.mark.slow  # runs a whole job
def test_identify_language_gives_the_pipelines_languages(run):
    _, documents, _ = run
    langs, scores = identify_language(documents.column("text").to_pylist())
    assert langs == documents.column("lang").to_pylist()
    assert np.array_equal(np.array(scores, np.float32), documents.column("lang_score").to_numpy())
    assert len(set(scores)) > 10  # every page is English here, each with its own score
    assert identify_language(["Bonjour à tous, comment allez-vous aujourd'hui ?"])[0] == ["fr"]


@pytest.mark.slow  # runs a whole job
def test_apply_rules_gives_the_pipelines_signals_and_selection(run):
    out, documents, selection = run
    given = documents.select(["id", "text", "url", "lang", "lang_score"])
    settings = {"line_dedup": {"max_copies": 2}}
    thresholds = {
        "token_distribution": {"kl": {"max_quantile": 0.9}},
        "c4": {"chars_removed_frac": {"max": 0.4}},
    }
    decided = apply_rules(given, rules=RULES, settings=settings, thresholds=thresholds)
    stored = documents.sort_by("id")
    corpus_signals = pq.read_table(out / "corpus_signals").sort_by("id")
    assert corpus_signals.column("id").equals(stored.column("id"))
    for name in corpus_signals.column_names[1:]:
        stored = stored.append_column(name, corpus_signals.column(name))
    ours = decided.sort_by("id")
    signal_columns = [name for name in decided.column_names if "." in name]
    assert len(signal_columns) > 30
    for name in signal_columns:
        assert ours.column(name).equals(stored.column(name).cast(ours.schema.field(name).type)), name
    rule_selection = pq.read_table(out / "rule_selection").sort_by("id")
    for name in ("kept", "first_failure", "failures"):
        assert ours.column(name).to_pylist() == rule_selection.column(name).to_pylist(), name
    assert len(set(ours.column("first_failure").to_pylist())) > 4
    assert sum("token_distribution.kl.max_quantile" in failed for failed in ours.column("failures").to_pylist()) > 0


@pytest.mark.slow  # runs a whole job
def test_near_duplicates_gives_the_pipelines_clusters(run):
    _, documents, selection = run
    rule_kept = pq.read_table(run[0] / "rule_selection", columns=["id", "kept"])
    candidates = set(rule_kept.filter(rule_kept.column("kept")).column("id").to_pylist())
    order = [i for i, doc in enumerate(documents.column("id").to_pylist()) if doc in candidates]
    chosen = documents.take(pa.array(order))
    found = near_duplicates(chosen.column("text").to_pylist(), chosen.column("id").to_pylist(), verify_threshold=0.6)
    decided = selection.filter(pc.is_in(selection.column("id"), value_set=found.column("id"))).sort_by("id")
    ours = found.sort_by("id")
    assert ours.column("kept").to_pylist() == decided.column("kept").to_pylist()
    assert ours.column("duplicate_of").to_pylist() == decided.column("duplicate_of").to_pylist()
    assert ours.column("cluster_id").to_pylist() == decided.column("cluster_id").to_pylist()
    assert ours.column("cluster_size").to_pylist() == decided.column("cluster_size").to_pylist()
    dropped = ours.filter(pc.invert(ours.column("kept")))
    assert dropped.num_rows > 0 and pc.min(dropped.column("jaccard")).as_py() >= 0.6
    unverified = near_duplicates(chosen.column("text").to_pylist(), chosen.column("id").to_pylist())
    assert pc.sum(pc.invert(unverified.column("kept"))).as_py() >= dropped.num_rows


def test_near_duplicates_made_piece_by_piece_are_the_same(monkeypatch):
    """Signatures made a few texts at a time (memory bounded at any size) give the clusters of one piece."""
    from corpus import api

    words = np.random.default_rng(5).integers(0, 100_000, (30, 60))
    base = [f"story {i}: " + " ".join(f"w{word}" for word in row) for i, row in enumerate(words)]
    texts = [*base, *(text + " one edit" for text in base[:10]), base[3], "", "too short"]
    whole = near_duplicates(texts, verify_threshold=0.5)
    monkeypatch.setattr(api, "PIECE_CHARACTERS", 200)
    assert api._pieces(texts)[:3] == [(0, 1), (1, 2), (2, 3)]  # every text is longer than 200 characters
    assert near_duplicates(texts, verify_threshold=0.5).equals(whole)
    dropped = whole.filter(pc.invert(whole.column("kept")))
    assert dropped.column("id").to_pylist() == [str(i) for i in range(30, 41)]
    assert dropped.column("duplicate_of").to_pylist() == [str(i) for i in range(10)] + ["3"]
    assert whole.column("cluster_size").to_pylist()[3] == 3


@pytest.mark.slow  # runs a whole job
def test_mask_pii_counts_as_the_pii_rule(run):
    _, documents, _ = run
    totals = {"email": 0, "phone": 0, "ip": 0}
    for row in documents.select(["text", "pii.emails", "pii.phones", "pii.ip_addresses"]).to_pylist():
        masked, counts = mask_pii(row["text"])
        assert (counts["email"], counts["phone"], counts["ip"]) == (
            row["pii.emails"],
            row["pii.phones"],
            row["pii.ip_addresses"],
        )
        assert masked.count("<EMAIL>") >= counts["email"]
        for kind in totals:
            totals[kind] += counts[kind]
    assert totals["email"] > 0
    assert mask_pii("Reach 192.0.2.146. Or a@b.org.", kinds=["ip"]) == (
        "Reach <IP_ADDRESS>. Or a@b.org.",
        {"email": 1, "phone": 0, "ip": 1},
    )
    with pytest.raises(ValueError, match="unknown PII kinds \\['ssn'\\]: use any of email, phone, ip"):
        mask_pii("x", kinds=["ssn"])


@pytest.mark.slow  # runs a whole job
def test_exact_duplicate_lines_gives_the_line_dedup_rules_signals(run):
    out, documents, _ = run
    corpus_signals = pq.read_table(out / "corpus_signals").sort_by("id")
    found = exact_duplicate_lines(documents.select(["id", "text"]), max_copies=2).sort_by("id")
    assert found.column("lines_removed").to_pylist() == corpus_signals.column("line_dedup.lines_removed").to_pylist()
    assert pc.sum(found.column("lines_removed")).as_py() > 0
    exact = exact_duplicate_lines(documents.select(["id", "text"]), max_copies=2, normalise=False)
    assert pc.sum(exact.column("lines_removed")).as_py() <= pc.sum(found.column("lines_removed")).as_py()


def test_the_readmes_from_python_example_runs_and_finds_what_it_says():
    readme = documentation()
    section = readme[readme.index("## From Python") :]
    code = section[section.index("```python") + len("```python") : section.index("```\n", section.index("```python"))]
    names: dict = {}
    exec(compile(code, "README.md", "exec"), names)
    assert names["langs"] == ["en"] and names["masked"] == "Write to <EMAIL> from <IP_ADDRESS>."
    assert names["table"].column("kept").to_pylist() == [True, False]
    assert names["clusters"].column("duplicate_of").to_pylist() == [None, "0", None]
    assert names["lines"].column("lines_removed").to_pylist() == [1, 1]


def test_the_api_refuses_bad_arguments_with_what_to_do():
    with pytest.raises(ValueError, match="unknown extractor 'boilerpipe': use one of trafilatura"):
        extract_text(b"<p>x</p>", extractor="boilerpipe")
    with pytest.raises(ValueError, match="need a `text` column; they have: body"):
        apply_rules(pa.table({"body": ["x"]}))
    with pytest.raises(ValueError, match="^apply_rules: key rules: unknown rule 'gopher'"):
        apply_rules(["x"], rules=["gopher"])
    with pytest.raises(ValueError, match=r"^apply_rules: key thresholds\['gopher_quality'\]\['wordz'\]: rule "
                                         "gopher_quality has no signal 'wordz'"):  # fmt: skip
        apply_rules(["x"], rules=["gopher_quality"], thresholds={"gopher_quality": {"wordz": {"min": 1}}})
    with pytest.raises(ValueError, match=r"^apply_rules: key settings\['url'\]\['blocklist'\]: no such file '.*/no'"):
        apply_rules(["x"], rules=["url"], settings={"url": {"blocklist": "no"}})
    with pytest.raises(ValueError, match="one distinct id per text"):
        near_duplicates(["a", "b"], ids=["1", "1"])
    # languages identified here are lid.176's codes: 'english' dropped every document; a given `lang` column's own
    wrong_code = r"^apply_rules: key settings\['language'\]\['languages'\]: 'english' is not a language the language-ID"
    with pytest.raises(ValueError, match=wrong_code + r" model answers; did you mean 'en'\?"):
        apply_rules(["x"], rules=["language"], settings={"language": {"languages": ["english"]}})
    own = pd.DataFrame({"text": ["x"], "lang": ["english"], "lang_score": [0.9]})
    assert apply_rules(own, rules=["language"], settings={"language": {"languages": ["english"]}})["kept"][0]
    with pytest.raises(ValueError, match=r"^columns: the documents have no column 'doc_id'; they have text, lang"):
        apply_rules(own, rules=["language"], columns={"id": "doc_id"})
    with pytest.raises(ValueError, match=r"^columns: 'ident' is not a document field; map any of text, id, url"):
        apply_rules(own, rules=["language"], columns={"ident": "text"})
    for settings, said in [
        ({"bands": 0}, "bands: input should be greater than or equal to 1 (got 0)"),
        ({"bandz": 3}, "unknown setting 'bandz' (settings: ngram, permutations, bands, rows, threshold, seed, "),
        ({"bands": 7, "rows": 8, "permutations": 10}, "bands x rows = 56 is more than permutations = 10"),
    ]:  # the [dedup.minhash] settings in the keywords' terms, not pydantic's
        with pytest.raises(ValueError) as refused:
            near_duplicates(["a b c"], **settings)
        assert str(refused.value).startswith(f"near_duplicates: {said}"), refused.value
    with pytest.raises(ValueError, match=r"^exact_duplicate_lines: max_copies: input should be greater than or "
                                         r"equal to 1 \(got 0\)$"):  # fmt: skip
        exact_duplicate_lines(["a line"], max_copies=0)  # every line of every document would go
    for call in (lambda: identify_language("one text"), lambda: near_duplicates("one text"), lambda: apply_rules("x")):
        with pytest.raises(TypeError, match="^give a list of texts, not one string$"):
            call()
    with pytest.raises(TypeError, match="^text 1 is None, not a string: give every text as a str$"):
        near_duplicates(["a", None])
    with pytest.raises(TypeError, match="^mask_pii takes one text \\(a str\\), not a list: call it once per text$"):
        mask_pii(["jane@example.org"])


def test_the_try_rules_notebook_runs_on_the_sample_and_draws_its_figure():
    nbformat = pytest.importorskip("nbformat", reason="the notebooks extra runs notebooks headless")
    from nbclient import NotebookClient

    notebook = nbformat.read(REPO / "notebooks" / "try_rules.ipynb", as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type in ("error",) or output.get("name") == "stderr"]
    text = "".join(output.get("text", "") for output in outputs)
    assert "280 documents with a main text" in text and "kept 177 of 280" in text
    assert sum("image/png" in output.get("data", {}) for output in outputs) == 1
