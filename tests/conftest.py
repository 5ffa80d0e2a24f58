"""Fixtures shared by every test folder: the shared WARCs, one clean run over them, and restored registries."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import SHARED_WARC_HTML_RECORDS, shared, write_job


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
