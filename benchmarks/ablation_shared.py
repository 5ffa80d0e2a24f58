"""A real ablation on this machine's CPUs: does each filtering step help a small model, on the real pages we have?

Prepares, under `runs/shared-pages/` (once; `--fresh` starts over):
- `inputs/*.warc.gz`: the HTML evaluation sets in ../shared/data (trafilatura's 923 pages, Mozilla Readability's
  130, scrapinghub's 181 articles, Dragnet's 1,381 news and blog pages) packed into WARCs by the project's WARC
  writer, beside the shared WARCs that `jobs/shared_pages.toml` reads as they are;
- `references/`: WikiText-2 test articles (tokenisation undone) and scrapinghub's human-extracted article bodies;
  the pages those bodies come from are in the crawl, so decontamination has real work to do;
- `quality.bin`: the fastText quality classifier, WikiText-2 validation articles against the shared pages' own text
  (resiliparse extraction), as DCLM trains it on reference text against random crawl.

Then runs `jobs/ablation_shared.toml` on a local Ray cluster (extraction, signals, a leave-one-out variant per rule,
dedup step and modifier plus the unfiltered text, three seeds each, scored on held-out text and downstream tasks)
and prints the report and the time of each phase.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tarfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import real_documents
from real_documents import SHARED, article_pieces, html_pages, wikitext_articles

from corpus.cli import main
from corpus.lab.ablation import run_ablation
from corpus.lab.ablation_job import load_ablation
from corpus.lab.classifier import TrainOptions, train
from corpus.sample.generate import WarcWriter

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "runs" / "shared-pages"
JOB = ROOT / "jobs" / "ablation_shared.toml"


def _jsonl(path: Path, texts: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))


def pack_pages(shared: Path) -> dict[str, int]:
    """The HTML sets as one WARC each (request, response, metadata per page, as a crawler writes them)."""
    sets: dict[str, list[tuple[str, bytes]]] = {}
    for page_id, data, url in html_pages(shared):
        source = page_id.split("/", 1)[0]
        sets.setdefault(source, []).append((url or f"https://{source}.invalid/{page_id.split('/', 1)[1]}", data))
    truth = json.loads((shared / "html-scrapinghub-aeb" / "ground-truth.json").read_text())
    sets["scrapinghub"] = [
        (entry["url"], gzip.decompress((shared / "html-scrapinghub-aeb" / "html" / f"{key}.html.gz").read_bytes()))
        for key, entry in sorted(truth.items())
    ]
    with tarfile.open(shared / "html-dragnet" / "dragnet.tar.xz") as tar:  # no URLs: named by their file
        sets["dragnet"] = [
            (f"https://dragnet.invalid/{member.name.rsplit('/', 1)[-1]}", tar.extractfile(member).read())
            for member in sorted(tar.getmembers(), key=lambda m: m.name)
            if member.isfile() and "/input/" in member.name and member.name.endswith(".html")
        ]
    counts = {}
    for source, pages in sets.items():
        writer = WarcWriter()
        start = datetime(2024, 1, 1, tzinfo=UTC)
        for i, (url, data) in enumerate(pages):
            absolute = url if "://" in url else f"https://{url.lstrip('/')}"  # a few evaluation URLs lack a scheme
            writer.exchange(absolute.replace(" ", "%20"), start + timedelta(minutes=i), data, "text/html")
        path = WORK / "inputs" / f"{source}.warc.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(writer.members))
        counts[source] = len(pages)
    return counts


def prepare(shared: Path) -> None:
    started = time.perf_counter()
    counts = pack_pages(shared)
    print(f"packed HTML sets into WARCs: {counts}")
    _jsonl(WORK / "references" / "wikitext-test.jsonl", wikitext_articles(shared / "text-wikitext2" / "test.txt"))
    truth = json.loads((shared / "html-scrapinghub-aeb" / "ground-truth.json").read_text())
    _jsonl(WORK / "references" / "news.jsonl", [entry["articleBody"] for _, entry in sorted(truth.items())])
    pages = real_documents.real_documents(shared).to_pylist()
    crawl = [
        row["text"]
        for row in pages
        if row["id"].startswith(("trafilatura-eval/", "readability/"))
        or (row["url"] is not None and not row["id"].startswith("scrapinghub/"))
    ]
    # Reference-quality prose: WikiText-2 validation articles in ~300-word pieces, and the public-domain speeches
    # (State of the Union, inaugural addresses) in 500-word pieces. None of it is a reference set here.
    reference = [
        piece
        for article in wikitext_articles(shared / "text-wikitext2" / "valid.txt")
        for piece in article_pieces(article)
    ]
    reference += [row["text"] for row in pages if row["id"].startswith(("state_union.zip/", "inaugural.zip/"))]
    report = train(reference, crawl, str(WORK / "quality.bin"), TrainOptions(bucket=200_000))
    held_out = report["held_out"]
    print(
        f"quality classifier: {len(reference)} pieces of reference prose vs {len(crawl)} crawl pages, "
        f"held-out ROC AUC {held_out['roc_auc']:.3f}, F1 {held_out['f1']:.3f}"
    )
    print(f"prepared in {time.perf_counter() - started:,.0f} s")


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--fresh", action="store_true", help="delete earlier inputs, runs and results first")
    args = parser.parse_args()
    if args.fresh:
        shutil.rmtree(WORK, ignore_errors=True)
        shutil.rmtree(ROOT / "runs" / "ablation-shared", ignore_errors=True)
    started = time.perf_counter()
    if not (WORK / "quality.bin").exists():
        prepare(args.shared)
    ablation = load_ablation(JOB)
    summary = run_ablation(ablation, use_ray=True)
    for name, variant in summary["variants"].items():
        removed = ", ".join(f"{ref} {c['documents']}" for ref, c in variant["contamination_removed"].items())
        print(
            f"{name:<24} {variant['documents']:>6,} documents {variant['tokens']:>10,} tokens "
            f"passes {max(variant['passes'].values()):.2f}; contaminated documents removed: {removed}"
        )
    main(["ablate", "report", ablation.output, "--metrics", "*.bits_per_byte"])
    print(
        f"whole ablation, from the raw pages: {time.perf_counter() - started:,.0f} s "
        f"(of which the ablation job, documents run included: {summary['wall_seconds']:,.0f} s)"
    )
    sys.exit(1 if summary["failed_runs"] else 0)


if __name__ == "__main__":
    run()
