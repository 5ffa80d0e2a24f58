"""Fixtures shared by every test folder: the shared WARCs, one clean run over them, and restored registries."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import SHARED_WARC_HTML_RECORDS, benchmark_module, shared, write_job


@pytest.fixture(scope="session")
def shared_warcs() -> list[Path]:
    return [shared(relative) for relative in SHARED_WARC_HTML_RECORDS]


@pytest.fixture(scope="session")
def clean_run(shared_warcs, tmp_path_factory):
    """One uninterrupted run (no Ray) over every shared WARC: (job, stats, output folder)."""
    from corpus.config.job import load_job
    from corpus.engine import run_job

    folder = tmp_path_factory.mktemp("clean")
    job = load_job(write_job(folder, [str(p) for p in shared_warcs], folder / "out"))
    stats = run_job(job, use_ray=False)
    return job, stats, folder / "out"


@pytest.fixture
def restored_registries():
    """The rule registry and the engine's task kinds as they were before the test: a test may add its own."""
    from corpus import rulebook
    from corpus.engine import tasks

    rulebook.discover()  # every rule registered first, so that the copy holds them all
    rules, kinds = dict(rulebook._REGISTRY), dict(tasks.KINDS)
    yield
    rulebook._REGISTRY.clear()
    rulebook._REGISTRY.update(rules)
    tasks.KINDS.clear()
    tasks.KINDS.update(kinds)


def reference_and_crawl_texts() -> list[str]:
    """WikiText paragraphs and scrapinghub article bodies, of mixed lengths."""
    import json

    wikitext = shared("text-wikitext2/valid.txt").read_text().split("\n")
    articles = json.loads(shared("html-scrapinghub-aeb/ground-truth.json").read_text())
    texts = [line for line in wikitext if len(line) > 40][:60]
    return texts + [entry["articleBody"] for _, entry in sorted(articles.items())][:20]


@pytest.fixture(scope="session")
def tiny_classifiers(tmp_path_factory):
    """(texts, a regression model's folder, a three-class model's folder): 2-layer BERT-shaped classifiers with random
    weights and a WordPiece tokenizer trained on shared text, saved as `save_pretrained` saves them."""
    pytest.importorskip("transformers", reason="the models extra is not installed: pip install -e '.[models]'")
    texts = reference_and_crawl_texts()
    folder = tmp_path_factory.mktemp("models")
    build = benchmark_module("model_scores").write_random_classifier
    shape = {"layers": 2, "hidden": 32, "heads": 2, "vocabulary": 600, "max_positions": 128, "initializer_range": 0.5}
    regression = build(folder / "regression", texts, **shape)
    classes = build(folder / "classes", texts, labels=["Low", "Medium", "High"], seed=1, **shape)
    return texts, regression, classes
