"""Dropping before extraction: URL rules on the page records, and the language pre-pass; every record still ends in
exactly one outcome, and what they drop is what selection would have dropped after extracting."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import REPO, shared, write_job

from corpus.cli import main
from corpus.config.job import load_job
from corpus.engine import RunFolder, run_job
from corpus.errors import JobError
from corpus.report.run_report import load_run, report_data
from corpus.sample.generate import SAMPLE_PATH, build_sample
from corpus.stages.extract import ExtractOptions, extract_documents
from corpus.stages.read import ReadOptions, read_records
from corpus.stages.schema import RECORDS
from corpus.text.markup import rough_text

PREPASS_DROPS_ON_THE_SAMPLE = 48
SAMPLE_RULES = f"""
[annotate]
rules = ["url", "language"]
[rules.url]
blocklist = "{REPO / "jobs/lists/sample_blocklist.txt"}"
banned_words = "{REPO / "jobs/lists/sample_banned_words.txt"}"
"""


def run_sample(
    folder, name: str, extra: str = "", extract: str = 'extractor = "resiliparse"\n'
) -> tuple[dict, RunFolder]:
    """The sample through the URL and language rules; `extract`: the lines of its [extract] table."""
    if not SAMPLE_PATH.exists():
        build_sample()
    body = f"[extract]\n{extract}" + SAMPLE_RULES + extra
    job = load_job(write_job(folder, [str(SAMPLE_PATH)], folder / name, body, name=name))
    return run_job(job, use_ray=False), RunFolder(str(folder / name))


def accounted(stages: dict) -> None:
    for counts in stages.values():
        assert counts["received"] == counts["kept"] + sum(counts["dropped"].values()) + sum(counts["errors"].values())
    order = list(stages)
    for before, after in zip(order, order[1:], strict=False):
        assert stages[before]["kept"] == stages[after]["received"], (before, after)


def kept_ids(folder: RunFolder) -> set[str]:
    selection = pq.read_table(folder.url + "/selection")
    return set(selection.filter(selection.column("kept")).column("id").to_pylist())


def test_url_rules_before_extraction_drop_what_selection_drops_after_it(tmp_path):
    full_stats, full = run_sample(tmp_path, "full")
    early_stats, early = run_sample(tmp_path, "early", '[prefilter]\nrules = ["url"]\n')
    accounted(full_stats["stages"])
    accounted(early_stats["stages"])
    assert early_stats["totals"]["unaccounted"] == 0 and early_stats["totals"]["records"] == 880

    url_drops = {r: n for r, n in full_stats["stages"]["select"]["dropped"].items() if r.startswith("url.")}
    assert url_drops == {"url.blocked_domain.max": 7}  # the sample's two blocklisted hosts
    assert early_stats["stages"]["prefilter"]["dropped"] == url_drops
    assert early_stats["stages"]["extract"]["received"] == full_stats["stages"]["extract"]["received"] - 7
    assert not any(r.startswith("url.") for r in early_stats["stages"]["select"]["dropped"])
    assert kept_ids(early) == kept_ids(full)
    stored = set(pq.read_table(early.url + "/documents", columns=["id"]).column("id").to_pylist())
    full_selection = pq.read_table(full.url + "/selection")
    blocked = full_selection.filter(pa.compute.equal(full_selection.column("first_failure"), "url.blocked_domain.max"))
    assert stored.isdisjoint(blocked.column("id").to_pylist())  # never extracted, never stored
    manifest = json.loads((Path(early.url) / "manifest.json").read_text())  # the documents, not the dropped pages
    assert [(shard["path"], shard["rows"]) for shard in manifest["shards"]] == [
        (f"documents/{manifest['shards'][0]['id']}.parquet", early_stats["stages"]["annotate"]["kept"])
    ]
    # What the URL rule threw away before extraction can be read: its pages' URLs, reasons and signals, no text.
    dropped = pq.read_table(early.url + "/prefiltered")
    assert sorted(dropped.column("id").to_pylist()) == sorted(blocked.column("id").to_pylist())
    assert set(dropped.column("first_failure").to_pylist()) == {"url.blocked_domain.max"}
    assert dropped.column("url.blocked_domain").to_pylist() == [True] * 7
    data = report_data(load_run(early.url))
    assert {row["rule"]: row["before_extraction"] for row in data["rules"]} == {"url": 7, "language": 0}
    shown = data["samples"]["url"]
    assert len(shown) == 5 and all(page["span_label"] == "listed domain" and page["span_in_url"] for page in shown)
    assert all(page["before_extraction"].startswith(f"{SAMPLE_PATH} at byte ") for page in shown)
    steps = [(row["step"], row["documents"]) for row in data["funnel"]]
    read, extracted = early_stats["stages"]["read"]["kept"], early_stats["stages"]["annotate"]["kept"]
    before = [("HTML pages and texts", read), ("before extraction: url", read - 7), ("extracted", extracted)]
    assert steps[1:4] == before


def test_the_language_pre_pass_keeps_what_the_full_path_keeps(tmp_path, capsys):
    # The default extractor (trafilatura) after the pre-pass read the page's visible text: two different texts.
    full_stats, full = run_sample(tmp_path, "full", extract="")
    prepass_stats, prepass = run_sample(tmp_path, "prepass", extract='prepass_languages = ["en"]\n')
    accounted(prepass_stats["stages"])
    spared = prepass_stats["stages"]["extract"]["dropped"]["language_prepass"]
    assert spared == PREPASS_DROPS_ON_THE_SAMPLE
    assert full_stats["stages"]["select"]["dropped"]["language.allowed.min"] >= spared
    assert kept_ids(prepass) == kept_ids(full)
    # What the pre-pass dropped is kept to be read: where each page is and the language it read.
    dropped = pq.read_table(prepass.url + "/language_prepass")
    assert dropped.num_rows == spared and not set(dropped.column("id").to_pylist()) & kept_ids(full)
    assert all(lang != "en" for lang in dropped.column("language_prepass.lang").to_pylist())
    assert min(dropped.column("language_prepass.score").to_pylist()) >= ExtractOptions().prepass_min_score
    full_documents = pq.read_table(full.url + "/documents", columns=["id", "lang"]).to_pylist()
    full_langs = {row["id"]: row["lang"] for row in full_documents}
    read_as = dict(
        zip(dropped.column("id").to_pylist(), dropped.column("language_prepass.lang").to_pylist(), strict=True)
    )
    agree = sum(full_langs.get(page) == lang for page, lang in read_as.items())
    assert agree == spared  # the full path reads every one of them as the same language
    data = report_data(load_run(prepass.url), sample=3, seed=0)
    steps = {row["step"]: row["documents"] for row in data["funnel"]}
    html_pages = prepass_stats["stages"]["read"]["kept"]
    assert steps["before extraction: language pre-pass"] == html_pages - spared
    shown = data["samples"]["language_prepass"]
    assert len(shown) == 3 and all(page["id"] in read_as for page in shown)
    for page in shown:
        assert page["signals"]["language_prepass.lang"] == read_as[page["id"]]
        assert page["before_extraction"].startswith(f"{SAMPLE_PATH} at byte ")
    assert main(["inspect", prepass.url, "--rule", "language_prepass", "--sample", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "language_prepass (dropped, a sample)" and printed[1] in {
        p["url"] for p in dropped.to_pylist()
    }
    assert printed[2].startswith("   language_prepass.lang = ") and printed[2][-2:] != "en"
    assert printed[4].startswith(f"   dropped before extraction (no text): {SAMPLE_PATH} at byte ")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('[prefilter]\nrules = ["language"]\n', "rule 'language' reads the text, which only exists after extraction"),
        ('[prefilter]\nrules = ["ur"]\n', "unknown rule 'ur' (did you mean 'url'?)"),
        ('[prefilter]\nrules = ["url"]\n[select]\nrules = ["language"]\n', "rule 'url' is not selected on"),
        (
            '[prefilter]\nrules = ["url"]\n[select.url]\nsoft_banned_words.max_quantile = 0.9\n',
            "a quantile threshold needs the whole corpus",
        ),
    ],
)
def test_prefilter_refuses_what_cannot_run_before_extraction(tmp_path, extra, message):
    path = write_job(tmp_path, [str(SAMPLE_PATH)], tmp_path / "out", SAMPLE_RULES + extra)
    with pytest.raises(JobError, match=re.escape(message)) as caught:
        load_job(path)
    assert str(path) in str(caught.value)


def page_records(pages: list[tuple[str, str]]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "id": name,
                "source": "pages",
                "offset": i,
                "kind": "html",
                "http_charset": "utf-8",
                "payload": html.encode(),
                "url": f"https://{name}.example/",
            }
            for i, (name, html) in enumerate(pages)
        ],
        schema=RECORDS,
    )


def test_the_pre_pass_drops_a_page_in_another_language_before_extracting_it():
    english = "<html><body><article><p>" + "The farmers brought their vegetables to the market. " * 8
    german = "<html><body><article><p>" + "Die Bauern brachten ihr Gemüse auf den Wochenmarkt. " * 8
    records = page_records([("en", english + "</p></article></body></html>"), ("de", german + "</p></article>")])
    result = extract_documents(records, ExtractOptions(prepass_languages=["en"]))
    assert result.table.column("id").to_pylist() == ["en"]
    assert result.counts.dropped == {"language_prepass": 1} and result.counts.unaccounted == 0
    both = extract_documents(records, ExtractOptions())
    assert both.table.column("lang").to_pylist() == ["en", "de"]


def test_a_pages_rough_text_is_its_markups_text_without_scripts_styles_or_comments():
    page = (
        b"<html><head><title>Caf&eacute; menu</title><script>var s = '<p>not text</p>';</script>"
        b"<style>p { color: red }</style></head><body><!-- a <p>comment</p> --><p>Fresh   bread\n"
        b"and <b>w\xc3\xa4rm</b> soup</p><SCRIPT type=x>hidden()</SCRIPT >Open <svg><text>logo</text></svg>daily"
        b"<select><option>Deutsch</option></select>&nbsp;&#8212; fish & chips</body></html>"
    )
    assert rough_text(page, 1_000) == "Caf menu Fresh bread and wärm soup Open daily fish chips".encode()
    assert rough_text(page, 9) == b"Caf menu"  # the space after it would be the 9th character: left off


def test_rough_text_stops_after_max_chars_whole_characters():
    assert rough_text("<p>aé€😀b</p>".encode(), 3) == "aé€".encode()
    assert rough_text("<p>aé€😀b</p>".encode(), 4) == "aé€😀".encode()
    assert rough_text(b"<p>unclosed <script> never ends", 100) == b"unclosed"
    assert rough_text(b"<p>if a < b <svg/>then</p>", 100) == b"if a < b then"  # text '<'; an empty <svg/>


@pytest.mark.parametrize(("languages", "kept"), [(["ja"], 29), (["en"], 0)])
def test_the_pre_pass_reads_pages_in_legacy_charsets_as_their_text(languages, kept):
    """29 real pages in EUC-JP: the pre-pass identifies their decoded text, not their bytes."""
    with open(shared("warc-resiliparse/clueweb-quirk.warc.gz"), "rb") as stream:
        (records,) = list(read_records(stream, "clueweb-quirk", ReadOptions()))
    result = extract_documents(records.table, ExtractOptions(extractor="resiliparse", prepass_languages=languages))
    assert result.table.num_rows == kept and result.counts.unaccounted == 0
    assert set(result.table.column("charset").to_pylist()) <= {"euc_jp"}
    assert result.counts.dropped.get("language_prepass", 0) == 29 - kept


def test_an_ablation_cannot_vary_what_its_documents_job_dropped_before_extraction(tmp_path):
    from corpus.lab.ablation_job import load_ablation

    prefilter = '[prefilter]\nrules = ["url"]\n'
    documents = write_job(tmp_path, [str(SAMPLE_PATH)], tmp_path / "docs", SAMPLE_RULES + prefilter)
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text('{"text": "A held-out sentence about rivers and the towns along them."}\n')
    ablation = tmp_path / "ablation.toml"
    common = f'name = "a"\ndocuments = "{documents.name}"\noutput = "out"\n[train]\ntokens = 40960\neval_every = 1\n'
    common += f'[[references]]\nname = "h"\npath = "{heldout}"\n'
    ablation.write_text(common + '[variants]\nauto = "leave_one_out"\n')
    assert sorted(load_ablation(ablation).variants) == ["all", "without_language"]  # no without_url
    for variant in ("select = { rules = [] }", "select = { url = { soft_banned_words = { max = 3 } } }"):
        ablation.write_text(common + f"[variants.loose]\n{variant}\n")
        with pytest.raises(JobError, match=r"variant 'loose' changes the selection of url, which test.toml applies"):
            load_ablation(ablation)

    # The language pre-pass drops pages in other languages unextracted: the language rule is not a choice either.
    write_job(tmp_path, [str(SAMPLE_PATH)], tmp_path / "docs", '[extract]\nprepass_languages = ["en"]\n' + SAMPLE_RULES)
    ablation.write_text(common + '[variants]\nauto = "leave_one_out"\n')
    assert sorted(load_ablation(ablation).variants) == ["all", "without_url"]  # no without_language
    ablation.write_text(common + "[variants.loose]\nselect = { language = { score = { min = 0.3 } } }\n")
    message = (
        "variant 'loose' changes the selection of language, which test.toml applies before extraction ([extract] "
        "prepass_languages): the pages it drops were never extracted, so no variant can have them back; to ablate "
        "it, empty [extract] prepass_languages in test.toml and run the documents job again"
    )
    with pytest.raises(JobError, match=re.escape(message)):
        load_ablation(ablation)


def test_what_runs_before_extraction_is_part_of_the_shard_fingerprint(tmp_path):
    from corpus.config.keys import fingerprint

    def job_with(extra: str):
        return load_job(write_job(tmp_path, [str(SAMPLE_PATH)], tmp_path / "out", SAMPLE_RULES + extra))

    plain, early = job_with(""), job_with('[prefilter]\nrules = ["url"]\n')
    stricter = job_with('[prefilter]\nrules = ["url"]\n[select.url]\nsoft_banned_words.max = 0\n')
    assert len({fingerprint(plain), fingerprint(early), fingerprint(stricter)}) == 3  # each re-extracts
    assert fingerprint(job_with("[select.language]\nscore.min = 0.9\n")) == fingerprint(plain)  # only re-selects


def test_a_new_pre_pass_makes_the_shards_of_the_old_one_stale(tmp_path, monkeypatch):
    from corpus.config.keys import fingerprint
    from corpus.stages import extract

    def fingerprints(extra: str) -> tuple[str, str]:
        job = load_job(write_job(tmp_path, [str(SAMPLE_PATH)], tmp_path / "out", extra + SAMPLE_RULES))
        before = fingerprint(job)
        monkeypatch.setattr(extract, "PREPASS_VERSION", extract.PREPASS_VERSION + 1)
        after = fingerprint(job)
        monkeypatch.undo()
        return before, after

    current, next_version = fingerprints('[extract]\nprepass_languages = ["en"]\n')
    assert current != next_version
    assert len(set(fingerprints(""))) == 1  # a job without a pre-pass keeps its fingerprint
