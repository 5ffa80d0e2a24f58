"""What tests share: the repository's paths, the real data in ../shared/data, and builders of jobs and inputs.

Imported by name (`from support import write_job`): pytest puts tests/ on the path (`pythonpath` in
pyproject.toml). Fixtures live in conftest.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NoReturn

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# HTML response records per file, as counted independently in ../shared/data/SOURCES.md.
SHARED_WARC_HTML_RECORDS = {
    "warc-resiliparse/warcfile.warc.gz": 16,
    "warc-resiliparse/clueweb-quirk.warc.gz": 29,
    "warc-dolma/sample-0000.warc.gz": 22,
    "warc-dolma/sample-0001.warc.gz": 15,
    "warc-cc-whirlwind/whirlwind.warc.gz": 1,
    "warc-aut/example.warc.gz": 140,
    "warc-ipwb/sample-1.warc.gz": 64,
    "warc-ukwa-govuk/BL-20140325121225068-00000-32090~opera~8443.warc.gz": 36,
    "warc-ukwa-govuk/BL-20140325122341434-00000-32090~opera~8443.warc.gz": 7,
}


def documentation() -> str:
    """The README and every page of docs/, as one text: what users read, which tests run the examples of."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return "\n\n".join(page.read_text() for page in pages)


def unavailable(reason: str) -> NoReturn:
    """A test's prerequisite is missing: skip it with the reason, or fail where CI promises every prerequisite
    (`CORPUS_REQUIRE_SHARED_DATA=1`)."""
    if os.environ.get("CORPUS_REQUIRE_SHARED_DATA") == "1":
        pytest.fail(reason + "; CORPUS_REQUIRE_SHARED_DATA=1 (CI installs and provides it) makes this a failure")
    pytest.skip(reason)


def shared(relative: str) -> Path:
    """A file under ../shared/data; skips the test where it is absent (fails instead in CI)."""
    path = SHARED_DATA / relative
    if not path.exists():
        unavailable(f"shared data not found: {path} (the tests expect ../shared/data beside the repository)")
    return path


def real_documents():
    """The benchmarks' set of real documents (`benchmarks/real_documents.py`: id, text, url, lang), built from
    ../shared/data once and cached."""
    shared("html-trafilatura-eval/trafilatura-eval.tar.xz")
    return benchmark_module("real_documents").real_documents(SHARED_DATA)


def benchmark_module(name: str):
    """`benchmarks/<name>.py`: the builders of the real-data sets (and their scores) that tests and benchmarks
    share."""
    import importlib.util
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))  # benchmarks import each other by module name
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sample_in_two_shards(folder: Path) -> list[str]:
    """The embedded sample cut at a gzip member near its middle: two real WARC shards, `a.warc.gz` and `b.warc.gz`."""
    from corpus.sample.generate import build_sample

    data, _ = build_sample()
    cut = data.index(b"\x1f\x8b\x08", len(data) // 2)
    (folder / "a.warc.gz").write_bytes(data[:cut])
    (folder / "b.warc.gz").write_bytes(data[cut:])
    return [str(folder / "a.warc.gz"), str(folder / "b.warc.gz")]


def garble_keeping_identity(path: Path, garbage: bytes = b"not a crawl any more ") -> None:
    """Overwrite a file with garbage of its own size and give it back its times: a run takes it for the file it
    read (size and mtime are an input's identity), so only a run that read it again would notice."""
    stat = path.stat()
    path.write_bytes(garbage.ljust(stat.st_size, b"!")[: stat.st_size])
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def write_job(
    folder: Path, inputs: list[str], output: Path, extra: str = "", name: str = "test", **sections: dict
) -> Path:
    """`folder/<name>.toml`: a job over `inputs` into `output`, with `sections` as its tables (`dedup={"steps":
    ["exact"]}` is `[dedup] steps = ["exact"]`; a table inside a table is a dotted one) and `extra` TOML after."""
    job = folder / f"{name}.toml"
    head = {"name": name, "inputs": [str(i) for i in inputs], "output": str(output)}
    body = "".join(f"{key} = {_toml_value(value)}\n" for key, value in head.items())
    body += "".join(_toml_table(section, table) for section, table in sections.items())
    job.write_text(f"{body}{extra}\n")
    return job


def _toml_value(value) -> str:
    """A TOML value: JSON's strings, numbers, booleans and lists are TOML's."""
    return json.dumps(value)


def _toml_table(name: str, table: dict) -> str:
    plain = "".join(f"{key} = {_toml_value(v)}\n" for key, v in table.items() if not isinstance(v, dict))
    nested = "".join(_toml_table(f"{name}.{key}", v) for key, v in table.items() if isinstance(v, dict))
    return f"[{name}]\n{plain}{nested}"


# A rule's test: `signals(...)` and `kept_by_defaults(...)`, as docs/rules.md's "Writing a rule" shows.
def signals(rule_name: str, texts, urls=None, langs=None, scores=None, **options) -> dict[str, list]:
    """The rule's signals on these texts (with `options` as its settings), as lists: what a rule's test asserts."""
    import numpy as np
    import pyarrow as pa

    from corpus.rulebook import discover
    from corpus.text.batch import DocumentBatch

    rule_class = discover()[rule_name]
    rule = rule_class(rule_class.Options.model_validate(options))
    docs = DocumentBatch(list(texts), urls, langs, scores)
    values = rule.modify(docs)[0] if rule.modifies_text else rule.compute(docs)
    return {
        name: column.to_pylist() if isinstance(column, pa.Array) else np.asarray(column).tolist()
        for name, column in values.items()
    }


def kept_by_defaults(rule_name: str, values: dict[str, list]) -> list[bool]:
    """Which documents the rule's default thresholds keep, given its `signals`."""
    import pyarrow as pa

    from corpus.rulebook import discover
    from corpus.stages.select import default_thresholds, select_documents

    rule = discover()[rule_name]
    table = pa.table(
        {
            "id": [str(i) for i in range(len(next(iter(values.values()))))],
            **{f"{rule_name}.{s.name}": pa.array(values[s.name], s.type) for s in rule.signals},
        }
    )
    thresholds = default_thresholds(rule)
    return select_documents(table, thresholds)[0].table.column("kept").to_pylist()
