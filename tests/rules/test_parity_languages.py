"""FineWeb-2's per-language filtering: our decisions against datatrove's own filters, language by language.

Documents per language: windows of 1 to 21 lines of the Universal Declaration of Human Rights in that language
(NLTK's udhr2, real text in every script), every fifth with its first lines repeated, so that each family keeps
some and drops others (the benchmark's texts); plus the shared WARCs' pages lid.176 reads as that language.
datatrove runs each family as FineWeb-2's pipeline configured it (`fineweb-2-pipeline.py`: the language's YAML
settings, `language=<key>`, its word tokenizer); ours is one `apply_rules` call with `per_language`.
"""

from __future__ import annotations

import tarfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import benchmark_module, shared, unavailable, write_job

pytestmark = pytest.mark.slow  # each compares with a peer on real data

LANGUAGES = {  # language key -> its UDHR file
    "cmn_Hani": "cmn_hans",
    "jpn_Jpan": "jpn",
    "tha_Thai": "tha",
    "kor_Hang": "kor",
    "rus_Cyrl": "rus",
    "arb_Arab": "arb",
    "hin_Deva": "hin",
    "deu_Latn": "deu",
    "khm_Khmr": "khm",
    "lao_Laoo": "lao",
}
FAMILIES = ("gopher_repetition", "fineweb", "gopher_quality")
CONFIGS = "lists-fineweb2/fineweb2-configs.tar.xz"


def udhr_documents(name: str) -> list[str]:
    """Windows of a UDHR translation (`benchmarks/fineweb2_recipe.py`, which times the same recipe on them)."""
    return benchmark_module("fineweb2_recipe").udhr_documents(shared("."), name)


@pytest.fixture(scope="module")
def warc_pages(tmp_path_factory) -> dict[str, list[str]]:
    """The shared WARCs' pages by language key (lid.176 and the text's script), as a run extracts them."""
    from corpus.config.job import load_job
    from corpus.engine import run_job

    folder = tmp_path_factory.mktemp("pages")
    warcs = [str(p) for p in sorted(shared(".").glob("warc-*/*.warc.gz"))]
    extra = (
        '[extract]\nextractor = "resiliparse"\n[annotate]\nrules = ["language"]\n[rules.language]\nlanguages = ["*"]\n'
    )
    run_job(load_job(write_job(folder, warcs, folder / "out", extra=extra)), use_ray=False)
    table = pa.concat_tables(pq.read_table(p) for p in sorted((folder / "out" / "documents").glob("*.parquet")))
    pages: dict[str, list[str]] = {}
    for text, key in zip(table.column("text").to_pylist(), table.column("language.key").to_pylist(), strict=True):
        pages.setdefault(key, []).append(text)
    return pages


@pytest.mark.parametrize("key", list(LANGUAGES))
def test_per_language_decisions_agree_with_datatrove(key, warc_pages):
    import yaml
    from datatrove.data import Document

    from corpus.api import apply_rules
    from corpus.text.segmenters import SEGMENTERS

    segmenter = SEGMENTERS.get(key.rsplit("_", 1)[1])
    if segmenter is not None and not segmenter.available():
        unavailable(f"{segmenter.requirement} is not installed (pip install -e '.[languages]')")
    configs = shared(CONFIGS)
    with tarfile.open(configs) as archive:
        config = yaml.safe_load(archive.extractfile(f"configs/{key}.yml"))
    texts = udhr_documents(LANGUAGES[key]) + warc_pages.get(key, [])
    ours = apply_rules(
        pa.table({"text": texts, "lang": [key] * len(texts), "lang_score": [1.0] * len(texts)}),
        rules=["language", *FAMILIES],
        settings={"language": {"languages": ["*"]}},
        thresholds={"per_language": str(configs)},
    )
    failures = ours.column("failures").to_pylist()
    results = {}
    try:
        steps = benchmark_module("udhr_languages").datatrove_filters(key, config)
    except ImportError:
        unavailable("datatrove is not installed (pip install -e '.[parity]')")
    for family, step in steps.items():
        theirs = np.array([step.filter(Document(text=t, id=str(i))) is True for i, t in enumerate(texts)])
        mine = np.array([not any(f.startswith(f"{family}.") for f in failed) for failed in failures])
        disagree = np.flatnonzero(mine != theirs)
        results[family] = 1 - len(disagree) / len(texts)
        print(
            f"{key} {family}: {results[family]:.4f} of {len(texts)}; ours keeps {mine.sum()}, datatrove {theirs.sum()}"
        )
        assert 0 < theirs.sum() < len(texts), f"{family} keeps all or none of the {key} documents: a weak comparison"
    assert all(agreement >= 0.99 for agreement in results.values()), results
