"""Model scores end to end on this machine: score the shared WARCs, bucket them, ablate the top buckets.

Prepares, under `runs/scored-pages/` (once; `--fresh` starts over):
- `edu-shaped/`: a classifier of FineWeb-Edu's shape (BERT-base, 512 tokens, a regression head) with random weights
  and a WordPiece tokenizer trained on the shared text: what scoring with FineWeb-Edu's classifier costs here;
- `reference-head/`: a head trained on a small encoder (2 layers, random weights) by `corpus classifier train
  --kind encoder`, WikiText-2 validation articles and scrapinghub's article bodies against the shared WARCs' text;
- `references/wikitext-test.jsonl`: held-out WikiText-2 test articles the ablation scores models on.

Then runs `jobs/ablation_by_score.toml`: its documents job (`jobs/scored_pages.toml`) extracts the shared WARCs,
scores the documents the rules keep with both models and buckets the max of their percentiles; four variants (what
the rules keep, and the top 50, 30 and 10 % of it by that percentile) train a tiny model on three paired seeds
each. Prints the documents and tokens per variant, the buckets, and the verdicts.

    python benchmarks/ablation_by_score.py [--fresh]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from model_scores import write_random_classifier
from real_documents import SHARED, article_pieces, wikitext_articles

from corpus.api import read_documents
from corpus.cli import main
from corpus.lab.ablation import run_ablation
from corpus.lab.ablation_job import load_ablation
from corpus.models.training import HeadOptions, train_head

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "runs" / "scored-pages"
JOB = ROOT / "jobs" / "ablation_by_score.toml"


def prepare(shared: Path) -> None:
    started = time.perf_counter()
    test_articles = wikitext_articles(shared / "text-wikitext2" / "test.txt")
    (WORK / "references").mkdir(parents=True, exist_ok=True)
    (WORK / "references" / "wikitext-test.jsonl").write_text(
        "".join(json.dumps({"text": article}) + "\n" for article in test_articles)
    )
    reference = [
        piece for a in wikitext_articles(shared / "text-wikitext2" / "valid.txt") for piece in article_pieces(a)
    ]
    truth = json.loads((shared / "html-scrapinghub-aeb" / "ground-truth.json").read_text())
    reference += [entry["articleBody"] for _, entry in sorted(truth.items())]
    warcs = sorted(str(path) for path in shared.glob("warc-*/*.warc.gz"))
    crawl = [text for text in read_documents(warcs).column("text").to_pylist() if text]
    write_random_classifier(WORK / "edu-shaped", reference + crawl)
    encoder = write_random_classifier(
        WORK / "encoder", reference + crawl, layers=2, hidden=256, heads=4, vocabulary=4000, encoder_only=True
    )
    labels = ["reference"] * len(reference) + ["crawl"] * len(crawl)
    options = HeadOptions(head="classes", max_tokens=256, epochs=60, lr=3e-3, validation=0.2)
    report = train_head(str(encoder), reference + crawl, labels, str(WORK / "reference-head"), options)
    held = report["held_out"]
    print(
        f"reference head: {len(reference)} reference texts vs {len(crawl)} crawl pages, held-out ROC AUC "
        f"{held['roc_auc']:.3f}, accuracy {held['accuracy']:.3f}; prepared in {time.perf_counter() - started:,.0f} s"
    )


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--fresh", action="store_true", help="delete earlier models, runs and results first")
    args = parser.parse_args()
    if args.fresh:
        shutil.rmtree(WORK, ignore_errors=True)
        shutil.rmtree(ROOT / "runs" / "ablation-by-score", ignore_errors=True)
    started = time.perf_counter()
    if not (WORK / "reference-head" / "config.json").exists():
        prepare(args.shared)
    ablation = load_ablation(JOB)
    summary = run_ablation(ablation, use_ray=True)
    stats = json.loads((Path(ablation.documents.output) / "stats.json").read_text())
    print(f"documents run: {stats['totals']['kept']:,} documents kept by the rules, scored by both models; "
          f"quality buckets 0-19: {stats['buckets']['quality']['documents']}")  # fmt: skip
    for name, variant in summary["variants"].items():
        print(f"{name:<16} {variant['documents']:>6,} documents {variant['tokens']:>9,} tokens "
              f"passes {max(variant['passes'].values()):.2f}")  # fmt: skip
    main(["ablate", "report", ablation.output, "--metrics", "*.bits_per_byte"])
    print(f"whole loop, from the raw pages: {time.perf_counter() - started:,.0f} s")
    sys.exit(1 if summary["failed_runs"] else 0)


if __name__ == "__main__":
    run()
