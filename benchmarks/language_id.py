"""Language ID on a bounded prefix, and the language pre-pass against the full path, on the shared pages.

1. Prefix: lid.176's top language from a text's first N characters against its language from the whole text, on
   the Universal Declaration of Human Rights (~380 languages and scripts, whole documents) and on every page of the
   shared WARCs and HTML sets (main text by the default extractor). Per N: agreement of the top language, of a
   one-language job's keep decision (en at score >= 0.65), and ms per text.
2. Pre-pass: a job keeping one language (FineWeb: English at lid score >= 0.65 on the extracted text) drops pages
   whose rough text (`corpus.text.markup`: the markup's text without a DOM, its first `PREPASS_CHARS`
   characters) is identified as another language with score >= `prepass_min_score`, before the extractor runs.
   Over the same pages: the share of the pages the full path keeps that the pre-pass keeps too (goal >= 99 %), the
   share of all pages it spares the extractor, and ms per page; beside it, the same pre-pass on all of the page's
   visible text by resiliparse (a DOM parse without main-content selection), what a user would reach for.

    python benchmarks/language_id.py [--language en]
"""

from __future__ import annotations

import argparse
import time
import zipfile
from pathlib import Path

from extraction_quality import SETS, SHARED

PREFIXES = (500, 1_000, 2_000, 5_000, 10_000)


def udhr_texts(shared: Path) -> list[str]:
    with zipfile.ZipFile(shared / "text-nltk" / "udhr2.zip") as archive:
        names = sorted(name for name in archive.namelist() if name.endswith(".txt"))
        return [archive.read(name).decode("utf-8", "replace") for name in names]


def shared_pages(shared: Path) -> list[tuple[str, str | None]]:
    """(decoded HTML, URL) of every page of the HTML sets and the shared WARCs."""
    from corpus.stages.extract import decode_html
    from corpus.stages.read import ReadOptions, read_records

    pages = [(decode_html(page["html"], None)[0], page["url"]) for load in SETS.values() for page in load(shared)]
    for warc in sorted(shared.glob("warc-*/*.warc.gz")):
        with open(warc, "rb") as stream:
            for batch in read_records(stream, str(warc), ReadOptions()):
                table = batch.table.filter(batch.table.column("kind").to_numpy(zero_copy_only=False) == "html")
                for payload, charset, url in zip(
                    table.column("payload").to_pylist(),
                    table.column("http_charset").to_pylist(),
                    table.column("url").to_pylist(),
                    strict=True,
                ):
                    pages.append((decode_html(payload, charset)[0], url))
    return pages


def prefix_agreement(texts: list[str], label: str, language: str, min_score: float) -> None:
    """Per prefix length: the top language's agreement with the whole text's, and the agreement of the keep
    decision a one-language job makes (`language` at score >= `min_score`)."""
    from corpus.stages.extract import LanguageIdentifier

    full = LanguageIdentifier(max_chars=10**9)
    started = time.perf_counter()
    truth = [full(text) for text in texts]
    full_ms = (time.perf_counter() - started) * 1000 / len(texts)
    keeps = [lang == language and (score or 0.0) >= min_score for lang, score in truth]
    mean_chars = sum(map(len, texts)) / len(texts)
    for prefix in PREFIXES:
        identify = LanguageIdentifier(max_chars=prefix)
        started = time.perf_counter()
        guesses = [identify(text) for text in texts]
        ms = (time.perf_counter() - started) * 1000 / len(texts)
        agree = sum(g[0] == t[0] for g, t in zip(guesses, truth, strict=True)) / len(texts)
        decided = [lang == language and (score or 0.0) >= min_score for lang, score in guesses]
        same = sum(d == k for d, k in zip(decided, keeps, strict=True)) / len(texts)
        print(f"{label:<34}{len(texts):>6}{mean_chars:>11,.0f}{prefix:>8,}{agree:>10.2%}{same:>10.2%}{ms:>9.3f}")
    print(f"{label:<34}{len(texts):>6}{mean_chars:>11,.0f}{'all':>8}{1:>10.2%}{1:>10.2%}{full_ms:>9.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=SHARED, help="the shared data folder")
    parser.add_argument("--language", default="en", help="the one language the job keeps")
    parser.add_argument("--min-score", type=float, default=0.65, help="the job's language score threshold")
    args = parser.parse_args()
    from resiliparse.extract.html2text import extract_plain_text

    from corpus.stages.extract import PREPASS_CHARS, ExtractOptions, LanguageIdentifier, main_text
    from corpus.text.markup import rough_text

    pages = shared_pages(args.shared)
    extractor = ExtractOptions().extractor
    texts = [main_text(extractor, html, url).strip() for html, url in pages]

    keep = f"{args.language}>={args.min_score:g}"
    print(f"{'texts':<34}{'count':>6}{'mean chars':>11}{'prefix':>8}{'top lang':>10}{keep:>10}{'ms/text':>9}")
    prefix_agreement(udhr_texts(args.shared), "UDHR, whole documents", args.language, args.min_score)
    prefix_agreement([t for t in texts if t], f"shared pages, {extractor} text", args.language, args.min_score)

    identify = LanguageIdentifier(max_chars=ExtractOptions().lid_max_chars)
    full_keeps = [
        lang == args.language and score >= args.min_score
        for lang, score in (identify(text) if text else (None, 0.0) for text in texts)
    ]
    markups = [html.encode("utf-8", "replace") for html, _ in pages]
    rough = LanguageIdentifier(max_chars=PREPASS_CHARS)
    started = time.perf_counter()
    rough_langs = [rough(rough_text(markup, PREPASS_CHARS)) for markup in markups]
    rough_ms = (time.perf_counter() - started) * 1000 / len(pages)
    started = time.perf_counter()
    visible_langs = [
        identify(extract_plain_text(html, main_content=False, preserve_formatting=False, alt_texts=False))
        for html, _ in pages
    ]
    visible_ms = (time.perf_counter() - started) * 1000 / len(pages)
    print()
    print(
        f"pre-pass for {args.language!r} on {len(pages):,} pages; full path keeps {sum(full_keeps):,} "
        f"({args.language} at score >= {args.min_score} on the {extractor} text)"
    )
    print(f"{'':>18}{'rough text (ours)':^36}{'resiliparse visible text':^36}")
    print(f"{'prepass_min_score':>18}" + f"{'full-path kept, kept':>22}{'spared':>14}" * 2)
    for min_score in (0.0, 0.3, 0.5, 0.7, 0.9):
        row = f"{min_score:>18.1f}"
        for langs in (rough_langs, visible_langs):
            drops = [lang != args.language and (score or 0.0) >= min_score for lang, score in langs]
            kept_too = sum(keep and not drop for keep, drop in zip(full_keeps, drops, strict=True))
            row += f"{kept_too / max(sum(full_keeps), 1):>22.2%}{sum(drops) / len(pages):>14.1%}"
        print(row)
    print(f"{'ms/page':>18}{rough_ms:>36.3f}{visible_ms:>36.3f}   ratio {visible_ms / rough_ms:.1f}x")


if __name__ == "__main__":
    main()
