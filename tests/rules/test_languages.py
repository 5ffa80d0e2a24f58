"""Every language: scripts, FineWeb-2 language keys, word segmenters, per-language thresholds and stop words."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from support import shared, unavailable, write_job

from corpus.text.batch import DocumentBatch
from corpus.text.characters import code_points
from corpus.text.languages import LID176_CODES, language_key
from corpus.text.scripts import dominant_scripts
from corpus.text.segmenters import SEGMENTERS

CONFIGS = "lists-fineweb2/fineweb2-configs.tar.xz"


def needs(script: str) -> None:
    segmenter = SEGMENTERS[script]
    if not segmenter.available():
        unavailable(f"{segmenter.requirement} is not installed (pip install -e '.[languages]')")


def words_of(text: str, lang: str | None = None) -> list[str]:
    docs = DocumentBatch([text], langs=[lang])
    return [text[start:end] for start, end in docs.words.of_text(0)]


def test_dominant_script_of_each_text():
    texts = ["Hello, world", "Привет, мир", "東京都は日本です", "漢字と", "漢字", "서울 漢字", "สวัสดี", "123 !! ⁂", ""]
    assert dominant_scripts(*code_points(texts)) == [
        "Latn", "Cyrl", "Jpan", "Jpan", "Hani", "Hang", "Thai", "Zyyy", "Zyyy",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("label", "script", "key"),
    [
        ("zh", "Hani", "cmn_Hani"),
        ("sr", "Latn", "srp_Latn"),
        ("sr", "Cyrl", "srp_Cyrl"),
        ("ja", "Hani", "jpn_Jpan"),  # kanji-only Japanese is still Japanese
        ("als", "Latn", "gsw_Latn"),  # lid.176's Alemannic, not ISO 639-3's Tosk Albanian
        ("sq", "Latn", "als_Latn"),
        ("srp_Latn", "Cyrl", "srp_Latn"),  # a GlotLID label says its script itself
        (None, "Latn", None),
    ],
)
def test_language_key_of_a_label_and_script(label, script, key):
    assert language_key(label, script) == key


def test_every_lid176_label_has_a_fineweb2_config_but_english_and_serbo_croatian():
    import tarfile

    with tarfile.open(shared(CONFIGS)) as archive:
        configured = {name.split("/")[-1].split("_")[0] for name in archive.getnames() if name.endswith(".yml")}
    assert len(LID176_CODES) == 176
    assert sorted(label for label, code in LID176_CODES.items() if code not in configured) == ["en", "sh"]


def test_chinese_japanese_thai_words_come_from_their_segmenters():
    for script in ("Hani", "Jpan", "Thai"):
        needs(script)
    assert words_of("我们的数据来自网络。", "zh") == ["我们", "的", "数据", "来自", "网络", "。"]
    assert words_of("東京都は日本の首都です。", "ja") == ["東京", "都", "は", "日本", "の", "首都", "です", "。"]
    assert words_of("ภาษาไทยเป็นภาษาที่สวยงาม", "th") == ["ภาษาไทย", "เป็น", "ภาษา", "ที่", "สวยงาม"]
    assert words_of("我们的数据") == ["我们", "的", "数据"]  # unlabelled: split by its script


def test_marks_stay_in_their_words_and_english_splits_as_before():
    assert words_of("भारत की राजधानी नई दिल्ली है।", "hi") == ["भारत", "की", "राजधानी", "नई", "दिल्ली", "है", "।"]
    assert words_of("Don't stop, it's 12:44.", "en") == ["Do", "n't", "stop", ",", "it", "'s", "12:44", "."]


def test_zero_width_joiners_stay_inside_their_words():
    # Persian writes some words with a zero-width non-joiner; Malayalam's chillu forms use a zero-width joiner
    assert words_of("این کتاب می\u200cتواند کمک کند", "fa") == ["این", "کتاب", "می\u200cتواند", "کمک", "کند"]
    assert words_of("എന്\u200dറെ ഭാഷ", "ml") == ["എന്\u200dറെ", "ഭാഷ"]


def udhr_text(name: str) -> str:
    import zipfile

    with zipfile.ZipFile(shared("text-nltk/udhr2.zip")) as archive:
        return archive.read(f"udhr2/{name}.txt").decode()


def test_burmese_words_joined_across_a_space_lose_nothing():
    needs("Mymr")
    import pyidaungsu

    text = "\n".join(udhr_text("mya").splitlines()[:6])
    tokens = ["".join(token.split()) for token in pyidaungsu.tokenize(text, form="word")]
    tokens = [token for token in tokens if token]
    spans = DocumentBatch([text], langs=["my"]).words.of_text(0)
    assert any(" " in text[start:end] for start, end in spans)  # the segmenter joined words across a space
    assert ["".join(text[start:end].split()) for start, end in spans] == tokens  # every token, in order


def test_a_token_the_segmenter_rewrote_still_counts_once():
    from corpus.text.segmenters import located

    assert located("ab  cd ef", ["ab", "c d", "XY", " "]).tolist() == [[0, 2], [4, 6], [7, 9]]
    many = 100 * ["ab", "c d", "ef", " "]  # aligned by arrays
    assert located(" ".join(100 * ["ab  cd ef"]), many).tolist() == [[10 * k + s, 10 * k + e] for k in range(100)
                                                                    for s, e in ((0, 2), (4, 6), (7, 9))]  # fmt: skip
    assert located("ab cd " * 100, ["abc", "d"] * 100).tolist()[:2] == [[0, 4], [4, 5]]  # joined across the space


def test_every_non_blank_character_is_in_one_word_or_between_words():
    """In every UDHR text (388, every script; its language key from its file name and letters), with a zero-width
    joiner, an emoji and a non-joiner added: words are in order, start and end on a non-blank character, and never
    overlap, except Kiwi's Korean morphemes (a syllable can hold two of them: 태어날 is 태어나 + ㄹ, given as 태어날 and
    날, and FineWeb-2 counts both). What lies between two words is white space or characters no word takes
    (punctuation a segmenter leaves out): under 1 % of the text."""
    import zipfile

    with zipfile.ZipFile(shared("text-nltk/udhr2.zip")) as archive:
        files = sorted(name for name in archive.namelist() if name.endswith(".txt"))
        texts = [archive.read(name).decode("utf-8")[:3000] + " \u200d😀\u200c" for name in files]
    labels = [name.rsplit("/", 1)[-1].removesuffix(".txt").split("_")[0] for name in files]
    assert len(texts) == 388
    docs = DocumentBatch(texts, langs=labels)
    for index, (text, key) in enumerate(zip(texts, docs.language_keys, strict=True)):
        spans = docs.words.of_text(index)
        assert spans, key
        previous_start = previous_end = 0
        for start, end in spans:
            assert previous_start <= start < end, key
            assert key == "kor_Hang" or previous_end <= start, key
            assert not text[start].isspace() and not text[end - 1].isspace(), key
            previous_start, previous_end = start, end
        covered = np.zeros(len(text), bool)
        for start, end in spans:
            covered[start:end] = True
        left_out = "".join(c for c, taken in zip(text, covered, strict=True) if not taken and not c.isspace())
        assert len(left_out) <= 0.01 * len(text), (key, left_out[:100])


def test_chinese_shingles_are_words_and_near_duplicates_are_found():
    needs("Hani")
    from corpus.stages.dedup import jaccard, shingle_hashes

    base = "今天天气很好，我们去公园散步吧。我们的数据来自网络，经过清洗以后用于训练语言模型。"
    edited = base.replace("公园", "学校")
    other = "东京是日本的首都，也是世界上人口最多的城市之一，有很多博物馆。"
    docs = DocumentBatch([base, edited, other], langs=["zh"] * 3)
    offsets, _ = shingle_hashes(docs, 5)
    words = sum(1 for start, end in docs.words.of_text(0) if base[start:end] not in "，。")
    assert np.diff(offsets)[0] == words - 4  # one shingle per 5 words, not one per run of characters
    similarity = jaccard(
        DocumentBatch([base, base], langs=["zh"] * 2), DocumentBatch([edited, other], langs=["zh"] * 2), 5
    )
    assert similarity[0] > 0.5 and similarity[1] == 0.0


def test_thai_near_duplicates_are_found():
    needs("Thai")
    from corpus.stages.dedup import jaccard

    base = "ภาษาไทยเป็นภาษาที่สวยงาม วันนี้อากาศดีมาก พวกเราไปเดินเล่นที่สวนสาธารณะกับครอบครัวและเพื่อน"
    edited = base.replace("สวนสาธารณะ", "ชายหาด")
    other = "กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย มีประชากรมากและมีวัดที่สวยงามหลายแห่ง"
    similarity = jaccard(
        DocumentBatch([base, base], langs=["th"] * 2), DocumentBatch([edited, other], langs=["th"] * 2), 5
    )
    assert similarity[0] > 0.4 and similarity[1] < 0.1


def test_a_missing_segmenter_is_said_once_for_texts_without_a_language(monkeypatch, capsys):
    from corpus.text import tokenizers

    monkeypatch.setattr(type(SEGMENTERS["Hani"]), "available", lambda self: self.script != "Hani")
    monkeypatch.setattr(tokenizers, "_WARNED", set())
    assert words_of("我们的数据 来自网络") == ["我们的数据", "来自网络"]
    words_of("再来一次")
    assert words_of("再来一次", "zh") == ["再来一次"]  # with a language: said at selection (below)
    said = capsys.readouterr().err
    assert said.count("documents FineWeb-2 splits with jieba (Chinese) are split at spaces and punctuation") == 1
    assert "(1 in the first batch that had any; said once)" in said
    assert "pip install 'corpus[languages]'" in said


@pytest.mark.parametrize(("languages", "said"), [(["en"], False), (["*"], True)])
def test_a_language_split_otherwise_is_said_where_the_language_rule_keeps_it(monkeypatch, capsys, languages, said):
    """The README's first job keeps English: its Chinese pages are dropped whatever their words, so a missing
    segmenter goes unsaid; a job keeping every language says it, and so do Stanza's languages."""
    from corpus.api import apply_rules

    monkeypatch.setattr(type(SEGMENTERS["Hani"]), "available", lambda self: self.script != "Hani")
    texts = ["我们的数据来自网络。", "Усе людзі нараджаюцца свабоднымі.", "The cat sat on the mat."]
    apply_rules(
        pa.table({"text": texts, "lang": ["zh", "be", "en"], "lang_score": [1.0] * 3}),
        rules=["language", "gopher_quality"],
        settings={"language": {"languages": languages}},
    )
    err = capsys.readouterr().err
    assert ("corpus: 1 documents (cmn_Hani 1) were split by splitter: jieba (Chinese) is not installed; pip install "
            "'corpus[languages]' to split them as FineWeb-2 did" in err) is said  # fmt: skip
    assert ("corpus: 1 documents (bel_Cyrl 1) were split by spacy:xx: FineWeb-2 split them with Stanza's neural "
            "tokenizer (stanza:be)" in err) is said  # fmt: skip


def test_per_language_stop_words_are_the_languages_own():
    needs("Hani")
    from corpus.rules.gopher_quality import GopherQuality

    text = "我们的数据是来自网络的。"  # 的 and 是 are on FineWeb-2's Mandarin list, none on Gopher's
    docs = DocumentBatch([text, "the cat and the dog"], langs=["zh", "en"])
    per_language = GopherQuality(GopherQuality.Options(stop_words_of=str(shared(CONFIGS)))).compute(docs)
    gopher = GopherQuality().compute(docs)
    assert per_language["stop_words"].tolist() == [2, 2] and gopher["stop_words"].tolist() == [0, 2]


def test_thresholds_by_language_take_each_languages_value():
    from corpus.stages.select import Threshold, select_documents

    signals = pa.table(
        {
            "id": ["en", "zh", "de", "en-high"],
            "language.key": ["eng_Latn", "cmn_Hani", "deu_Latn", "eng_Latn"],
            "r.x": pa.array([0.2, 0.2, 0.9, 0.5], pa.float32()),
        }
    )
    threshold = Threshold("r", "x", "max", 0.3, by_language=(("cmn_Hani", 0.1), ("deu_Latn", None)))
    selected, failing = select_documents(signals, [threshold])
    assert selected.table.column("kept").to_pylist() == [True, False, True, False]
    assert failing == {"r.x.max": 2}
    only_for_languages = Threshold("r", "x", "max", None, by_language=(("cmn_Hani", 0.1),))
    assert select_documents(signals, [only_for_languages])[0].table.column("kept").to_pylist() == [
        True, False, True, True,
    ]  # fmt: skip


def job_text(select: str) -> str:
    return (
        '[annotate]\nrules = ["language", "gopher_repetition", "gopher_quality", "fineweb"]\n'
        f'[rules.language]\nlanguages = ["*"]\n[select]\n{select}\n'
    )


def test_a_per_language_job_takes_fineweb2s_thresholds(tmp_path):
    from corpus.config.job import load_job

    configs = shared(CONFIGS)
    job = load_job(write_job(tmp_path, [], tmp_path / "out", job_text(f'per_language = "{configs}"')))
    by_reason = {t.reason: t for t in job.thresholds}
    mandarin = dict(by_reason["language.score.min"].by_language)
    assert mandarin["cmn_Hani"] == pytest.approx(0.692) and by_reason["language.score.min"].value == 0.65
    assert dict(by_reason["gopher_repetition.dup_para_frac.max"].by_language)["cmn_Hani"] is None  # off, as FineWeb-2
    assert dict(by_reason["fineweb.char_dup_ratio.max"].by_language)["deu_Latn"] == 0.1
    assert dict(by_reason["gopher_quality.alpha_words_frac.min"].by_language)["cmn_Hani"] == pytest.approx(0.735)
    assert dict(job.rule_settings)["gopher_quality"]["stop_words_of"] == str(configs.resolve())


@pytest.mark.parametrize(
    ("select", "annotate", "said"),
    [
        ('per_language = "fineweb2"', None, "set CORPUS_FINEWEB2_CONFIGS to it"),
        ('per_language = "nowhere"', None, "nowhere does not exist"),
        ("per_language = 3", None, 'expected "fineweb2" or a path, got 3'),
        ("per_language = CONFIGS", '["gopher_quality"]', "thresholds per language need the language rule"),
    ],
)
def test_per_language_mistakes_are_refused_with_the_fix(tmp_path, monkeypatch, select, annotate, said):
    from corpus.config.job import load_job
    from corpus.errors import JobError

    monkeypatch.delenv("CORPUS_FINEWEB2_CONFIGS", raising=False)
    text = job_text(select.replace("CONFIGS", f'"{shared(CONFIGS)}"'))
    if annotate:
        text = text.replace('["language", "gopher_repetition", "gopher_quality", "fineweb"]', annotate)
    with pytest.raises(JobError, match="key 'select.per_language'") as refused:
        load_job(write_job(tmp_path, [], tmp_path / "out", text))
    assert said in str(refused.value)


def test_fineweb2_names_the_configs_in_the_environment_and_needs_the_segmenters(tmp_path, monkeypatch):
    from corpus.config import per_language
    from corpus.config.job import load_job
    from corpus.errors import JobError

    monkeypatch.setenv("CORPUS_FINEWEB2_CONFIGS", str(shared(CONFIGS)))
    path = write_job(tmp_path, [], tmp_path / "out", job_text('per_language = "fineweb2"'))
    monkeypatch.setattr(per_language, "missing_segmenters", lambda: [SEGMENTERS["Thai"]])
    with pytest.raises(JobError, match=r"not installed: pythainlp \(Thai\); pip install 'corpus\[languages\]'"):
        load_job(path)
    monkeypatch.setattr(per_language, "missing_segmenters", lambda: [])
    assert any(t.by_language for t in load_job(path).thresholds)


def test_a_glotlid_format_model_labels_documents_with_their_keys(tmp_path):
    """A fastText model whose labels are FineWeb-2 keys (GlotLID's format) is read by the same loader, and its
    labels are the documents' keys whatever their script."""
    pytest.importorskip("fasttext")
    from corpus.stages.extract import LanguageIdentifier

    lines = []
    for i in range(60):
        lines.append(f"__label__srp_Latn ovo je recenica broj {i} na srpskom jeziku latinicom")
        lines.append(f"__label__srp_Cyrl ово је реченица број {i} на српском језику ћирилицом")
        lines.append(f"__label__cmn_Hani 这是第{i}个中文句子我们的数据来自网络")
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # Trained in a fresh interpreter: after some of the suite's libraries have run in this process, fastText's
    # training of this tiny corpus stops with "Encountered NaN" every time (alone it never does).
    train = (
        "import sys, fasttext\n"
        "model = fasttext.train_supervised(sys.argv[1], dim=8, epoch=20, lr=0.05, minn=1, maxn=3, thread=1, seed=1,"
        " verbose=0)\n"
        "model.save_model(sys.argv[2])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", train, str(tmp_path / "train.txt"), str(tmp_path / "glotlid.bin")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    identify = LanguageIdentifier(str(tmp_path / "glotlid.bin"))
    texts = ["ово је реченица на српском", "ovo je recenica na srpskom", "这是中文句子"]
    labels = [identify(text)[0] for text in texts]
    assert labels == ["srp_Cyrl", "srp_Latn", "cmn_Hani"]
    assert DocumentBatch(texts, langs=labels).language_keys == labels


@pytest.mark.slow
def test_a_run_reports_its_funnel_per_language(tmp_path):
    """A JSONL dataset of Mandarin, Thai, Belarusian and English texts under `per_language`: stats and the report
    count each language, and say that English (no FineWeb-2 config) fell back to the job's thresholds and that
    Belarusian is not split as FineWeb-2 split it (with Stanza)."""
    import json
    import zipfile

    from corpus.config.job import load_job
    from corpus.engine import run_job
    from corpus.report.run_report import load_run, report_data

    needs("Hani")
    needs("Thai")
    udhr = zipfile.ZipFile(shared("text-nltk/udhr2.zip"))
    rows = []
    for name in ("cmn_hans", "tha", "eng", "bel"):
        lines = [line for line in udhr.read(f"udhr2/{name}.txt").decode("utf-8").splitlines() if line.strip()]
        rows += [{"text": "\n".join(lines[start : start + 8])} for start in range(0, 48, 8)]
    (tmp_path / "texts.jsonl").write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    text = job_text(f'per_language = "{shared(CONFIGS)}"')
    job = load_job(write_job(tmp_path, [str(tmp_path / "texts.jsonl")], tmp_path / "out", text))
    stats = run_job(job, use_ray=False)
    languages = stats["languages"]
    assert {key: row["documents"] for key, row in languages.items()} == {
        "cmn_Hani": 6, "eng_Latn": 6, "tha_Thai": 6, "bel_Cyrl": 6,
    }  # fmt: skip
    assert [languages[key]["thresholds"] for key in ("cmn_Hani", "tha_Thai", "eng_Latn")] == [
        "per_language", "per_language", "job",
    ]  # fmt: skip
    assert any(w.startswith("6 documents are in languages without per-language settings") for w in stats["warnings"])
    assert any(w.startswith("6 documents (bel_Cyrl 6) were split by spacy:xx: FineWeb-2 split them with Stanza's")
               for w in stats["warnings"])  # fmt: skip
    reported = {row["language"]: row for row in report_data(load_run(tmp_path / "out"))["languages"]}
    for key, row in languages.items():
        assert (reported[key]["documents"], reported[key]["kept"]) == (row["documents"], row["kept_by_rules"])
        assert sum(reported[key]["dropped_by"].values()) == row["documents"] - row["kept_by_rules"]


def test_apply_rules_says_which_languages_had_no_settings(capsys):
    from corpus.api import apply_rules

    texts = ["The cat sat on the mat and looked at the dog.", "Die Katze sitzt auf der Matte und sieht den Hund."]
    decided = apply_rules(
        pa.table({"text": texts, "lang": ["en", "de"], "lang_score": [1.0, 1.0]}),
        rules=["language", "gopher_quality"],
        settings={"language": {"languages": ["*"]}},
        thresholds={"per_language": str(shared(CONFIGS))},
    )
    assert decided.column("language.key").to_pylist() == ["eng_Latn", "deu_Latn"]
    said = capsys.readouterr().err
    assert "corpus: 1 documents are in languages without per-language settings and were selected with the job's " \
        "thresholds (eng_Latn 1)" in said  # fmt: skip
