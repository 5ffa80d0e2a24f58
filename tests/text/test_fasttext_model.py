"""fastText models applied in Numba say what fastText says: the same top label and the same probability, bit for
bit, on lid.176 over real pages and on supervised models trained here with each loss, quantized and not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import fasttext
import numpy as np
import pyarrow as pa
import pytest
from support import shared

from corpus.errors import ModelFileError
from corpus.stages.columns import values_of
from corpus.stages.extract import decode_html, default_lid_model, resiliparse_text
from corpus.stages.read import ReadOptions, read_records
from corpus.text.fasttext_model import FastTextModel


def library_top(model, text: str) -> tuple[str | None, float | None]:
    """fastText's own answer for one line, as the C++ binding gives it."""
    found = model.f.predict(text.replace("\n", " ") + "\n", 1, 0.0, "replace")
    if not found:
        return None, None
    score, label = found[0]
    return label.removeprefix("__label__"), min(float(score), 1.0)


def ours(model: FastTextModel, text: str, max_chars: int = 10**9):
    return model.predict(text.encode("utf-8"), max_chars)


@pytest.fixture(scope="module")
def lid():
    path = default_lid_model()
    with open(path, "rb") as fh:
        return FastTextModel.from_bytes(fh.read(), path), fasttext.load_model(path)


def page_texts(warcs, limit: int) -> list[str]:
    texts = []
    for path in warcs:
        with open(path, "rb") as fh:
            for batch in read_records(fh, str(path), ReadOptions()):
                for payload, charset in zip(
                    batch.table.column("payload").to_pylist(),
                    batch.table.column("http_charset").to_pylist(),
                    strict=True,
                ):
                    text = resiliparse_text(decode_html(payload, charset)[0])
                    if text:
                        texts.append(text)
                if len(texts) >= limit:
                    return texts
    return texts


def test_lid176_on_real_pages_is_fasttexts_answer_bit_for_bit(lid, shared_warcs):
    model, library = lid
    texts = page_texts(shared_warcs, 400)
    assert len(texts) >= 300
    languages = set()
    for text in texts:
        prefix = text[:2_000]
        expected = library_top(library, prefix)
        assert ours(model, text, 2_000) == expected, prefix[:80]
        languages.add(expected[0])
    assert len(languages) >= 5  # the pages are not all one language
    column = pa.array(texts, pa.large_string())
    data, offsets = values_of(column)
    langs, scores = model.predict_many(np.frombuffer(data, np.uint8), offsets, 2_000)
    assert list(zip(langs, scores, strict=True)) == [ours(model, text, 2_000) for text in texts]


@pytest.mark.parametrize(
    "text",
    [
        "",
        " \t\r\n\v\f",
        "__label__de Guten Morgen, wie geht es dir heute?",
        "Ceci est une phrase en français.\nEt une autre ligne.",
        "日本語のテキストは空白で区切られていません。",
        "a\0b c\x0bd",
        "Ünïcödé wörds ẞ and emoji 🙂 mixed in",
    ],
)
def test_lid176_edge_texts(lid, text):
    model, library = lid
    assert ours(model, text) == library_top(library, text)


def test_prefix_counts_characters_not_bytes(lid):
    model, library = lid
    text = "Привет, как дела? " * 50 + "Hello there, how are you doing today? " * 400
    assert ours(model, text, 300) == library_top(library, text[:300])
    assert ours(model, text, 300)[0] == "ru"
    assert ours(model, text) == library_top(library, text)
    assert ours(model, text)[0] == "en"


def training_file(tmp_path) -> tuple[str, list[str]]:
    """Lines of Shakespeare labelled by their speaker (the five who speak most), and held-out lines."""
    speaker, labelled = None, []
    for line in shared("text-tinyshakespeare/input.txt").read_text().splitlines():
        if line.endswith(":") and line[:-1].isupper():
            speaker = line[:-1].replace(" ", "_")
        elif line.strip() and speaker:
            labelled.append((speaker, line.strip()))
    top = sorted({s for s, _ in labelled}, key=lambda s: -sum(1 for x, _ in labelled if x == s))[:5]
    rows = [(s, t) for s, t in labelled if s in top]
    path = tmp_path / "train.txt"
    path.write_text("".join(f"__label__{s} {t}\n" for s, t in rows[:3000]))
    return str(path), [t for _, t in rows[3000:3300]]


SUBWORDS, WORD_PAIRS = {"minn": 2, "maxn": 4}, {"wordNgrams": 2}


_TRAIN = """
import sys, json, fasttext
train, loss, features, quantize, path = sys.argv[1:]
features, quantize = json.loads(features), quantize == "1"
for seed in range(1, 6):
    try:
        model = fasttext.train_supervised(train, loss=loss, dim=8, epoch=20, thread=1, seed=seed, verbose=0, **features)
        if quantize:
            model.quantize(input=train, qnorm=True, cutoff=2000, retrain=False, dsub=2, thread=1, verbose=0)
        model.save_model(path)
        sys.exit(0)
    except RuntimeError as exc:
        if "NaN" not in str(exc):
            raise
sys.exit("fastText reported NaN with five seeds")
"""


def trained(train: str, loss: str, features: dict, quantize: bool, path: Path) -> None:
    """A fastText model trained on `train` and saved at `path`, in a fresh interpreter: in this test session's
    process (after other tests' libraries) fastText 0.9.3 stops with "Encountered NaN" on this small set, and now
    and then even in a fresh one, when another seed trains (and always with neither sub-words nor word pairs, which
    no test trains); each model is compared with itself, whatever its weights."""
    args = [train, loss, json.dumps(features), "1" if quantize else "0", str(path)]
    done = subprocess.run([sys.executable, "-c", _TRAIN, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("loss", "features", "quantize"),
    [
        ("hs", SUBWORDS, False),
        ("softmax", WORD_PAIRS, False),
        ("ova", SUBWORDS, False),
        ("softmax", SUBWORDS, True),
        ("hs", WORD_PAIRS, True),
    ],
)
def test_trained_models_agree_with_fasttext(tmp_path, loss, features, quantize):
    train, held_out = training_file(tmp_path)
    path = tmp_path / ("model.ftz" if quantize else "model.bin")
    trained(train, loss, features, quantize, path)
    library = fasttext.load_model(str(path))
    model = FastTextModel.from_bytes(path.read_bytes(), str(path))
    answers = [library_top(library, line) for line in held_out]
    assert len({label for label, _ in answers}) >= 2  # a model that says one thing would prove little
    assert [ours(model, line) for line in held_out] == answers


def test_a_file_that_is_no_model_is_named(tmp_path):
    with pytest.raises(ModelFileError, match="notes.txt: not a fastText model file"):
        FastTextModel.from_bytes(b"just some notes\n" * 10, "notes.txt")
    path = default_lid_model()
    with open(path, "rb") as fh:
        data = fh.read()
    with pytest.raises(ModelFileError, match="truncated"):
        FastTextModel.from_bytes(data[: len(data) // 2], "lid.ftz")
