"""Every page the FineWeb recipe decides otherwise in `corpus` and in datatrove, explained one by one.

Each side's decision per page (kept, or the rule that dropped it first) comes from its own run: ours from the run
folder, datatrove's from an untimed run whose filters write what they drop. For each page they decide otherwise,
datatrove's filters are run again on *our* extracted text: if they then decide as we do, the texts differ (the
extraction, or the language pre-pass before it); if they still decide as datatrove did, the rule itself differs on
the same text, and the words the two word splitters cut differently are shown (spaCy's English tokenizer in
datatrove, `corpus.text.words` in ours), or for C4 the sentences each counts (spaCy's sentencizer against our
punctuation rule).
"""

from __future__ import annotations

import difflib
import gzip
import json
from pathlib import Path

DATATROVE_FILTERS = ("url", "language", "gopher_repetition", "gopher_quality", "c4", "fineweb")
NO_TEXT = "no text"  # the extractor found none: neither side has a document


def _jsonl_ids(folder: Path) -> list[str]:
    return [
        json.loads(line)["id"].strip("<>")
        for path in sorted(folder.glob("*.jsonl.gz"))
        for line in gzip.open(path, "rt", encoding="utf-8")
    ]


def datatrove_decisions(output: Path) -> dict[str, str]:
    """Per page id: 'kept', or the datatrove filter that dropped it (an `explain` run's exclusion files)."""
    decided = {}
    for name in DATATROVE_FILTERS:
        decided |= dict.fromkeys(_jsonl_ids(output / "excluded" / name), name)
    return decided | dict.fromkeys(_jsonl_ids(output / "filtered"), "kept")


def our_decisions(run: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(per page id: 'kept', or the rule of our first failure, the URL rule and the language pre-pass before
    extraction included; per document id: its extracted text)."""
    import pyarrow.parquet as pq

    decided = {}
    for folder, reason in (("prefiltered", "first_failure"), ("language_prepass", None)):
        if (run / folder).is_dir():
            table = pq.read_table(run / folder)
            reasons = table.column(reason).to_pylist() if reason else ["language"] * table.num_rows
            decided |= {i: r.split(".")[0] for i, r in zip(table.column("id").to_pylist(), reasons, strict=True)}
    selection = pq.read_table(run / "selection", columns=["id", "kept", "first_failure"]).to_pylist()
    decided |= {row["id"]: "kept" if row["kept"] else row["first_failure"].split(".")[0] for row in selection}
    documents = pq.read_table(run / "documents", columns=["id", "text"])
    return decided, dict(zip(documents.column("id").to_pylist(), documents.column("text").to_pylist(), strict=True))


def _datatrove_on(text: str) -> str:
    """What datatrove's filters after the language filter decide on this text: 'kept' or the first that drops it."""
    from datatrove.data import Document
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    document = Document(text=text, id="page")
    filters = {
        "gopher_repetition": GopherRepetitionFilter(),
        "gopher_quality": GopherQualityFilter(),
        "c4": C4QualityFilter(filter_no_terminal_punct=False),  # modifies the text, as in the pipeline
        "fineweb": FineWebQualityFilter(),
    }
    for name, step in filters.items():
        passed = step.filter(document)
        if passed is not True and (not isinstance(passed, tuple) or not passed[0]):
            return name
    return "kept"


def _split_differently(text: str, most: int = 4) -> str:
    """The first places where spaCy's English tokenizer (datatrove's) and ours cut the text into other words."""
    from datatrove.utils.word_tokenizers import load_word_tokenizer

    from corpus.text.batch import DocumentBatch

    theirs = load_word_tokenizer("en").word_tokenize(text)
    docs = DocumentBatch([text])
    words = docs.vocabulary.words
    ours = [words[i].as_py() for i in docs.word_ids[docs.word_offsets[0] : docs.word_offsets[1]]]
    matcher = difflib.SequenceMatcher(a=ours, b=theirs, autojunk=False)
    cuts = [(ours[a:b], theirs[c:d]) for tag, a, b, c, d in matcher.get_opcodes() if tag != "equal"]
    shown = "; ".join(f"{' '.join(mine)!r} vs {' '.join(their)!r}" for mine, their in cuts[:most])
    return f"{len(ours):,} words vs spaCy's {len(theirs):,}, cut otherwise at {len(cuts)} place(s): {shown}"


def _sentences_counted_otherwise(text: str) -> str:
    """C4's sentence count over the lines it keeps: ours (a punctuation rule) against spaCy's sentencizer's."""
    from datatrove.utils.text import split_into_sentences

    from corpus.rulebook import discover
    from corpus.text.batch import DocumentBatch

    c4 = discover()["c4"](discover()["c4"].Options(drop_unpunctuated_lines=False))
    values, kept = c4.modify(DocumentBatch([text]))
    theirs = sum(len(split_into_sentences(line, "en")) for line in kept[0].splitlines())
    return f"C4's sentences in the lines it keeps: ours {values['sentences'][0]}, spaCy's {theirs} (at least 5 kept)"


def _why(mine: str, theirs: str, text: str | None) -> str:
    """Why one page is decided otherwise, from datatrove's filters run again on our text."""
    if text is None:
        return "decided before extraction on our side (URL rule or language pre-pass on the page's rough text)"
    if "language" in (mine, theirs):
        return "language ID: our lid.176 call and datatrove's read the text differently"
    again = _datatrove_on(text)
    if again == mine:
        return f"the extracted texts differ: on our text datatrove's filters decide '{again}' as we do"
    order = [*DATATROVE_FILTERS, "kept"]
    earlier = min(mine, again, key=order.index)  # the first rule one side passes and the other fails
    differ = _sentences_counted_otherwise(text) if earlier == "c4" else _split_differently(text)
    return f"the same text, the rules differ (datatrove: '{again}'): {differ}"


def explain_differences(our_run: Path, datatrove_output: Path, urls: dict[str, str]) -> list[str]:
    """Lines saying how many pages both sides decide alike, then every page they decide otherwise: each side's
    decision (kept, or the rule that dropped it first; 'no text': the extractor found none), its URL, and why."""
    ours, texts = our_decisions(our_run)
    theirs = datatrove_decisions(datatrove_output)
    pages = sorted(set(ours) | set(theirs))
    differ = [page for page in pages if ours.get(page, NO_TEXT) != theirs.get(page, NO_TEXT)]
    kept = (sum(v == "kept" for v in ours.values()), sum(v == "kept" for v in theirs.values()))
    lines = [
        f"per page, one copy: {len(pages) - len(differ):,} of {len(pages):,} decided alike; kept: ours {kept[0]:,}, "
        f"datatrove {kept[1]:,}"
    ]
    groups: dict[tuple[str, str], list[str]] = {}
    for page in differ:
        groups.setdefault((ours.get(page, NO_TEXT), theirs.get(page, NO_TEXT)), []).append(page)
    for (mine, their), members in sorted(groups.items(), key=lambda item: -len(item[1])):
        lines.append(f"  ours {mine}, datatrove {their}: {len(members)} page(s)")
        for page in members:
            lines.append(f"    {urls.get(page, page)}: {_why(mine, their, texts.get(page))}")
    return lines
