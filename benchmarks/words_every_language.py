"""Words in every language: `corpus` against the word tokenizer datatrove assigns each FineWeb-2 language.

Texts: NLTK's udhr2 in ../shared/data, every translation whose language FineWeb-2 configures
(`udhr_languages.py`). Agreement: per language, the words two splits share in order over all words (the longer
split's count), line by line. Speed, per document on one core: windows of 1 to 21 lines of the UDHR (the FineWeb-2
benchmark's documents) `--copies` times over, split by `corpus` (`DocumentBatch.words` on one batch, its chunk
caches emptied first) and by datatrove's tokenizer (`word_tokenize` per document, loaded before the clock starts),
in `--rounds` interleaved rounds, the least time of each side counting; where a segmenter splits, its own call
on each document too ("segmenter alone": the floor both sides build on). Goals: >= 10x datatrove on languages split
by rules (spaCy's, Indic NLP's); <= 1.2x datatrove's time where both call the same segmenter library (datatrove's
wrapper is the library's call and a strip of each word), and <= 1.2x the segmenter alone.

    pip install -e '.[parity,languages]'
    python benchmarks/words_every_language.py [--copies 3] [--rounds 3] [--languages fra,tha]
"""

from __future__ import annotations

import time

from fineweb2_recipe import udhr_documents
from real_documents import benchmark_arguments
from udhr_languages import datatrove_tokenizer, equal_words, our_words, udhr_lines, udhr_texts

TIMED = {  # UDHR file: how its words are split
    "eng": "rules", "fra": "rules", "deu": "rules", "por_PT": "rules", "rus": "rules", "arb": "rules",
    "tur": "rules", "ind": "rules", "hin": "rules", "ben": "rules", "urd": "rules",
    "vie": "segmenter", "cmn_hans": "segmenter", "jpn": "segmenter", "tha": "segmenter", "kor": "segmenter",
    "khm": "segmenter", "lao": "segmenter", "mya": "segmenter",
}  # fmt: skip


def agreement(texts: dict[str, tuple[str, str]]) -> None:
    """Print each language's agreement, the languages below 99.9 %, and those datatrove cannot run offline."""
    rows, offline_only = [], []
    for name, (key, text) in texts.items():
        try:
            tokenizer = datatrove_tokenizer(key)
        except (ImportError, OSError):
            offline_only.append(name)
            continue
        lines = udhr_lines(text)
        equal, total = equal_words(our_words(key, lines), [tokenizer.word_tokenize(line) for line in lines])
        rows.append((name, key, equal / max(total, 1), total))
    below = [row for row in rows if row[2] < 0.999]
    exact = sum(row[2] == 1 for row in rows)
    print(f"words: {len(rows)} UDHR texts, {exact} split exactly alike, {len(rows) - len(below)} at >= 99.9 %")
    for name, key, share, total in below:
        print(f"  below 99.9 %: {name} ({key}) {share:.4f} of {total} words")
    print(f"  not run (datatrove's tokenizer downloads a model): {' '.join(offline_only)}")


def library_call(name: str):
    """The segmenter's own call on one document, nothing around it (the floor both sides build on), for the UDHR
    files split by a segmenter; None for the others."""
    from corpus.text import segmenters

    calls = {
        "tha": lambda text: __import__("pythainlp.tokenize").tokenize.word_tokenize(
            text, keep_whitespace=False, engine="newmm-safe"),
        "kor": lambda text: segmenters._kiwi_tokenizer().tokenize(text),
        "cmn_hans": lambda text: list(segmenters._jieba_tokenizer().tokenize(text)),
        "jpn": lambda text: segmenters._sudachi_tokenizer().tokenize(text),
        "khm": lambda text: segmenters._khmer_tokenize()(text, return_tokens=True),
        "lao": lambda text: __import__("laonlp.tokenize").tokenize.word_tokenize(text),
        "mya": lambda text: __import__("pyidaungsu").tokenize(text, form="word"),
    }  # fmt: skip
    return calls.get(name)


def speed(texts: dict[str, tuple[str, str]], shared, copies: int, rounds: int, timed: list[str]) -> None:
    from corpus.text.batch import DocumentBatch
    from corpus.text.tokenizers import forget_chunks

    print(f"\n{'language':14} {'kind':10} {'docs':>6} {'ours ms/doc':>12} {'datatrove ms/doc':>17} {'ratio':>7}"
          f"{'segmenter alone':>16} {'ours/alone':>10} {'datatrove/alone':>15}")  # fmt: skip
    ratios: dict[str, list[float]] = {"rules": [], "segmenter": [], "alone": []}
    for name in timed:
        kind, key = TIMED[name], texts[name][0]
        documents = udhr_documents(shared, name) * copies
        tokenizer = datatrove_tokenizer(key)
        tokenizer.word_tokenize(documents[0])  # loads its library and model
        _ = DocumentBatch(documents[:2], langs=[key] * 2).words  # loads ours, compiles the kernels
        alone_call = library_call(name)
        theirs = ours = alone = float("inf")
        for _ in range(rounds):  # interleaved, the least of each side counts: this VM's speed drifts by minutes
            started = time.perf_counter()
            for document in documents:
                tokenizer.word_tokenize(document)
            theirs = min(theirs, time.perf_counter() - started)
            if alone_call is not None:
                started = time.perf_counter()
                for document in documents:
                    alone_call(document)
                alone = min(alone, time.perf_counter() - started)
            forget_chunks()
            started = time.perf_counter()
            _ = DocumentBatch(documents, langs=[key] * len(documents)).words
            ours = min(ours, time.perf_counter() - started)
        n = len(documents)
        floor = f"{1000 * alone / n:16.3f} {ours / alone:9.2f}x {theirs / alone:14.2f}x" if alone_call else ""
        print(
            f"{name:14} {kind:10} {n:6d} {1000 * ours / n:12.3f} {1000 * theirs / n:17.3f} {theirs / ours:6.1f}x{floor}"
        )
        ratios[kind].append(theirs / ours)
        if alone_call is not None:
            ratios["alone"].append(ours / alone)
    said = []
    if ratios["rules"]:
        said.append(f"rules: ours >= {min(ratios['rules']):.1f}x datatrove (goal >= 10x)")
    if ratios["segmenter"]:
        said.append(f"segmenters: ours <= {1 / min(ratios['segmenter']):.2f}x datatrove's time (goal <= 1.2x)")
    if ratios["alone"]:
        said.append(f"ours <= {max(ratios['alone']):.2f}x the segmenter alone (goal <= 1.2x)")
    print("goal: " + "; ".join(said))


def options(parser) -> None:
    parser.add_argument("--copies", type=int, default=3, help="each language's documents, this many times over")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each side; the least time counts")
    parser.add_argument("--languages", help="UDHR file names, comma-separated (default: every one)")


def main() -> None:
    args = benchmark_arguments(__doc__, more=options)
    chosen = args.languages.split(",") if args.languages else None
    texts = udhr_texts(args.shared)
    agreement({name: text for name, text in texts.items() if chosen is None or name in chosen})
    timed = [name for name in TIMED if chosen is None or name in chosen]
    speed(udhr_texts(args.shared, configured_only=False), args.shared, args.copies, args.rounds, timed)


if __name__ == "__main__":
    main()
