"""Run reports: the numbers equal stats.json, samples show what each rule dropped, the HTML renders in Chromium."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import REPO, write_job

from corpus.cli import main
from corpus.config.job import load_job
from corpus.engine import run_job
from corpus.errors import JobError
from corpus.report.figures import histogram_layout, signal_histograms
from corpus.report.html_page import render_html
from corpus.report.run_report import load_run, report_data
from corpus.stages.select import Threshold


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    """The sample job (every rule, three dedup steps) run into a temporary folder: (run folder, stats)."""
    out = tmp_path_factory.mktemp("report") / "run"
    stats = run_job(load_job(REPO / "jobs" / "sample.toml", output=str(out)), use_ray=False)
    return out, stats


def _browser() -> str:
    found = next(
        (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None
    )
    if found is None:
        reason = "no Chromium on this machine (Debian: apt-get install chromium; .ci/run installs it)"
        if os.environ.get("CORPUS_REQUIRE_BROWSER") == "1":
            pytest.fail(reason + "; CORPUS_REQUIRE_BROWSER=1 makes this a failure")
        pytest.skip(reason)
    return found


def _png_pixels(base64_png: str) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(base64.b64decode(base64_png))).convert("RGB"))


def _shown_at(screen: np.ndarray, figure: np.ndarray) -> np.ndarray:
    """The part of `screen` (a screenshot) where `figure` is shown unscaled, found by its middle row; fails if the
    page does not show it pixel for pixel."""
    height, width, _ = figure.shape
    middle = figure[height // 2].tobytes()
    for y, row in enumerate(screen[height // 2 :], start=height // 2):
        pixels = row.tobytes()
        start = pixels.find(middle)
        while start != -1:
            top, x = y - height // 2, start // 3
            if start % 3 == 0 and np.array_equal(screen[top : top + height, x : x + width], figure):
                return screen[top : top + height, x : x + width]
            start = pixels.find(middle, start + 1)
    raise AssertionError("a histogram is not shown, or not pixel for pixel, in the page's screenshot")


def test_histograms_span_the_values_there_are_and_draw_the_threshold_where_it_cuts():
    flags = pa.array([False] * 5 + [True] * 2)
    layout = histogram_layout(flags, Threshold("url", "blocked_domain", "max", False))
    assert (layout.kind, layout.labels, layout.counts, layout.failing_bar) == ("boolean", ("false", "true"), (5, 2), 1)
    assert histogram_layout(flags, Threshold("language", "allowed", "min", True)).failing_bar == 0
    assert histogram_layout(flags, Threshold("c4", "lorem_ipsum", "max", True)).failing_bar is None  # drops nothing

    layout = histogram_layout(pa.array([0.0] * 9), Threshold("gopher_repetition", "dup_line_frac", "max", 0.3))
    assert (layout.kind, layout.labels, layout.counts, layout.line) == ("one_value", ("0",), (9,), None)

    counts = pa.array([0, 1, 1, 2, 3, 7], pa.int32())  # a bar per integer; the line between dropped and kept ones
    layout = histogram_layout(counts, Threshold("gopher_quality", "stop_words", "min", 2))
    assert layout.edges == tuple(np.arange(-0.5, 8).tolist()) and (layout.line, layout.shade) == (1.5, (-0.5, 1.5))
    layout = histogram_layout(counts, Threshold("c4", "sentences", "max", 3))
    assert (layout.line, layout.shade) == (3.5, (3.5, 7.5))
    layout = histogram_layout(counts, Threshold("gopher_quality", "stop_words", "min", 0))
    assert layout.line is None and layout.title.endswith("\n(below every value: drops none)")
    layout = histogram_layout(counts, Threshold("c4", "sentences", "max", -1))
    assert layout.line is None and layout.title.endswith("\n(below every value: drops every document)")

    fractions = pa.array([0.0, 1.0, 1.0, None, 0.0])  # whole numbers, but fractions: no axis below 0 or above 1
    layout = histogram_layout(fractions, Threshold("fineweb", "line_punct_ratio", "min", 0.12))
    assert (layout.edges[0], layout.edges[-1], len(layout.edges)) == (0.0, 1.0, 41)
    assert (layout.line, layout.shade) == (0.12, (0.0, 0.12))
    layout = histogram_layout(fractions, Threshold("fineweb", "line_punct_ratio", "min", 0.0))  # drops none
    assert layout.line is None and layout.title == "fineweb.line_punct_ratio.min = 0\n(below every value: drops none)"
    layout = histogram_layout(fractions, Threshold("fineweb", "line_punct_ratio", "max", 1.0))
    assert layout.line is None and layout.title.endswith("\n(above every value: drops none)")

    words = pa.array([0, 3, 40, 80, 500, 2_000, 90_000], pa.int32())  # decades: a log axis, the line where it cuts
    layout = histogram_layout(words, Threshold("gopher_quality", "words", "min", 50))
    assert layout.log_from == 3 and layout.edges[:2] == (0.0, 3.0) and layout.edges[-1] == 90_000
    assert (layout.line, layout.shade) == (50.0, (0.0, 50.0))


@pytest.mark.slow  # runs a whole job
def test_the_report_numbers_equal_the_runs_stats(sample_run):
    out, stats = sample_run
    data = report_data(load_run(out))
    funnel = {row["step"]: row["documents"] for row in data["funnel"]}
    assert funnel["records read"] == stats["totals"]["records"] == 880
    assert funnel["HTML pages and texts"] == stats["stages"]["read"]["kept"]
    assert funnel["extracted"] == stats["stages"]["annotate"]["kept"]
    assert funnel["kept"] == stats["totals"]["kept"] == 148
    steps = [row["step"] for row in data["funnel"]]
    assert steps[-2:] == ["kept", "in token shards"]
    shards = data["funnel"][-1]  # C4's line removal, line dedup and PII masking change the texts the shards hold
    assert (
        (shards["documents"], shards["tokens"])
        == (148, 35_697)
        == (stats["tokens"]["documents"], stats["tokens"]["tokens"])
    )
    assert data["funnel"][-2]["tokens"] == 37_174  # the stored texts, before those modifiers
    dropped = {**stats["stages"]["select"]["dropped"], **stats["stages"]["dedup"]["dropped"]}
    for before, after in zip(steps[2:-3], steps[3:-2], strict=True):  # each rule, then each dedup step
        removed = sum(n for reason, n in dropped.items() if reason.split(".")[0] == after)
        assert funnel[before] - funnel[after] == removed, after
    for reason, entry in stats["rules"].items():
        assert data["failing"][reason] == entry["failing"], reason
    for row in data["rules"]:
        first = sum(e["dropped_first"] for reason, e in stats["rules"].items() if reason.split(".")[0] == row["rule"])
        assert row["dropped_first"] == first and row["exclusive_documents"] <= row["documents"]
    dropped_by_step = stats["stages"]["dedup"]["dropped"]
    assert data["dedup"] == {step: dropped_by_step.get(step, 0) for step in data["dedup"]}  # every step, in order
    assert list(data["dedup"]) == ["url_duplicate", "exact_duplicate", "minhash_duplicate"]
    assert sum(d["dropped"] for d in data["domains"]) <= stats["totals"]["dropped"].get(
        "language.allowed.min", 0
    ) + sum(dropped.values())


@pytest.mark.slow  # runs a whole job
def test_samples_show_what_each_rule_dropped_with_its_span_and_kept_ones_near_the_threshold(sample_run):
    out, _ = sample_run
    data = report_data(load_run(out), sample=3, seed=1)
    blocked = data["samples"]["url"]
    assert len(blocked) == 3
    for document in blocked:  # the sample's blocklist names these hosts: the span is the host in the URL
        assert "url.blocked_domain.max" in document["failures"] and document["span_in_url"]
        assert document["match"] and document["match"] in document["url"]
    urls = set(pq.read_table(out / "documents", columns=["url"]).column("url").to_pylist())
    for document in data["samples"]["exact_duplicate"]:  # named by the URL of the page kept instead, not its id
        assert document["duplicate_of"] in urls and document["failures"] == ["exact_duplicate"]
    page = render_html(data, {})
    blocked_html = page[page.index("<h3 id='url'>") :].split("</ul>")[0]
    assert blocked_html.count("<b class=failed>url.blocked_domain = True</b>") == 3  # the signal that failed
    values = pq.read_table(out / "documents", columns=["gopher_repetition.dup_line_frac"]).column(0)
    assert len(set(values.to_pylist())) == 1  # every page 0 here: no page is nearer its threshold than another
    assert "gopher_repetition.dup_line_frac.max" not in data["near_threshold"]
    selection = pq.read_table(out / "selection").to_pylist()
    kept = {row["id"] for row in selection if row["kept"]}
    assert all(doc["id"] in kept for docs in data["near_threshold"].values() for doc in docs)
    words = data["near_threshold"]["gopher_quality.words.min"]
    assert [doc["signals"]["gopher_quality.words"] for doc in words] == sorted(
        doc["signals"]["gopher_quality.words"] for doc in words
    )  # nearest the minimum of 50 words first
    assert report_data(load_run(out), sample=3, seed=1)["samples"] == data["samples"]  # seeded


@pytest.mark.slow  # runs a whole job
def test_a_hypothetical_selection_reports_what_a_threshold_would_drop_without_touching_the_run(sample_run, tmp_path):
    out, _ = sample_run
    stamps = {path: path.stat().st_mtime_ns for path in out.rglob("*") if path.is_file()}
    select = tmp_path / "stricter.toml"
    select.write_text("[select]\nrules = ['gopher_quality']\ngopher_quality.words.min = 200\n")
    data = report_data(load_run(out, select))
    signals = pq.read_table(out / "documents", columns=["gopher_quality.words"]).column(0).to_numpy()
    assert data["failing"]["gopher_quality.words.min"] == int((signals < 200).sum())
    steps = [row["step"] for row in data["funnel"]]
    assert data["hypothetical"] and "gopher_quality" in steps and "language" not in steps  # only the file's rules
    kept = data["funnel"][-1]["documents"]
    assert 0 < kept <= int((signals >= 200).sum()) and data["funnel"][2]["documents"] == len(signals)
    assert {path: path.stat().st_mtime_ns for path in out.rglob("*") if path.is_file()} == stamps


@pytest.mark.slow  # runs a whole job
def test_a_select_file_merges_into_the_jobs_thresholds_and_keeps_the_runs_duplicates(sample_run, tmp_path):
    """A select file that restates one of the job's thresholds reports the run exactly (dedup included, in the job's
    order of steps); one that raises one threshold drops more by that rule alone, every other threshold the job's."""
    out, _ = sample_run
    actual = report_data(load_run(out))
    same = tmp_path / "same.toml"
    same.write_text("[select]\ntop_word.frac.max = 0.3\n")
    restated = report_data(load_run(out, same))
    assert restated["funnel"] == actual["funnel"][: len(restated["funnel"])]
    assert list(restated["dedup"]) == ["url_duplicate", "exact_duplicate", "minhash_duplicate"]
    assert restated["dedup"] == actual["dedup"] and sum(actual["dedup"].values()) > 0
    stricter = tmp_path / "stricter.toml"
    stricter.write_text("[select]\ntop_word.frac.max = 0.1\n")
    data = report_data(load_run(out, stricter))
    assert {t for t in data["failing"] if not t.startswith("top_word")} == {
        t for t in actual["failing"] if not t.startswith("top_word")
    }
    assert data["failing"]["top_word.frac.max"] > actual["failing"]["top_word.frac.max"]
    assert data["funnel"][-1]["documents"] < actual["funnel"][-2]["documents"]


@pytest.mark.slow  # runs a whole job
def test_the_html_renders_in_headless_chromium_with_its_figures_and_no_console_errors(sample_run, tmp_path):
    browser = _browser()
    out, _ = sample_run
    view = load_run(out)
    page = tmp_path / "report.html"
    figures = signal_histograms(view)
    page.write_text(render_html(report_data(view), figures), encoding="utf-8")
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"]
    dump = [*command, "--window-size=1280,800", "--dump-dom", page.as_uri()]
    result = subprocess.run(dump, capture_output=True, text=True, timeout=120)
    body = result.stdout[result.stdout.index("<body") :].split(">", 1)[0]
    assert f'data-images="{len(view.thresholds)}"' in body and 'data-broken-images="0"' in body
    assert int(body.split('data-page-width="')[1].split('"')[0]) <= 1280  # no table wider than the window
    assert 'data-overlap-fits="true"' in body  # the overlap table whole, without a scroll bar
    assert '<nav class="contents">' in result.stdout and 'href="#overlap"' in result.stdout
    title = _png_pixels(next(iter(figures.values())))[:40].min(axis=2) < 100  # the title's dark pixels
    rows = np.flatnonzero(title.any(axis=1))
    assert rows.max() - rows.min() >= 10  # a title a reader can read, not 7 pixels high
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line]
    assert console == []
    shot = tmp_path / "first-screen.png"
    subprocess.run(
        [*command, "--window-size=1280,800", f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120
    )
    from PIL import Image

    image = np.asarray(Image.open(shot).convert("L"))
    assert image.shape == (800, 1280)
    assert (image[20:80, 20:500] < 100).mean() > 0.02  # the title, dark on white, at the top left
    assert (image[150:700, 20:400] < 100).mean() > 0.01  # the funnel table below it
    assert (image > 240).mean() > 0.5  # and a page, not a blank or an error screen

    # every histogram, as the browser shows it: found pixel for pixel in a screenshot of the whole page, red where
    # (and only where) its layout drops documents: the failing bar of a boolean, the threshold line of the others
    tall = tmp_path / "whole-page.png"
    subprocess.run(
        [*command, "--window-size=1280,12000", f"--screenshot={tall}", page.as_uri()], capture_output=True, timeout=120
    )
    screen = np.asarray(Image.open(tall).convert("RGB"))
    shown = {"red bar": 0, "red line": 0, "no red": 0}
    for threshold in view.thresholds:
        layout = histogram_layout(view.documents.column(threshold.column), threshold)
        figure = _shown_at(screen, _png_pixels(figures[threshold.reason]))
        red = (figure[..., 0] > 200) & (figure[..., 1] < 130) & (figure[..., 2] < 130)
        if layout.kind == "boolean" and layout.failing_bar is not None and layout.counts[layout.failing_bar]:
            shown["red bar"] += 1
            assert red.sum() > 500, threshold.reason  # a bar, not a speck
        elif layout.line is not None:
            shown["red line"] += 1
            columns = np.flatnonzero(red.any(axis=0))
            assert 0 < columns[-1] - columns[0] <= 3 and red.any(axis=1).sum() > 100, threshold.reason  # one line
        else:
            shown["no red"] += 1
            assert not red.any(), threshold.reason
    # 8 lines: the sample's Chinese and Japanese pages are split into words by their segmenters, so no page's top 3-
    # and 4-gram shares reach 0.18 and 0.16 (above every value: no line), and their mean word length falls below 3
    # (a line at the min) where the unsplit runs of characters were above 10 (the max's line)
    assert shown == {"red bar": 2, "red line": 8, "no red": len(view.thresholds) - 10}


@pytest.mark.slow  # runs a whole job
def test_the_run_summary_reads_whole_at_80_columns(sample_run):
    """Every stage in the pipeline's order, every reason and count whole on its line, the modifiers' cut said."""
    from rich.console import Console

    from corpus.cli_run import summary_table

    _, stats = sample_run
    console = Console(width=80, record=True)
    console.print(summary_table(stats))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in "".join(lines)
    stages = [line.split()[1].rstrip(":") for line in lines if "received → kept" in line]
    assert stages == ["read", "prefilter", "extract", "annotate", "select", "dedup"]
    for reason, count in stats["stages"]["select"]["dropped"].items():
        assert any(f"dropped: {reason} " in line and line.split()[-2] == f"{count:,}" for line in lines), reason
    cut = 1 - stats["tokens"]["characters"]["after_modifiers"] / stats["tokens"]["characters"]["stored"]
    assert 0 < cut < 0.5 and any("characters the modifiers removed" in line and f"{cut:.1%}" in line for line in lines)


@pytest.mark.slow  # runs a whole job
def test_export_writes_the_kept_documents_as_the_token_shards_hold_them_in_each_format(sample_run, tmp_path, capsys):
    """The kept documents with the modifiers' text: the run's tokenizer encodes each exported text to the tokens its
    token shard holds; JSONL, Parquet and the Hub layout hold the same rows, which `datasets` loads by folder."""
    import gzip

    datasets = pytest.importorskip("datasets", reason="the dev extra installs Hugging Face datasets")
    from corpus.stages.tokenize import TextTokenizer

    out, stats = sample_run
    read = {}
    for fmt in ("parquet", "jsonl", "hf"):
        args = ["export", str(out), "--out", str(tmp_path / fmt), "--format", fmt, "--columns", "gopher_quality.words"]
        assert main(args) == 0
        assert f"wrote {stats['tokens']['documents']:,} kept documents (text after the job's modifiers)" in (
            capsys.readouterr().out
        )
    read["parquet"] = pq.read_table(tmp_path / "parquet").to_pylist()
    files = (tmp_path / "jsonl").glob("*.jsonl.gz")
    read["jsonl"] = [json.loads(line) for f in files for line in gzip.decompress(f.read_bytes()).splitlines()]
    read["hf"] = datasets.load_dataset(str(tmp_path / "hf"), split="train").to_list()
    rows = {fmt: {row["id"]: (row["text"], row["gopher_quality.words"]) for row in got} for fmt, got in read.items()}
    assert rows["parquet"] == rows["jsonl"] == rows["hf"] and len(rows["parquet"]) == stats["tokens"]["documents"]
    job = load_job(REPO / "jobs" / "sample.toml")
    tokenizer = TextTokenizer(job.tokenize.tokenizer, job.tokenize.separator)
    shards = pq.read_table(out / "tokens" / "shards", columns=["doc_id", "tokens"]).to_pylist()
    held = {row["doc_id"]: row["tokens"][:-1] for row in shards}  # each ends with the separator
    ids = sorted(rows["parquet"])
    assert tokenizer.encode([rows["parquet"][i][0] for i in ids]) == [held[i] for i in ids]
    stored = pq.read_table(tmp_path / "parquet").column("text").to_pylist()
    assert main(["export", str(out), "--out", str(tmp_path / "stored"), "--stored-text"]) == 0
    assert pq.read_table(tmp_path / "stored").column("text").to_pylist() != stored  # the modifiers changed some
    assert main(["export", str(out), "--out", str(tmp_path / "x"), "--columns", "nope"]) == 2
    assert "documents have no column 'nope'; they have: id, url" in capsys.readouterr().err


@pytest.mark.slow  # runs a whole job
def test_a_report_into_a_run_folder_it_cannot_write_says_to_give_out(sample_run, monkeypatch, capsys):
    """A read-only run folder (a mounted bucket, another user's run; root writes anywhere, so the refusal is made)."""
    import errno

    from corpus.engine import RunFolder

    def refuse(self, relative, data):
        raise PermissionError(errno.EACCES, "Permission denied", f"{self.url}/{relative}")

    monkeypatch.setattr(RunFolder, "write_bytes", refuse)
    out, _ = sample_run
    assert main(["report", str(out)]) == 2
    assert capsys.readouterr().err == (
        f"corpus: cannot write report.html into {out} (Permission denied); give --out FILE to write the report "
        "elsewhere\n"
    )


@pytest.mark.slow  # runs a whole job
def test_report_and_inspect_commands(sample_run, tmp_path, capsys):
    out, _ = sample_run
    assert main(["report", str(out), "--out", str(tmp_path / "r" / "r.html"), "--sample", "2"]) == 0
    printed = capsys.readouterr().out
    assert "funnel" in printed and "gopher_quality" in printed and (tmp_path / "r" / "r.html").stat().st_size > 10_000
    assert main(["report", str(out), "--out", str(tmp_path)]) == 2  # a folder: refused before the report is made
    assert (
        capsys.readouterr().err
        == f"corpus: {tmp_path} is a folder; give the path of the file to write (e.g. report.html)\n"
    )
    assert main(["inspect", str(out), "--rule", "url", "--sample", "2"]) == 0
    printed = capsys.readouterr().out
    assert "url.blocked_domain = " in printed and "(in the URL)" in printed
    assert "»" in printed and "«" in printed  # the span marked in plain text, not only on a terminal
    assert main(["inspect", str(out), "--rule", "gopher_quality", "--kept", "--sample", "1"]) == 0
    assert "gopher_quality.words.min" in capsys.readouterr().out
    assert main(["inspect", str(out), "--rule", "nope"]) == 2
    assert json.loads((out / "stats.json").read_text())["totals"]["kept"] == 148


@pytest.mark.slow  # runs a whole job
def test_with_a_tokenizer_the_report_counts_tokens_and_the_kept_ones_are_the_token_shards(tmp_path):
    from corpus.stages.tokenize import train_tokenizer

    shutil.copy(REPO / "corpus" / "sample" / "data" / "sample.warc.gz", tmp_path / "crawl.warc.gz")
    texts = [f"sample text number {i} about gardens and bicycles" for i in range(200)]
    train_tokenizer(texts, 300, str(tmp_path / "tokenizer.json"))
    body = f'[annotate]\nrules = ["gopher_quality"]\n[tokenize]\ntokenizer = "{tmp_path / "tokenizer.json"}"\n'
    job = tmp_path / "job.toml"
    job.write_text(f'name = "t"\ninputs = ["{tmp_path / "crawl.warc.gz"}"]\noutput = "{tmp_path / "out"}"\n{body}')
    run_job(load_job(job), use_ray=False)
    data = report_data(load_run(tmp_path / "out"))
    kept, shards = data["funnel"][-2:]
    manifest = json.loads((tmp_path / "out" / "tokens" / "manifest.json").read_text())
    assert kept["tokens"] + manifest["documents"] == manifest["tokens"]  # the shards add a separator per document
    assert (shards["step"], shards["documents"], shards["tokens"]) == (
        "in token shards",
        manifest["documents"],
        manifest["tokens"],
    )
    rule = next(row for row in data["rules"] if row["rule"] == "gopher_quality")
    assert data["funnel"][2]["tokens"] - rule["tokens"] == kept["tokens"]


@pytest.mark.slow  # runs a whole job
def test_a_finished_run_is_reported_as_it_ran_without_its_inputs_or_its_edited_job_file(tmp_path):
    # A run is read back from what it wrote: its inputs may be deleted (or on a cluster's storage), and its job
    # file edited since. Here: the JSONL input deleted, the job file's threshold changed afterwards.
    prose = " ".join(["the committee met on monday and agreed to the plan"] * 12)
    lines = [{"id": "long", "text": prose}, {"id": "short", "text": "too few words here"}]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    body = '[dataset]\ntext = "text"\nid = "id"\n[annotate]\nrules = ["gopher_quality"]\n'
    job_file = write_job(tmp_path, [str(tmp_path / "docs.jsonl")], tmp_path / "out", body)
    run_job(load_job(job_file), use_ray=False)
    (tmp_path / "docs.jsonl").unlink()
    job_file.write_text(job_file.read_text() + "[select]\ngopher_quality.words.min = 1\n")

    view = load_run(tmp_path / "out")
    assert [t.value for t in view.thresholds if t.reason == "gopher_quality.words.min"] == [50]  # as it ran
    funnel = {row["step"]: row["documents"] for row in report_data(view)["funnel"]}
    assert (funnel["extracted"], funnel["kept"]) == (2, 1)
    # Started again with the edited file and stopped before the end: its stats are of the job before.
    (tmp_path / "out" / "job.toml").write_bytes(job_file.read_bytes())
    with pytest.raises(JobError) as refused:
        load_run(tmp_path / "out")
    assert str(refused.value) == (
        f"{tmp_path / 'out'} was started again with an edited {job_file.name} and has not finished since: its stats "
        f"and selection are of the job before; finish it (`corpus run {job_file}`) to read it"
    )
