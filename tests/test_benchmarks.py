"""Every benchmark the README quotes runs, at its smallest setting, after the README's own install commands.

A benchmark is a script users run to check a figure; one that fails on a fresh machine (a missing dependency, a
path that only worked on the author's) is a figure nobody can check. Each runs here as a user would run it, in its
own process, and must finish and print its result line. Three are left out, and why: `ablation_shared.py` has no
smaller setting than its 15-minute whole (`ablation_sensitivity.py` runs the same lab on less), nor has
`ablation_by_score.py` (about 8 minutes: a BERT-base scoring the shared pages, then an ablation; its parts run in
tests/engine/test_model_scores.py and tests/models/), and `ablation_gpu.sh` needs a GPU.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from support import REPO, shared

pytestmark = pytest.mark.slow

SMALLEST = [  # script, its smallest setting, a line its output must hold
    ("scale_plan.py", ["--inputs", "900"], r"^bytes per task: \d+, driver RSS: \d+ MiB, plan seconds: "),
    ("classifier.py", [], r"^goal: >= 5,000 docs/s per core"),
    ("tokenize_stage.py", [], r"^goal: the stage >= 0.8x the raw encoder"),
    ("language_id.py", [], r"ms/page +[\d.]+ +[\d.]+ +ratio [\d.]+x"),
    ("extraction_quality.py", ["--limit", "2", "--jobs", "1"], r"^F1 of resiliparse / trafilatura defaults: "),
    ("faults.py", ["--inputs-only"], r"^wrong declared charset "),
    ("rule_signals.py", [], r"^goal: ours >= 20x datatrove's chain per core"),
    ("dedup.py", ["--sizes", "10000,20000"], r"^20,000 / 10,000 dedup time: [\d.]+x"),
    ("model_scores.py", ["--documents", "4"], r"^corpus vs model card: [\d.]+x documents/s"),
    (
        "fineweb_recipe.py",
        ["--copies", "2", "--inputs", "shared", "--extractors", "resiliparse"],
        r"^ms/page: ours [\d.]+, datatrove [\d.]+, ratio [\d.]+",
    ),
    (
        "fineweb2_recipe.py",
        ["--copies", "1", "--languages", "cmn_Hani,deu_Latn"],
        r"^ms/page: ours [\d.]+, datatrove [\d.]+, ratio [\d.]+ \(languages: cmn_Hani, deu_Latn\)",
    ),
    (
        "words_every_language.py",
        ["--languages", "fra,tha", "--copies", "1", "--rounds", "1"],
        r"^goal: rules: ours >= [\d.]+x datatrove \(goal >= 10x\); segmenters: ours <= [\d.]+x",
    ),
    (
        "ablation_sensitivity.py",
        ["--kinds", "keyword_spam", "--shares", "20", "--fresh"],
        r"smallest planted share",
    ),
]


@pytest.mark.parametrize(("script", "arguments", "said"), SMALLEST, ids=[entry[0] for entry in SMALLEST])
def test_a_quoted_benchmark_runs_at_its_smallest_setting(script, arguments, said):
    shared("warc-dolma")  # every one reads the shared data: skipped without it, a failure in CI
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *arguments],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(said, done.stdout, re.MULTILINE), done.stdout[-3000:]
