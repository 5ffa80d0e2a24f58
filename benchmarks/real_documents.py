"""A set of real documents from ../shared/data for rule benchmarks and parity tests.

- main text extracted (resiliparse, fast and deterministic) from the real pages of the trafilatura evaluation set,
  Mozilla Readability's test pages and every shared WARC, with their URLs;
- the human-annotated article bodies of the scrapinghub benchmark;
- the plain-text corpora (WikiText-2, State of the Union, inaugural addresses, Shakespeare, Genesis in 8 languages,
  the Universal Declaration of Human Rights in ~380) cut at line breaks into documents of 500-600 words, near the
  length the issues' speed goals are stated for.

Built once and cached as Parquet (columns: id, text, url, lang) under the system temp folder.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CHUNK_WORDS = 500
CACHE_VERSION = 3


def _chunks(text: str, source: str) -> list[dict]:
    documents, lines, words = [], [], 0
    for line in text.splitlines():
        lines.append(line)
        words += len(line.split())
        if words >= CHUNK_WORDS:
            documents.append({"id": f"{source}#{len(documents)}", "text": "\n".join(lines).strip(), "url": None})
            lines, words = [], 0
    if words > 50:
        documents.append({"id": f"{source}#{len(documents)}", "text": "\n".join(lines).strip(), "url": None})
    return documents


def wikitext_articles(path: Path) -> list[str]:
    """WikiText-2's articles (split at its top-level ' = Title = ' lines), with its tokenisation undone."""
    articles, lines = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.fullmatch(r" = [^=].* = ", line):
            if lines:
                articles.append("\n".join(lines))
            lines = []
        elif line.strip() and not line.startswith(" = "):
            text = line.strip().replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".").replace("<unk>", "")
            lines.append(re.sub(r" ([,.;:!?)'])", r"\1", text).replace("( ", "("))
    return articles + ["\n".join(lines)]


def article_pieces(article: str, words: int = 300) -> list[str]:
    """An article cut at paragraph ends into pieces of at least `words` words (the last may be shorter)."""
    pieces, lines, count = [], [], 0
    for line in article.splitlines():
        lines.append(line)
        count += len(line.split())
        if count >= words:
            pieces.append("\n".join(lines))
            lines, count = [], 0
    return pieces + (["\n".join(lines)] if lines else [])


def html_pages(shared: Path) -> list[tuple[str, bytes, str | None]]:
    """(id, html bytes, url) of the real HTML pages in the evaluation sets."""
    pages = []
    evaldata = json.loads((shared / "html-trafilatura-eval" / "evaldata.json").read_text())
    file_to_url = {entry["file"]: url for url, entry in evaldata.items()}
    with tarfile.open(shared / "html-trafilatura-eval" / "trafilatura-eval.tar.xz") as tar:
        for member in tar:
            if member.isfile() and member.name.endswith((".html", ".htm")):
                name = member.name.rsplit("/", 1)[-1]
                pages.append((f"trafilatura-eval/{name}", tar.extractfile(member).read(), file_to_url.get(name)))
    with tarfile.open(shared / "html-mozilla-readability" / "test-pages.tar.xz") as tar:
        for member in tar:
            if member.isfile() and member.name.endswith("/source.html"):
                pages.append((f"readability/{member.name}", tar.extractfile(member).read(), None))
    return pages


def build(shared: Path) -> pa.Table:
    from resiliparse.extract.html2text import extract_plain_text

    from corpus.stages.extract import decode_html
    from corpus.stages.read import ReadOptions, read_records

    documents: list[dict] = []
    for page_id, data, url in html_pages(shared):
        html, _ = decode_html(data, None)
        text = extract_plain_text(html, main_content=True, preserve_formatting=True, alt_texts=False).strip()
        if len(text.split()) >= 20:
            documents.append({"id": page_id, "text": text, "url": url})
    for warc in sorted(shared.glob("warc-*/*.warc.gz")):
        with open(warc, "rb") as fh:
            for result in read_records(fh, str(warc), ReadOptions()):
                for row in result.table.to_pylist():
                    html, _ = decode_html(row["payload"], row["http_charset"])
                    text = extract_plain_text(html, main_content=True, preserve_formatting=True, alt_texts=False)
                    if len(text.split()) >= 20:
                        documents.append({"id": row["id"], "text": text.strip(), "url": row["url"]})
    truth = json.loads((shared / "html-scrapinghub-aeb" / "ground-truth.json").read_text())
    for key, entry in sorted(truth.items()):
        documents.append({"id": f"scrapinghub/{key}", "text": entry["articleBody"], "url": entry.get("url")})
    for name in ("valid.txt", "test.txt"):
        documents += _chunks((shared / "text-wikitext2" / name).read_text(), f"wikitext/{name}")
    documents += _chunks((shared / "text-tinyshakespeare" / "input.txt").read_text(), "shakespeare")
    for archive, encoding in (
        ("state_union.zip", "latin-1"),
        ("inaugural.zip", "latin-1"),
        ("genesis.zip", "utf-8"),
        ("udhr2.zip", "utf-8"),
    ):
        with zipfile.ZipFile(shared / "text-nltk" / archive) as zf:
            for name in sorted(zf.namelist()):
                if name.endswith(".txt"):
                    text = zf.read(name).decode(encoding, "replace")
                    documents += _chunks(text, f"{archive}/{name}")
    from corpus.stages.extract import LanguageIdentifier

    identify = LanguageIdentifier(max_chars=10_000)
    for document in documents:
        document["lang"] = identify(document["text"])[0]
    return pa.Table.from_pylist(
        documents,
        schema=pa.schema(
            [("id", pa.string()), ("text", pa.large_string()), ("url", pa.string()), ("lang", pa.string())]
        ),
    )


def real_documents(shared: Path) -> pa.Table:
    cache = Path(tempfile.gettempdir()) / f"corpus-real-documents-v{CACHE_VERSION}.parquet"
    if not cache.exists():
        table = build(shared)
        temporary = cache.with_suffix(f".tmp{os.getpid()}")
        pq.write_table(table, temporary)
        os.replace(temporary, cache)
    return pq.read_table(cache)


def benchmark_arguments(description: str, datatrove: bool = False, more=None) -> argparse.Namespace:
    """A benchmark's command line (`--shared`, and `--datatrove-python` where datatrove is a peer; `more(parser)`
    adds its own), parsed, with this process pinned to one core: every figure is per core."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    if more is not None:
        more(parser)
    parser.add_argument("--shared", type=Path, default=SHARED, help="the shared data folder")
    if datatrove:  # the parity extra installs datatrove beside corpus; a venv of its own works too
        here = sys.executable if importlib.util.find_spec("datatrove") else None
        parser.add_argument(
            "--datatrove-python", default=here, help="python with datatrove (default: this one, if it has datatrove)"
        )
    args = parser.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    return args
