"""Every UDHR translation whose language FineWeb-2 configures, with datatrove's word tokenizer and filters for it.

The texts: NLTK's udhr2 in ../shared/data, one file per language and script (`fra`, `srp_cyrl`, `cmn_hans`); a
file's key is its ISO 639-3 code and the script most of its letters are in, as `corpus` keys a document
(`fra_Latn`); files whose key has no FineWeb-2 config are left out. The peer: datatrove's tokenizer for the key
(`load_word_tokenizer`, as FineWeb-2's filters load it) and the three filters FineWeb-2's pipeline runs with the
key's settings. Shared by `words_every_language.py` and the tests that hold both to their goals.
"""

from __future__ import annotations

import difflib
import tarfile
import zipfile
from pathlib import Path

CONFIGS = "lists-fineweb2/fineweb2-configs.tar.xz"
UDHR = "text-nltk/udhr2.zip"


def udhr_texts(shared: Path, configured_only: bool = True) -> dict[str, tuple[str, str]]:
    """UDHR file name -> (language key, text), for every file whose key FineWeb-2 configures (or every file)."""
    from corpus.text.characters import code_points
    from corpus.text.languages import language_key
    from corpus.text.scripts import dominant_scripts

    with tarfile.open(shared / CONFIGS) as archive:
        configured = {Path(name).stem for name in archive.getnames() if name.endswith(".yml")}
    texts = {}
    with zipfile.ZipFile(shared / UDHR) as archive:
        for path in sorted(name for name in archive.namelist() if name.endswith(".txt")):
            name = path.rsplit("/", 1)[-1].removesuffix(".txt")
            text = archive.read(path).decode("utf-8")
            key = language_key(name.split("_")[0], dominant_scripts(*code_points([text]))[0])
            if key in configured or not configured_only:
                texts[name] = (key, text)
    return texts


def udhr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def config_of(shared: Path, key: str) -> dict:
    import yaml

    with tarfile.open(shared / CONFIGS) as archive:
        return yaml.safe_load(archive.extractfile(f"configs/{key}.yml"))


def datatrove_tokenizer(key: str):
    """datatrove's word tokenizer for the key; raises ImportError where its package is missing (Stanza's) or
    OSError where it cannot load its model offline."""
    from datatrove.utils.word_tokenizers import KiwiTokenizer, load_word_tokenizer

    # datatrove asks kiwipiepy for its `sbg` model, which kiwipiepy_model stopped shipping in 0.22: the same
    # tokenizer class on the model the wheel ships (what ours uses too).
    return KiwiTokenizer(model_type="cong") if key == "kor_Hang" else load_word_tokenizer(key)


def datatrove_filters(key: str, config: dict) -> dict:
    """datatrove's three filters as FineWeb-2's pipeline set them for one language, in the pipeline's order."""
    from datatrove.pipeline.filters import FineWebQualityFilter, GopherQualityFilter, GopherRepetitionFilter

    language = datatrove_tokenizer(key) if key == "kor_Hang" else key
    return {
        "gopher_repetition": GopherRepetitionFilter(
            language=language,
            dup_para_frac=0,
            dup_line_char_frac=0,
            dup_para_char_frac=0,
            dup_line_frac=config["dup_line_frac"],
            top_n_grams=config["top_n_grams"],
            dup_n_grams=config["dup_n_grams"],
        ),
        "fineweb": FineWebQualityFilter(
            language=language,
            short_line_thr=999,
            char_duplicates_ratio=0.1,
            line_punct_thr=config["line_punct_thr"],
            new_line_ratio=config["new_line_ratio"],
        ),
        "gopher_quality": GopherQualityFilter(
            language=language,
            max_avg_word_length=config["max_avg_word_length"],
            min_avg_word_length=config["min_avg_word_length"],
            stop_words=config["stopwords"],
            max_non_alpha_words_ratio=config["max_non_alpha_words_ratio"],
            min_stop_words=2,
        ),
    }


def our_words(key: str, texts: list[str]) -> list[list[str]]:
    """Each text's words as `corpus` splits a document labelled `key`."""
    from corpus.text.batch import DocumentBatch

    words = DocumentBatch(texts, langs=[key] * len(texts)).words
    distinct, ids, offsets = words.distinct, words.ids.tolist(), words.offsets.tolist()
    return [[distinct[i] for i in ids[offsets[k] : offsets[k + 1]]] for k in range(len(texts))]


def equal_words(ours: list[list[str]], theirs: list[list[str]]) -> tuple[int, int]:
    """(words in the longest common run-wise alignment of each pair of lists, the longer list's words), summed."""
    equal = total = 0
    for mine, peer in zip(ours, theirs, strict=True):
        if mine == peer:
            equal, total = equal + len(mine), total + len(mine)
            continue
        matcher = difflib.SequenceMatcher(None, mine, peer, autojunk=False)
        equal += sum(block.size for block in matcher.get_matching_blocks())
        total += max(len(mine), len(peer))
    return equal, total


def first_difference(ours: list[list[str]], theirs: list[list[str]]) -> str:
    """The first place the two splits differ, as `ours | theirs`."""
    for mine, peer in zip(ours, theirs, strict=True):
        if mine != peer:
            lost = [word for word in difflib.ndiff(mine, peer) if word[0] in "+-"][:4]
            return " ".join(lost)
    return ""
