"""Extraction quality by evidence: every extraction mode on the shared pages with human ground truth.

Sets (../shared/data):
  scrapinghub   181 news/blog pages, the annotated full article body           bag-of-words P / R / F1 per page
  dragnet       1,381 news/blog pages (2012), the annotated main text, comments cut  bag-of-words P / R / F1 per page
  readability   130 pages, Mozilla Readability's expected article (HTML->text) bag-of-words P / R / F1 per page
  trafilatura   923 pages with snippets that must (`with`) and must not (`without`) be extracted: precision,
                recall and F1 over snippets, as trafilatura's own evaluation counts them (its dev set: biased
                towards trafilatura)

Modes: the project's `EXTRACTORS`, and the peer a new user would try first: trafilatura's own defaults
(`trafilatura.extract(html)`). Bag-of-words: lower-cased `\\w+` words as multisets; an empty extraction scores 0.
"Empty" is the share of pages where the mode returned no text. Pages/s is extraction alone on one core (decoding
excluded). Macro averages over pages.

    python benchmarks/extraction_quality.py [--limit N] [--jobs 2] [--details out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import tarfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
WORD = re.compile(r"\w+")
PEER = "trafilatura defaults"
DRAGNET_COMMENTS = "!@#$%^&*()"  # dragnet's gold files: the main text, this marker, then the page's comments


def scrapinghub(shared: Path) -> list[dict]:
    truth = json.loads((shared / "html-scrapinghub-aeb" / "ground-truth.json").read_text())
    return [
        {
            "id": f"scrapinghub/{key}",
            "html": gzip.decompress((shared / "html-scrapinghub-aeb" / "html" / f"{key}.html.gz").read_bytes()),
            "url": entry.get("url"),
            "gold": entry["articleBody"],
        }
        for key, entry in sorted(truth.items())
    ]


def dragnet(shared: Path) -> list[dict]:
    pages, gold = {}, {}
    with tarfile.open(shared / "html-dragnet" / "dragnet.tar.xz") as tar:
        for member in tar:
            name = member.name.rsplit("/", 1)[-1]
            if member.isfile() and "/input/" in member.name and name.endswith(".html"):
                pages[name.removesuffix(".html")] = tar.extractfile(member).read()
            elif member.isfile() and "/GoldStandard/" in member.name and name.endswith(".txt"):
                text = tar.extractfile(member).read().decode("utf-8", "replace")
                gold[name.removesuffix(".txt")] = text.split(DRAGNET_COMMENTS, 1)[0]  # the main text, no comments
    return [
        {"id": f"dragnet/{key}", "html": pages[key], "url": None, "gold": gold[key]}
        for key in sorted(pages)
        if key in gold
    ]


def readability(shared: Path) -> list[dict]:
    import lxml.html

    sources, expected = {}, {}
    with tarfile.open(shared / "html-mozilla-readability" / "test-pages.tar.xz") as tar:
        for member in tar:
            case = member.name.rsplit("/", 2)[-2] if member.name.count("/") >= 1 else ""
            if member.isfile() and member.name.endswith("/source.html"):
                sources[case] = tar.extractfile(member).read()
            elif member.isfile() and member.name.endswith("/expected.html"):
                expected[case] = lxml.html.fromstring(tar.extractfile(member).read()).text_content()
    return [
        {"id": f"readability/{case}", "html": sources[case], "url": None, "gold": expected[case]}
        for case in sorted(sources)
        if case in expected
    ]


def trafilatura_eval(shared: Path) -> list[dict]:
    entries = json.loads((shared / "html-trafilatura-eval" / "evaldata.json").read_text())
    by_file = {entry["file"]: (url, entry) for url, entry in entries.items()}
    pages = []
    with tarfile.open(shared / "html-trafilatura-eval" / "trafilatura-eval.tar.xz") as tar:
        for member in tar:
            name = member.name.rsplit("/", 1)[-1]
            if member.isfile() and name in by_file:
                url, entry = by_file[name]
                pages.append(
                    {
                        "id": f"trafilatura-eval/{name}",
                        "html": tar.extractfile(member).read(),
                        "url": url,
                        "with": entry.get("with") or [],
                        "without": entry.get("without") or [],
                    }
                )
    return sorted(pages, key=lambda page: page["id"])


SETS = {"scrapinghub": scrapinghub, "dragnet": dragnet, "readability": readability, "trafilatura": trafilatura_eval}


def extract_with(mode: str, html: str, url: str | None) -> str:
    from corpus.stages.extract import main_text

    if mode == PEER:
        import trafilatura

        return (trafilatura.extract(html, url=url) or "").strip()
    return main_text(mode, html, url).strip()


def bag_scores(text: str, gold: str) -> tuple[float, float, float]:
    ours, theirs = Counter(WORD.findall(text.lower())), Counter(WORD.findall(gold.lower()))
    overlap = sum((ours & theirs).values())
    precision = overlap / sum(ours.values()) if ours else 0.0
    recall = overlap / sum(theirs.values()) if theirs else 0.0
    return precision, recall, (2 * precision * recall / (precision + recall) if overlap else 0.0)


def snippet_counts(text: str, must: list[str], must_not: list[str]) -> tuple[int, int, int]:
    """(found `with` snippets, missed `with` snippets, found `without` snippets), whitespace normalised."""
    flat = " ".join(text.split())
    found = sum(" ".join(s.split()) in flat for s in must)
    leaked = sum(" ".join(s.split()) in flat for s in must_not)
    return found, len(must) - found, leaked


def score_mode(job: tuple[str, str, list[dict], int | None]) -> dict:
    """One mode over one set, in its own process pinned to one core."""
    mode, set_name, pages, core = job
    if core is not None:
        os.sched_setaffinity(0, {core})
    from corpus.stages.extract import decode_html

    decoded = [decode_html(page["html"], None)[0] for page in pages]
    extract_with(mode, decoded[0], pages[0]["url"])  # imports and caches warm
    started = time.perf_counter()
    texts = [extract_with(mode, html, page["url"]) for html, page in zip(decoded, pages, strict=True)]
    seconds = time.perf_counter() - started
    result = {"mode": mode, "set": set_name, "pages": len(pages), "pages_per_s": len(pages) / seconds}
    result["empty"] = sum(not text for text in texts) / len(pages)
    if set_name == "trafilatura":
        found = missed = leaked = 0
        for text, page in zip(texts, pages, strict=True):
            f, m, leak = snippet_counts(text, page["with"], page["without"])
            found, missed, leaked = found + f, missed + m, leaked + leak
        precision, recall = found / max(found + leaked, 1), found / max(found + missed, 1)
        result.update(precision=precision, recall=recall, f1=2 * precision * recall / max(precision + recall, 1e-9))
        result["per_page"] = {}
    else:
        scores = [bag_scores(text, page["gold"]) for text, page in zip(texts, pages, strict=True)]
        for index, name in enumerate(("precision", "recall", "f1")):
            result[name] = sum(s[index] for s in scores) / len(scores)
        result["per_page"] = {page["id"]: round(s[2], 4) for page, s in zip(pages, scores, strict=True)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=SHARED, help="the shared data folder")
    parser.add_argument("--limit", type=int, default=0, help="at most N pages per set (0 = all)")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)), help="processes, one core each")
    parser.add_argument("--details", type=Path, help="write every page's F1 per mode to this JSON file")
    args = parser.parse_args()
    from corpus.stages.extract import EXTRACTORS

    if not (args.shared / "html-scrapinghub-aeb").is_dir():
        raise SystemExit(f"no ground-truth pages under {args.shared}: this benchmark needs ../shared/data (--shared)")
    modes = [*EXTRACTORS, PEER]
    sets = {name: load(args.shared)[: args.limit or None] for name, load in SETS.items()}
    cores = sorted(os.sched_getaffinity(0))
    jobs = [(mode, name, pages) for name, pages in sets.items() for mode in modes]
    # A fresh process per job: the peer's pages/s without what our modes set up in trafilatura's parser.
    with ProcessPoolExecutor(args.jobs, max_tasks_per_child=1) as pool:
        futures = [
            pool.submit(score_mode, (mode, name, pages, cores[i % len(cores)] if args.jobs > 1 else None))
            for i, (mode, name, pages) in enumerate(jobs)
        ]
        results = [future.result() for future in futures]

    print(f"{'set':<13}{'mode':<22}{'pages':>6}{'precision':>10}{'recall':>8}{'F1':>7}{'empty':>7}{'pages/s':>9}")
    for r in results:
        print(
            f"{r['set']:<13}{r['mode']:<22}{r['pages']:>6}{r['precision']:>10.3f}{r['recall']:>8.3f}{r['f1']:>7.3f}"
            f"{r['empty']:>7.1%}{r['pages_per_s']:>9.1f}"
        )
    print()
    by = {(r["set"], r["mode"]): r for r in results}
    for mode in EXTRACTORS:
        ratios = ", ".join(f"{name} {by[name, mode]['f1'] / by[name, PEER]['f1']:.3f}" for name in sets)
        at_least = all(by[name, mode]["f1"] >= by[name, PEER]["f1"] for name in sets)
        print(f"F1 of {mode} / {PEER}: {ratios}; at least as good on every set: {'yes' if at_least else 'no'}")
    if args.details:
        args.details.write_text(json.dumps({f"{r['set']}|{r['mode']}": r["per_page"] for r in results}))


if __name__ == "__main__":
    main()
