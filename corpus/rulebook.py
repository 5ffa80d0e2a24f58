"""The rule model and its registry.

A rule is one class in one module under `rules/`, decorated with `@register`:

- a versioned name (`name` + `version`; its columns are `<name>.<signal>`),
- its signals: name, Arrow type, meaning,
- the published default thresholds (`defaults = {"dup_line_frac": {"max": 0.3}}`),
- optional settings (a pydantic model, `Options`, filled from the job's `[rules.<name>]` table),
- `compute(docs)`: a pure function from a `DocumentBatch` to one array per signal,
- optionally `offending_span(text, url)`: where in a document the rule fires, for `corpus rules try` and reports,
- optionally `check(options)`: refuse unusable settings at job load (a model file with the wrong labels),
- `opt_in = True` for a rule that needs a file the job must name (a model): computed only when
  `[annotate] rules` lists it,
- `reads_text = False` for a rule that reads only the URL and metadata: a job may then apply it before
  extraction (`[prefilter] rules`), so the pages it drops are never extracted.

A rule that rewrites text (C4 line removal, PII masking) is a modifier: `modifies_text = True` and its
`modify(docs)` returns its signals and the new texts, which the rules after it in `[annotate] rules` see. The stored
documents keep the extracted text; modifiers record what they cut in their signals.

Nothing else has to be edited to add a rule: `discover()` imports every module of the `rules` package.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import pkgutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar

import pyarrow as pa
from pydantic import BaseModel, ConfigDict

from corpus.text.batch import DocumentBatch


@dataclass(frozen=True)
class Signal:
    name: str
    type: pa.DataType
    meaning: str
    most: float | None = None  # the largest value it takes (1 for a share): a min above it is refused at load


@dataclass(frozen=True)
class Span:
    """Characters [start, end) of a document's text (or of its URL when `in_url`) where a rule fires."""

    start: int
    end: int
    label: str
    in_url: bool = False


PATH_OPTION = "a file path; relative paths are relative to the job file"
FilePath = Annotated[str, PATH_OPTION]  # an option naming a file: resolved and checked when the job is loaded


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class RuleOptions(NoOptions):
    """Base for a rule's settings; subclass it inside the rule as `Options`."""


class Rule:
    name: ClassVar[str]
    version: ClassVar[int] = 1  # raised when its signals' values change: runs recompute them (why: the log)
    signals: ClassVar[tuple[Signal, ...]]
    defaults: ClassVar[dict[str, dict[str, float | int | bool]]] = {}
    Options: ClassVar[type[BaseModel]] = NoOptions
    modifies_text: ClassVar[bool] = False
    sees_modified_text: ClassVar[bool] = False  # in the default order, run after the modifiers
    position: ClassVar[int] = 100  # in the default order: FineWeb's pipeline 10-60 first, every other rule after
    opt_in: ClassVar[bool] = False  # not in the default order: only where `[annotate] rules` names it
    reads_text: ClassVar[bool] = True  # False: URL and metadata only, so it may run before extraction

    def __init__(self, options: BaseModel | None = None):
        self.options = options if options is not None else self.Options()

    @classmethod
    def versioned_name(cls) -> str:
        return f"{cls.name}_v{cls.version}"

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    @classmethod
    def column(cls, signal: str) -> str:
        return f"{cls.name}.{signal}"

    def compute(self, docs: DocumentBatch) -> dict[str, Sequence]:
        if self.modifies_text:
            return self.modify(docs)[0]
        raise NotImplementedError

    def modify(self, docs: DocumentBatch) -> tuple[dict[str, Sequence], list[str]]:
        """Modifiers only: (signals, rewritten texts)."""
        raise NotImplementedError

    def offending_span(self, text: str, url: str | None) -> Span | None:
        return None

    def changes_texts(self) -> bool:
        """Whether `modify` can change a text with these settings; False spares the tokenize phase its pass."""
        return self.modifies_text

    @classmethod
    def rewrites_text(cls) -> bool:
        """A modifier of the training text: per document (`modify`) or against the corpus (`modify_texts`)."""
        return cls.modifies_text or (issubclass(cls, CorpusRule) and cls.modify_texts is not CorpusRule.modify_texts)

    @classmethod
    def check(cls, options: BaseModel) -> None:
        """Called once at job load: raise ValueError saying what is wrong with these settings and what to do."""


class CorpusRule(Rule):
    """A rule whose signals depend on the corpus (Llama 3's token-distribution outliers, per-domain PII, line dedup).

    Instead of `compute`: `accumulate` counts one batch of documents as an Arrow table of `summary_schema` (the
    `summary_keys` columns, then integer counts); the engine sums such tables by key over a bucket of shards
    (`[annotate] corpus_bucket_documents`, 30M documents as in Llama 3's line dedup), in tasks, never on the
    driver; `finish` trims the sum (line dedup keeps only lines past its limit); `corpus_signals` gives each
    document its signals against the finished summary. Summaries are stored as Parquet per shard, so a resumed
    run only summarises new shards.
    """

    summary_schema: ClassVar[pa.Schema]
    summary_keys: ClassVar[tuple[str, ...]]

    def accumulate(self, docs: DocumentBatch) -> pa.Table:
        raise NotImplementedError

    def finish(self, summary: pa.Table) -> pa.Table:
        return summary

    def summarize(self, parts: list[pa.Table]) -> pa.Table:
        """The finished summary of a corpus made of these parts (summaries of batches, shards or buckets)."""
        return self.finish(sum_summaries(self, parts))

    def corpus_signals(self, docs: DocumentBatch, summary: pa.Table) -> dict[str, Sequence]:
        raise NotImplementedError

    def modify_texts(self, texts: list[str], summary: pa.Table) -> list[str] | None:
        """A corpus modifier (line dedup) returns the texts it rewrites against the finished summary; None: not one."""
        return None


def sum_summaries(rule: type[CorpusRule] | CorpusRule, tables: list[pa.Table]) -> pa.Table:
    """Summaries summed by their key columns, sorted by key (the same table whatever the order of the parts)."""
    keys = list(rule.summary_keys)
    counts = [name for name in rule.summary_schema.names if name not in keys]
    table = pa.concat_tables([rule.summary_schema.empty_table(), *(t.cast(rule.summary_schema) for t in tables)])
    summed = table.group_by(keys).aggregate([(name, "sum") for name in counts])
    summed = summed.rename_columns([name.removesuffix("_sum") for name in summed.column_names])
    return summed.select(rule.summary_schema.names).cast(rule.summary_schema).sort_by([(k, "ascending") for k in keys])


_REGISTRY: dict[str, type[Rule]] = {}
_DISCOVERED = False


def register(rule: type[Rule]) -> type[Rule]:
    """Class decorator: make a rule known by its name."""
    existing = _REGISTRY.get(rule.name)
    if existing is not None and existing.__qualname__ != rule.__qualname__:
        raise ValueError(f"two rules are named {rule.name!r}: {existing.__module__} and {rule.__module__}")
    names = [signal.name for signal in rule.signals]
    if len(set(names)) != len(names):
        raise ValueError(f"rule {rule.name!r} declares a signal twice")
    for signal, bounds in rule.defaults.items():
        if signal not in names or not set(bounds) <= {"min", "max"}:
            raise ValueError(f"rule {rule.name!r}: default {signal} {bounds} names no signal or bound")
    _REGISTRY[rule.name] = rule
    return rule


def discover() -> dict[str, type[Rule]]:
    """Every registered rule, after importing each module of the `rules` package once."""
    global _DISCOVERED
    if not _DISCOVERED:
        import corpus.rules

        for module in sorted(pkgutil.iter_modules(corpus.rules.__path__), key=lambda m: m.name):
            if not module.name.startswith("_"):
                importlib.import_module(f"corpus.rules.{module.name}")
        _DISCOVERED = True
    return dict(sorted(_REGISTRY.items()))


_DIGESTS: dict[tuple, str] = {}


def content_sha256(path: str) -> str:
    """sha256 of a local file's bytes, or of a folder's files (names and bytes); remembered per size and mtime,
    so that asking again for a large blocklist or model costs a stat."""
    target = Path(path)
    if target.is_dir():
        digest = hashlib.sha256()
        for child in sorted(p for p in target.rglob("*") if p.is_file()):
            digest.update(f"{child.relative_to(target)}\0{content_sha256(str(child))}\0".encode())
        return digest.hexdigest()
    stat = target.stat()
    key = (str(target.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with open(target, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def load_once(factory, path: str, *args):
    """`factory(path, *args)` built once per process for the file's current contents: a worker reuses a loaded
    model or tokenizer across tasks, and loads it again when the file is replaced. A missing path is left to
    `factory` to report."""
    return _loaded(factory, path, content_sha256(path) if Path(path).exists() else "", args)


@functools.cache
def _loaded(factory, path: str, digest: str, args: tuple):
    return factory(path, *args)
