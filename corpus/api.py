"""`corpus` from Python: the pipeline's steps as functions over texts and tables, for notebooks and scripts.

Each function runs the code and the settings a job runs (the same extractor, rules, thresholds, MinHash kernels
and keep policy), so what a notebook finds is what a run decides. The documents given are the corpus wherever a
step needs one (corpus rules, quantile thresholds, dedup).

    from corpus.api import extract_text, apply_rules, near_duplicates, read_documents
    text = extract_text(html_bytes, url="https://example.org/")
    documents = read_documents(["crawl.warc.gz"])  # or Parquet, JSONL, HTML, text, zip
    table = apply_rules(["some text", "more text"], rules=["gopher_quality"])
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ValidationError

from corpus.config.job import check_language_codes, resolve_rule_settings, resolve_thresholds
from corpus.config.per_language import languages_without_settings, split_per_language, with_per_language
from corpus.errors import JobError
from corpus.file_documents import read_documents
from corpus.rulebook import CorpusRule, Rule, discover
from corpus.stages.annotate import annotate_documents, signal_fields
from corpus.stages.dedup import MinHashOptions, band_hashes, jaccard, minhash_signatures, permutations
from corpus.stages.dedup_graph import components_in_memory, partition_forest, shuffle_rows
from corpus.stages.extract import EXTRACTORS, LanguageIdentifier, page_text
from corpus.stages.read import domain_of
from corpus.stages.schema import DOCUMENTS
from corpus.stages.select import select_documents, split_otherwise_counts
from corpus.text.batch import DocumentBatch
from corpus.text.tokenizers import split_otherwise_warnings

__all__ = [
    "apply_rules",
    "exact_duplicate_lines",
    "extract_text",
    "identify_language",
    "mask_pii",
    "model_scores",
    "near_duplicates",
    "quality_scores",
    "read_documents",
]

Documents = Sequence[str] | pa.Table | Any  # texts, an Arrow table or a pandas DataFrame with a `text` column


def extract_text(
    html: bytes | str, url: str | None = None, extractor: str = "trafilatura", charset: str | None = None
) -> str | None:
    """The main text of one HTML page, as the extract stage makes it (bytes are decoded as a crawl's pages are:
    UTF-8, then `charset` from the HTTP header when known, <meta>, detection); None where the pipeline would drop
    the page as `empty_text`. `extractor`: one of "trafilatura" (the default mode), "trafilatura_fast",
    "trafilatura_fineweb", "resiliparse". The trafilatura modes give trafilatura's parser corpus's element class,
    for this process: trafilatura's own calls then give the same texts faster (`stages/extract.py`)."""
    if extractor not in EXTRACTORS:
        raise ValueError(f"unknown extractor {extractor!r}: use one of {', '.join(EXTRACTORS)}")
    return page_text(html, url, extractor, charset) or None


def _texts(texts: Sequence[str]) -> list[str]:
    """The texts as a list, refused with what to give where they are not a sequence of strings."""
    if isinstance(texts, str | bytes):
        raise TypeError("give a list of texts, not one string")
    texts = list(texts)
    wrong = next((i for i, text in enumerate(texts) if not isinstance(text, str)), None)
    if wrong is not None:
        raise TypeError(f"text {wrong} is {texts[wrong]!r:.40}, not a string: give every text as a str")
    return texts


def identify_language(
    texts: Sequence[str], model_path: str = "", max_chars: int = 2_000
) -> tuple[list[str | None], list[float | None]]:
    """(language code, probability) of each text by fastText lid.176 on its first `max_chars` characters, as the
    extract stage identifies documents. `model_path`: another fastText language-ID model."""
    identify = LanguageIdentifier(model_path, max_chars)
    found = [identify(text) for text in _texts(texts)]
    return [lang for lang, _ in found], [score for _, score in found]


def _is_data_frame(documents: Documents) -> bool:
    return hasattr(documents, "to_dict") and hasattr(documents, "columns")  # pandas, without importing it


def _as_table(documents: Documents) -> pa.Table:
    """The documents given (texts, an Arrow table, a pandas DataFrame) as an Arrow table of their own columns."""
    if isinstance(documents, pa.Table):
        return documents
    if _is_data_frame(documents):
        return pa.Table.from_pandas(documents, preserve_index=False)
    return pa.table({"text": pa.array(_texts(documents), pa.large_string())})


MAPPED_COLUMNS = ("text", "id", "url", "lang", "lang_score")


def _mapped(table: pa.Table, columns: dict[str, str]) -> pa.Table:
    """The table with its columns `columns` names (field -> the table's column) under the documents' names; the
    columns they replace, if any, keep theirs with an `input.` prefix."""
    unknown = [field for field in columns if field not in MAPPED_COLUMNS]
    if unknown:
        raise ValueError(f"columns: {unknown[0]!r} is not a document field; map any of {', '.join(MAPPED_COLUMNS)}")
    absent = [name for name in columns.values() if name not in table.column_names]
    if absent:
        raise ValueError(
            f"columns: the documents have no column {absent[0]!r}; they have {', '.join(table.column_names)}"
        )
    renamed = {given: field for field, given in columns.items() if given != field}
    names = [renamed.get(name, f"input.{name}" if name in renamed.values() else name) for name in table.column_names]
    return table.rename_columns(names)


def _documents_table(documents: Documents) -> pa.Table:
    """Documents as the pipeline stores them (`DOCUMENTS` first, in order), any other given columns after."""
    table = _as_table(documents)
    if "text" not in table.column_names:
        raise ValueError(f"the documents need a `text` column; they have: {', '.join(table.column_names)}")
    if table.column("text").null_count:
        raise ValueError("some documents' `text` is null: give every document a text")
    n = table.num_rows
    given = set(table.column_names)
    if "lang" not in given:
        langs, scores = identify_language(table.column("text").to_pylist())
        table = table.append_column("lang", pa.array(langs, pa.string()))
        table = table.append_column("lang_score", pa.array(scores, pa.float32()))
    urls = table.column("url").to_pylist() if "url" in given else [None] * n
    defaults = {
        "id": pa.array([str(i) for i in range(n)], pa.string()),
        "url": pa.array(urls, pa.string()),
        "domain": pa.array([domain_of(url) for url in urls], pa.string()),
        "source": pa.array(["<python>"] * n, pa.string()),
        "offset": pa.array(range(n), pa.int64()),
    }
    columns = []
    for field in DOCUMENTS:
        if field.name in table.column_names:
            columns.append(table.column(field.name).cast(field.type))
        else:
            columns.append(defaults.get(field.name, pa.nulls(n, field.type)))
    extra = [name for name in table.column_names if name not in DOCUMENTS.names]
    return pa.Table.from_arrays(
        [*columns, *(table.column(name) for name in extra)],
        schema=pa.schema([*DOCUMENTS, *(table.schema.field(name) for name in extra)]),
    )


def _arguments() -> Path:
    """What apply_rules' arguments stand for as a job file: relative files in `settings` are relative to the
    working folder."""
    return Path.cwd() / "apply_rules"


_ARGUMENT_OF_SECTION = {"annotate": "rules", "rules": "settings", "select": "thresholds"}


def _argument(key: str) -> str:
    """A job-file key as apply_rules' argument: `rules.url.blocklist` is `settings['url']['blocklist']`."""
    section, *path = key.split(".")
    name = _ARGUMENT_OF_SECTION.get(section)
    if name is None:
        return f"'{key}'"
    return name + ("" if section == "annotate" else "".join(f"[{part!r}]" for part in path))


def _in_arguments(error: JobError) -> ValueError:
    """A job-file error in apply_rules' terms: its arguments, not a job file's keys."""
    return ValueError(error.rendered(file="apply_rules", key_name=_argument))


def _rules(rules: list[str] | None, settings: dict[str, dict] | None) -> list[Rule]:
    try:
        resolved = resolve_rule_settings(rules, settings or {}, _arguments())
    except JobError as exc:
        raise _in_arguments(exc) from None
    registry = discover()
    return [registry[name](registry[name].Options.model_validate(options)) for name, options in resolved]


def apply_rules(
    documents: Documents,
    rules: list[str] | None = None,
    settings: dict[str, dict] | None = None,
    thresholds: dict[str, Any] | None = None,
    columns: dict[str, str] | None = None,
):
    """The documents with each rule's signal columns (`rule.signal`) and the selection's `kept`, `first_failure`
    and `failures` (every `rule.signal.bound` a document fails), as what was given: a pandas DataFrame for a
    DataFrame, else an Arrow table.

    `documents`: texts, or an Arrow table / pandas DataFrame with `text` and optionally `id`, `url`, `lang`,
    `lang_score` (language ID runs when `lang` is absent); `columns` maps those names onto the table's own, as a
    job's `[dataset]` table does, e.g. `{"text": "body", "id": "doc_id"}`. `rules`: names in order (default: a
    job's default order); `settings`: `{rule: {option: value}}` as a job's `[rules.NAME]` tables; `thresholds`: a
    job's `[select]` table as a dict, e.g. `{"gopher_quality": {"words": {"min": 100}}}` (default: each rule's
    published thresholds), and `"per_language": "fineweb2"` (or a configs folder) as in a job. Corpus rules and
    quantile thresholds take these documents as the corpus."""
    try:
        select, settings, languages_path = split_per_language(thresholds or {}, settings or {}, _arguments())
    except JobError as exc:
        raise _in_arguments(exc) from None
    computed = _rules(rules, settings)
    given = _mapped(_as_table(documents), columns or {})
    language = next((rule for rule in computed if rule.name == "language"), None)
    if language is not None and "lang" not in given.column_names:
        try:  # languages identified here, so codes lid.176 answers: 'english' would drop every document
            check_language_codes({"rules.language.languages": language.options.languages}, "", _arguments())
        except JobError as exc:
            raise _in_arguments(exc) from None
    table = _documents_table(given)
    names = [rule.name for rule in computed]
    try:
        selected, chosen = resolve_thresholds(select, names, _arguments())
        chosen = with_per_language(chosen, languages_path, selected, _arguments())
    except JobError as exc:
        raise _in_arguments(exc) from None
    per_document = [rule for rule in computed if not isinstance(rule, CorpusRule)]
    annotated = annotate_documents(table, per_document).table
    docs = DocumentBatch.from_table(table)  # corpus rules read the texts as given, as they read stored documents
    for rule in computed:
        if isinstance(rule, CorpusRule):
            values = rule.corpus_signals(docs, rule.summarize([rule.accumulate(docs)]))
            for field in signal_fields([rule]):
                signal = field.name.removeprefix(f"{rule.name}.")
                annotated = annotated.append_column(field, pa.array(values[signal], field.type))
    resolved = [t.resolved(annotated.column(t.column)) if t.quantile is not None else t for t in chosen]
    selection = select_documents(annotated, resolved)[0].table.select(["kept", "first_failure", "failures"])
    if languages_path is not None and "language.key" in annotated.column_names:
        keys = Counter(key for key in annotated.column("language.key").to_pylist() if key)
        for warning in languages_without_settings({key: [n, 0] for key, n in keys.items()}, resolved):
            print(f"corpus: {warning}", file=sys.stderr)
    for warning in split_otherwise_warnings(split_otherwise_counts(annotated, selection.column("failures"))):
        print(f"corpus: {warning}", file=sys.stderr)
    signals = annotated.select(annotated.column_names[len(DOCUMENTS) :])
    decided = pa.Table.from_arrays(
        [*table.columns, *signals.columns, *selection.columns],
        schema=pa.schema([*table.schema, *signals.schema, *selection.schema]),
    )
    return decided.to_pandas() if _is_data_frame(documents) else decided


def mask_pii(text: str, kinds: Sequence[str] = ("email", "phone", "ip")) -> tuple[str, dict[str, int]]:
    """(the text with the given kinds of PII replaced by `<EMAIL>`, `<PHONE>`, `<IP_ADDRESS>`; the count of each
    kind found, masked or not), as the `pii` rule masks them."""
    from corpus.rules.pii import KINDS, SIGNAL_OF
    from corpus.rules.pii import mask_pii as mask_batch

    if not isinstance(text, str):
        raise TypeError(f"mask_pii takes one text (a str), not a {type(text).__name__}: call it once per text")
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise ValueError(f"unknown PII kinds {unknown}: use any of {', '.join(KINDS)}")
    counts, masked = mask_batch(DocumentBatch([text]), tuple(kinds))
    return masked[0], {kind: int(counts[SIGNAL_OF[kind]][0]) for kind in KINDS}


def _options(function: str, options_class, **settings: Any):
    """`options_class(**settings)`, or a ValueError naming `function` and each setting at fault in its own terms
    (keyword arguments, not pydantic's)."""
    try:
        return options_class(**settings)
    except ValidationError as exc:
        problems = "; ".join(_setting_problem(error, options_class) for error in exc.errors())
        raise ValueError(f"{function}: {problems}") from None


def _setting_problem(error: dict, options_class) -> str:
    name = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"unknown setting {name!r} (settings: {', '.join(options_class.model_fields)})"
    if error["type"] == "value_error":  # the options' own check (of one setting, or of them together)
        return f"{name}: {error['ctx']['error']}" if name else str(error["ctx"]["error"])
    return f"{name}: {error['msg'].lower()} (got {error.get('input')!r})"


NEAR_DUPLICATES = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("kept", pa.bool_(), nullable=False),
        pa.field("duplicate_of", pa.string(), metadata={"doc": "id of the document kept instead"}),
        pa.field("cluster_id", pa.string(), nullable=False, metadata={"doc": "id of the document its cluster keeps"}),
        pa.field("cluster_size", pa.int32(), nullable=False),
        pa.field("jaccard", pa.float64(), metadata={"doc": "exact shingle Jaccard with cluster_id (verified only)"}),
    ]
)


PIECE_CHARACTERS = 1 << 22  # characters whose signatures are made at once: what bounds the working set


def _pieces(texts: list[str]) -> list[tuple[int, int]]:
    """(start, end) of consecutive texts of about PIECE_CHARACTERS characters together (one text at least)."""
    ends = np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)))
    pieces, start = [], 0
    while start < len(texts):
        end = max(start + 1, int(np.searchsorted(ends, (ends[start - 1] if start else 0) + PIECE_CHARACTERS)))
        pieces.append((start, min(end, len(texts))))
        start = end
    return pieces


def _shared_band_keys(texts: list[str], options: MinHashOptions) -> np.ndarray:
    """(texts, bands) LSH band keys, made piece by piece, with 0 where no other text has the same key in that band
    (a key nobody shares joins nothing, and leaving it out keeps the shuffle as small as the duplicates)."""
    a, b = permutations(options.permutations, options.seed)
    bands, rows = options.bands_rows()
    keys = np.zeros((len(texts), bands), np.uint64)
    for start, end in _pieces(texts):
        keys[start:end] = band_hashes(
            minhash_signatures(DocumentBatch(texts[start:end]), options.ngram, a, b), bands, rows
        )
    for band in range(bands):
        ordered = np.sort(keys[:, band])
        shared = ordered[1:][(ordered[1:] == ordered[:-1]) & (ordered[1:] != 0)]
        keys[~np.isin(keys[:, band], shared), band] = 0
    return keys


def _shingle_jaccard(texts: list[str], first: np.ndarray, second: np.ndarray, ngram: int) -> np.ndarray:
    """Exact shingle Jaccard of texts[first[i]] and texts[second[i]], piece by piece."""
    out = np.empty(len(first), np.float64)
    for start, end in _pieces([texts[i] for i in first]):
        own, other = ([texts[i] for i in rows[start:end]] for rows in (first, second))
        out[start:end] = jaccard(DocumentBatch(own), DocumentBatch(other), ngram)
    return out


def near_duplicates(
    texts: Sequence[str], ids: Sequence[str] | None = None, verify_threshold: float | None = None, **minhash: Any
) -> pa.Table:
    """MinHash near-duplicate clusters of the texts, by the dedup stage's kernels and keep policy: documents equal
    in any LSH band join a cluster, each cluster keeps its first document (in the order given), and the others
    are duplicates of it. With `verify_threshold`, a duplicate whose exact shingle Jaccard with the kept document is
    below it stays (`jaccard` says how near it was). `minhash`: `[dedup.minhash]` settings (ngram = 5,
    permutations = 112, bands = 14, rows = 8, threshold, seed = 1). One row per text, in order (`NEAR_DUPLICATES`).

    Memory, beyond the texts given and the table returned: 8 bytes per text and band (112 bytes a text by default),
    the shuffle rows of texts that share a band, and signatures made 4M characters at a time (~50 MiB); the word
    splitters a process loads once come on top (~0.7 GiB with Chinese, Japanese and Korean). A million texts fit
    where their texts do (`benchmarks/near_duplicates_memory.py`)."""
    options = _options("near_duplicates", MinHashOptions, **minhash, verify_threshold=verify_threshold)
    texts = _texts(texts)
    n = len(texts)
    ids = [str(i) for i in range(n)] if ids is None else [str(i) for i in ids]
    if len(ids) != n or len(set(ids)) != n:
        raise ValueError(f"give one distinct id per text ({n} texts, {len(set(ids))} distinct ids)")
    refs = np.arange(n, dtype=np.int64)
    lengths = np.fromiter(map(len, texts), np.int64, n)
    rows = shuffle_rows(ids, refs, _shared_band_keys(texts, options), np.zeros(n, np.int64), lengths)
    components = components_in_memory([partition_forest(rows, "minhash")], "minhash", 1)
    del rows
    members = components.column("ref").to_numpy()
    root = refs.copy()
    root[members] = components.column("root").to_numpy()
    size = np.ones(n, np.int32)
    size[members] = components.column("size").to_numpy()
    kept = root == refs
    similarity = np.full(n, np.nan)
    if verify_threshold is not None and (~kept).any():
        duplicates = np.flatnonzero(~kept)
        similarity[duplicates] = _shingle_jaccard(texts, duplicates, root[duplicates], options.ngram)
        kept[duplicates[similarity[duplicates] < verify_threshold]] = True
    root_ids = pa.array(ids).take(pa.array(root))
    return pa.table(
        {
            "id": ids,
            "kept": kept,
            "duplicate_of": pc.if_else(pa.array(kept), pa.nulls(n, pa.string()), root_ids),
            "cluster_id": root_ids,
            "cluster_size": size,
            "jaccard": pa.array(similarity, mask=np.isnan(similarity)),
        },
        schema=NEAR_DUPLICATES,
    )


def exact_duplicate_lines(documents: Documents, max_copies: int = 6, normalise: bool = True) -> pa.Table:
    """Line-level dedup over these documents as the corpus (the `line_dedup` rule, Llama 3): per document
    `lines_removed`, `chars_removed_frac` and `text` without the lines more than `max_copies` documents share.
    `normalise`: compare lines lower-cased with digits as 0 (CCNet); False: character for character."""
    from corpus.rules.line_dedup import LineDedup

    table = _documents_table(documents)
    rule = LineDedup(_options("exact_duplicate_lines", LineDedup.Options, max_copies=max_copies, normalise=normalise))
    docs = DocumentBatch.from_table(table)
    summary = rule.summarize([rule.accumulate(docs)])
    values = rule.corpus_signals(docs, summary)
    return pa.table(
        {
            "id": table.column("id"),
            "lines_removed": values["lines_removed"],
            "chars_removed_frac": values["chars_removed_frac"],
            "text": pa.array(rule.modify_texts(docs.texts, summary), pa.large_string()),
        }
    )


def quality_scores(texts: Sequence[str], model: str) -> np.ndarray:
    """The `quality_classifier` rule's score (probability of reference-quality text) of each text, from a model
    trained with `corpus classifier train`."""
    from corpus.rules.quality_classifier import QualityClassifier

    rule = QualityClassifier(QualityClassifier.Options(model=str(model)))
    QualityClassifier.check(rule.options)
    return np.asarray(rule.compute(DocumentBatch(_texts(texts)))["score"], np.float32)


def model_scores(texts: Sequence[str], model: str, **settings) -> pa.Table:
    """Each text's signals from a classifier, as a run's `[models.NAME]` stores them (without the NAME. prefix).

    `model`: a folder `save_pretrained` wrote, or a fastText file; `settings`: the table's other keys
    (`max_tokens`, `dtype`, `class_values`, ...). Runs in this process, on a GPU where `gpus_per_task` asks for one."""
    from corpus.errors import ClassifierError
    from corpus.models.sequence_classifier import ClassifierOptions, describe, load_classifier

    try:
        options = ClassifierOptions(model=str(model), **settings)
    except ValidationError as exc:
        raise ClassifierError(f"model_scores settings: {exc.errors()[0]['msg']}") from None
    signals = describe(options, str(model)).signals()
    values = load_classifier(options).scores(_texts(texts))
    return pa.table({signal.name: pa.array(values[signal.name], type=signal.type) for signal in signals})
