"""FineWeb-2's per-language filtering, corpus against datatrove on the same texts, one core each.

The recipe is FineWeb-2's filtering step (`fineweb-2-pipeline.py` of huggingface/fineweb-2) for each language:
the language-score floor, Gopher repetition, FineWeb quality and Gopher quality with that language's settings
(`configs/<key>.yml`) and its word segmenter. Texts: windows of 1 to 21 lines of the Universal Declaration of Human
Rights in each language (NLTK's udhr2 in ../shared/data, every fifth with repeated lines), `--copies` times.
Ours: one `apply_rules` call per language (every signal of every document, then the selection); datatrove: its
filters in a pipeline, which stops at a document's first failing filter. Goal: ours >= 5x datatrove's pages/s
on space-separated languages, >= 2x where both call the same segmenter (zh ja th ko).

    pip install -e '.[parity,languages]'
    python benchmarks/fineweb2_recipe.py
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

from real_documents import benchmark_arguments

LANGUAGES = {"cmn_Hani": "cmn_hans", "jpn_Jpan": "jpn", "tha_Thai": "tha", "kor_Hang": "kor", "vie_Latn": "vie",
             "rus_Cyrl": "rus", "arb_Arab": "arb", "hin_Deva": "hin", "ben_Beng": "ben", "deu_Latn": "deu",
             "fra_Latn": "fra", "ind_Latn": "ind"}  # fmt: skip
SEGMENTED = ("cmn_Hani", "jpn_Jpan", "tha_Thai", "kor_Hang", "vie_Latn")
CONFIGS = "lists-fineweb2/fineweb2-configs.tar.xz"

DATATROVE = r"""
import json, sys, tarfile, time
import yaml
from datatrove.data import Document
from datatrove.pipeline.filters import FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter
from datatrove.utils.word_tokenizers import KiwiTokenizer
texts, configs = json.load(open(sys.argv[1])), sys.argv[2]
out = {}
with tarfile.open(configs) as archive:
    for key, pages in texts.items():
        c = yaml.safe_load(archive.extractfile(f"configs/{key}.yml"))
        language = KiwiTokenizer(model_type="cong") if key == "kor_Hang" else key  # its default model is gone
        chain = [
            GopherRepetitionFilter(language=language, dup_para_frac=0, dup_line_char_frac=0, dup_para_char_frac=0,
                                   dup_line_frac=c["dup_line_frac"], top_n_grams=c["top_n_grams"],
                                   dup_n_grams=c["dup_n_grams"]),
            FineWebQualityFilter(language=language, short_line_thr=999, char_duplicates_ratio=0.1,
                                 line_punct_thr=c["line_punct_thr"], new_line_ratio=c["new_line_ratio"]),
            GopherQualityFilter(language=language, max_avg_word_length=c["max_avg_word_length"],
                                min_avg_word_length=c["min_avg_word_length"], stop_words=c["stopwords"],
                                max_non_alpha_words_ratio=c["max_non_alpha_words_ratio"], min_stop_words=2),
        ]
        for step in chain:  # load the segmenter before the clock starts
            step.filter(Document(text=pages[0], id="warm"))
        started, kept = time.perf_counter(), 0
        for i, text in enumerate(pages):
            doc = Document(text=text, id=str(i), metadata={"language_score": 1.0})
            if doc.metadata["language_score"] < c["language_score"]:
                continue
            kept += all(step.filter(doc) is True for step in chain)
        out[key] = {"seconds": time.perf_counter() - started, "kept": kept}
print(json.dumps(out))
"""


def udhr_documents(shared: Path, name: str) -> list[str]:
    """Windows of 1 to 21 non-empty lines of a UDHR translation; every fifth also repeats its first two lines."""
    text = zipfile.ZipFile(shared / "text-nltk" / "udhr2.zip").read(f"udhr2/{name}.txt").decode("utf-8")
    lines = [line for line in text.splitlines() if line.strip()]
    documents = []
    for size in (1, 2, 3, 5, 8, 13, 21):
        for start in range(0, len(lines), size // 2 + 1):
            window = lines[start : start + size]
            documents.append("\n".join(window))
            if len(documents) % 5 == 0:
                documents.append("\n".join(window + window[:2]))
    return documents


def ours(key: str, texts: list[str], configs: Path) -> tuple[float, int]:
    """(seconds, documents kept) of the recipe over one language's texts."""
    import pyarrow as pa

    from corpus.api import apply_rules

    def run(chosen: list[str]):
        table = pa.table({"text": chosen, "lang": [key] * len(chosen), "lang_score": [1.0] * len(chosen)})
        return apply_rules(
            table,
            rules=["language", "gopher_repetition", "gopher_quality", "fineweb"],
            settings={"language": {"languages": ["*"]}},
            thresholds={"per_language": str(configs)},
        )

    run(texts[:5])  # load the segmenter and compile the kernels before the clock starts
    started = time.perf_counter()
    kept = run(texts).column("kept")
    return time.perf_counter() - started, sum(kept.to_pylist())


def options(parser) -> None:
    parser.add_argument("--copies", type=int, default=3, help="each language's texts, this many times over")
    parser.add_argument("--languages", default=",".join(LANGUAGES), help="language keys, comma-separated")


def main() -> None:
    args = benchmark_arguments(__doc__, datatrove=True, more=options)
    configs = args.shared / CONFIGS
    keys = args.languages.split(",")
    texts = {key: udhr_documents(args.shared, LANGUAGES[key]) * args.copies for key in keys}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "texts.json"
        path.write_text(json.dumps(texts))
        done = subprocess.run(  # on this process's core (the child inherits its affinity)
            [args.datatrove_python, "-c", DATATROVE, str(path), str(configs)], capture_output=True, text=True
        )
    if done.returncode:
        raise SystemExit(f"datatrove's side failed:\n{done.stderr[-3000:]}")
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{'language':10} {'pages':>6} {'ours ms/page':>13} {'datatrove ms/page':>18} {'ratio':>7}  kept (ours / dt)")
    total_ours = total_theirs = pages = 0.0
    for key in keys:
        seconds, kept = ours(key, texts[key], configs)
        n = len(texts[key])
        mine, peer = 1000 * seconds / n, 1000 * theirs[key]["seconds"] / n
        total_ours, total_theirs, pages = total_ours + seconds, total_theirs + theirs[key]["seconds"], pages + n
        segmenter = "segmenter" if key in SEGMENTED else "spaces"
        said = f"{key:10} {n:6d} {mine:13.3f} {peer:18.3f} {peer / mine:6.1f}x  {kept} / {theirs[key]['kept']}"
        print(f"{said}  ({segmenter})")
    mine, peer = 1000 * total_ours / pages, 1000 * total_theirs / pages
    print(f"ms/page: ours {mine:.3f}, datatrove {peer:.3f}, ratio {peer / mine:.1f} (languages: {', '.join(keys)})")


if __name__ == "__main__":
    main()
