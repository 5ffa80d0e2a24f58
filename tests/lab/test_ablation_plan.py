"""What an ablation scores and what it can detect: the final window, the chance rule, the power arithmetic, and
`corpus ablate plan` on the sample."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats
from support import REPO

pytest.importorskip("torch", reason="the ablation extra (torch) is not installed")

from corpus.errors import JobError
from corpus.lab.ablation_job import load_ablation  # noqa: E402
from corpus.lab.noise import Noise, difference_interval, minimum_detectable_effect  # noqa: E402
from corpus.lab.power import needed_for  # noqa: E402
from corpus.lab.verdicts import final_evaluations, final_window_problem, verdict_rows  # noqa: E402


def test_a_run_is_scored_by_its_evaluations_in_the_final_share_of_training():
    # 300 steps evaluated every 10: the last 10 % is steps 270-300, four evaluations.
    assert final_evaluations(list(range(10, 301, 10)), 0.1) == 4
    # 30 steps evaluated at 10, 20, 30: the last 10 % holds one, so the last two are taken.
    assert final_evaluations([10, 20, 30], 0.1) == 2
    assert final_evaluations([10], 0.1) == 1  # a run evaluated once has only that
    assert final_window_problem(300, 10, 0.1) is None
    assert final_window_problem(1, 1, 1.0) == (
        "a run of 1 step is evaluated once; give [train] tokens for two steps or more"
    )
    assert final_window_problem(30, 10, 0.1) == (
        "[evaluation] final = 0.1 scores a run by its evaluations in its last 10% of 30 steps (from step 27), and "
        "eval_every = 10 leaves 1 there; set [train] eval_every to at most 1 or raise [evaluation] final"
    )


def test_a_job_whose_evaluations_cannot_fill_the_final_window_is_refused_at_load(tmp_path):
    for name in ("ablation_sample.toml", "sample.toml"):
        shutil.copy(REPO / "jobs" / name, tmp_path / name)
    (tmp_path / "references").mkdir()
    shutil.copy(REPO / "jobs" / "references" / "sample_heldout.jsonl", tmp_path / "references")
    job = (tmp_path / "ablation_sample.toml").read_text()
    job = job.replace('tokens = "auto"', "tokens = 40_960").replace("eval_every = 3 ", "eval_every = 20")
    (tmp_path / "ablation_sample.toml").write_text(job.replace('tasks = ["arc_easy", "piqa", "hellaswag", "sciq"]', ""))
    # 40,960 tokens in batches of 8 x 128: 40 steps, evaluated at 20 and 40; the last 10 % (36-40) holds one.
    refused = (
        r"model d64L2: \[evaluation\] final = 0.1 scores a run by its evaluations in its last 10% of 40 steps "
        r"\(from step 36\), and eval_every = 20 leaves 1 there"
    )
    with pytest.raises(JobError, match=refused):
        load_ablation(tmp_path / "ablation_sample.toml")


def _runs(right: dict[str, list[int]], chance: float | None) -> pa.Table:
    """Hand-made runs of 100 questions: per variant, per seed, how many it answers right (the first ones)."""
    rows = []
    for variant, seeds in right.items():
        for seed, count in enumerate(seeds):
            items = [1.0] * count + [0.0] * (100 - count)
            row = {"model": "m", "variant": variant, "seed": seed, "step": 10, "task.accuracy": count / 100,
                   "task.accuracy.items": items, "baseline": variant == "base", "variant_tokens": 1000,
                   "documents_sha256": variant, "passes": 1.0, "max_passes": 4.0}  # fmt: skip
            if chance is not None:
                row["task.accuracy.chance"] = chance
            rows.append(row)
    return pa.Table.from_pylist(rows)


def test_accuracy_at_chance_cannot_decide_whatever_its_spread():
    # 4-choice questions: the variants differ by 0.05 with a seed std of 0.01 (SNR 5), at 0.25-0.30 accuracy.
    low = {"base": [25, 26, 24], "new": [30, 29, 31]}
    row = verdict_rows(_runs(low, 0.25), ["task.accuracy"])[1]
    assert row["snr"] == pytest.approx(5.0) and row["chance"] == 0.25
    # The best is 0.05 above chance; its noise: the seeds' 0.01² / 3 and the variance of the 100 questions' scores
    # averaged over seeds / 100: 0.0457. Not twice that above chance: it cannot decide.
    per_question = np.array([[1.0] * c + [0.0] * (100 - c) for c in low["new"]]).mean(axis=0)
    assert row["mean_noise"] == pytest.approx(math.sqrt(0.0001 / 3 + per_question.var(ddof=1) / 100))
    assert row["mean_noise"] == pytest.approx(0.0459, abs=1e-4)
    assert row["above_chance"] is False and row["decides"] is False
    high = {"base": [55, 56, 54], "new": [60, 59, 61]}  # the same spread, far above chance: it decides
    row = verdict_rows(_runs(high, 0.25), ["task.accuracy"])[1]
    assert row["above_chance"] is True and row["decides"] is True
    assert verdict_rows(_runs(low, None), ["task.accuracy"])[1]["above_chance"] is None  # no chance level stored


def test_the_minimum_detectable_effect_is_the_sum_of_two_t_quantiles_times_the_standard_error():
    noise = Noise(0.01, 3, ((1.0, 100, 1.0),))  # a seed's variance 0.01 over 3 seeds; an item's 1.0 over 100
    variance = 0.01 / 3 + 1.0 / 100
    freedom = variance**2 / ((0.01 / 3) ** 2 / 2 + (1.0 / 100) ** 2 / 99)
    assert noise.variance == pytest.approx(variance) and noise.freedom == pytest.approx(freedom)
    expected = (stats.t.ppf(0.975, freedom) + stats.t.ppf(0.8, freedom)) * math.sqrt(variance)
    assert minimum_detectable_effect(noise, 0.95) == pytest.approx(expected) == pytest.approx(0.3356, abs=1e-4)
    # For three variants at once the interval is wider, so is what it detects.
    assert minimum_detectable_effect(noise, 0.95, comparisons=3) > expected
    # More seeds shrink the seeds' part only; more items the items' part only.
    assert noise.scaled(12).variance == pytest.approx(0.01 / 12 + 0.01)
    assert noise.scaled(3, 4.0).variance == pytest.approx(0.01 / 3 + 1.0 / 400)


def test_the_minimum_detectable_effect_is_detected_about_80_percent_of_the_time_in_simulation():
    # Ablations simulated with a true Δ equal to the MDE: the interval calls it beyond noise about 80 % of the
    # time (the t approximation with estimated degrees of freedom lands at 78-79 % with 3-5 seeds).
    rng = np.random.default_rng(3)
    for seed_sd, item_sd, seeds, items in ((0.1, 1.0, 3, 100), (0.3, 0.2, 5, 50)):
        mde = minimum_detectable_effect(Noise(seed_sd**2, seeds, ((item_sd**2, items, 1.0),)), 0.95)
        detected = 0
        for _ in range(2000):
            d = mde + rng.normal(0, seed_sd, (seeds, 1)) + rng.normal(0, item_sd, (1, items))
            half, _ = difference_interval(d.mean(axis=1), [d], 0.95)
            detected += abs(d.mean()) > half
        assert 0.75 <= detected / 2000 <= 0.85, (seed_sd, item_sd, detected / 2000)


def test_the_seeds_or_items_a_delta_needs_are_the_fewest_that_detect_it():
    noise = Noise(0.004, 3, ((0.5, 100, 1.0),))  # detects 0.229 with 3 seeds
    assert minimum_detectable_effect(noise, 0.95) == pytest.approx(0.2293, abs=1e-4)
    assert needed_for(noise, 0.3, 0.95, 1) == (2, 1.0, None)  # already detectable: the fewest seeds that do
    # Δ = 0.2: the items' part alone (0.5 / 100) leaves an MDE near 0.2 however many seeds; 1.6x the items do it.
    seeds, factor, both = needed_for(noise, 0.2, 0.95, 1)
    step = 100 ** (1 / 59)  # the factors tried: 60 from 1 to 100, evenly on a log scale
    assert seeds is None and factor == pytest.approx(1.597, abs=1e-3) and both is None
    assert minimum_detectable_effect(noise.scaled(3, factor), 0.95) <= 0.2
    assert minimum_detectable_effect(noise.scaled(3, factor / step), 0.95) > 0.2
    # Δ = 0.15: neither alone reaches it; 4 seeds with 3.2x the items do.
    seeds, factor, both = needed_for(noise, 0.15, 0.95, 1)
    assert (seeds, factor) == (None, None) and both[0] == 4
    assert minimum_detectable_effect(noise.scaled(*both), 0.95) <= 0.15
    assert minimum_detectable_effect(noise.scaled(3, 100), 0.95) > 0.15
    seeds_bound = Noise(0.04, 3, ((0.01, 100, 1.0),))  # the seeds' noise dominates
    seeds, _, _ = needed_for(seeds_bound, 0.1, 0.95, 1)
    assert minimum_detectable_effect(seeds_bound.scaled(seeds), 0.95) <= 0.1
    assert minimum_detectable_effect(seeds_bound.scaled(seeds - 1), 0.95) > 0.1 and seeds > 3


@pytest.mark.slow
def test_ablate_plan_on_the_sample_says_runs_budget_time_and_trains_nothing(tmp_path, capsys):
    from corpus.cli import main

    jobs = tmp_path / "jobs"
    shutil.copytree(REPO / "jobs", jobs)
    (tmp_path / "corpus").symlink_to(REPO / "corpus")  # the sample's crawl and tokenizer, as the jobs name them
    text = (jobs / "ablation_sample.toml").read_text()
    (jobs / "loo.toml").write_text(
        text.replace('baseline = "unfiltered"', "").replace('output = "../runs/ablation-sample"', 'output = "../loo"')
        + '\n[variants]\nauto = "leave_one_out"\n'
    )
    assert main(["ablate", "plan", str(jobs / "loo.toml"), "--no-ray", "--delta", "0.01"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    # all, 17 left out, and the job's three: fewer distinct token streams, each trained once per seed.
    variants, streams = int(first.split()[1]), int(first.split(", ")[1].split()[0])
    assert first.startswith("ablation-sample: 21 variants") and streams < variants
    assert first.endswith(f"= {streams * 3} training runs ({streams * 3} to do)")
    assert "d64L2: 39 steps, 39,936 training tokens a run" in out and "tokens/s measured here" in out
    assert "power: no pilot's noise to read" in out
    assert not (tmp_path / "loo" / "runs").exists()  # nothing trained


def test_variants_keep_the_top_fractions_of_a_models_scores(tiny_classifiers, tmp_path):
    from support import shared, write_job

    _, regression, _ = tiny_classifiers
    models = {"edu": {"model": str(regression)}}
    write_job(tmp_path, [str(shared("warc-dolma/sample-0000.warc.gz"))], tmp_path / "docs", name="documents",
              models=models)  # fmt: skip
    shutil.copy(REPO / "jobs" / "references" / "sample_heldout.jsonl", tmp_path / "heldout.jsonl")
    variants = "".join(
        f"[variants.edu_top{100 - q}]\nselect = {{ edu = {{ score = {{ min_quantile = {q / 100} }} }} }}\n"
        for q in (50, 70, 90)
    )
    (tmp_path / "ablation.toml").write_text(
        'name = "by-score"\ndocuments = "documents.toml"\noutput = "out"\n'
        "[train]\ntokens = 40_960\nbatch_size = 8\neval_every = 2\n[model]\nseq_len = 128\n"
        '[[references]]\nname = "heldout"\npath = "heldout.jsonl"\n[variants.all]\n' + variants
    )
    ablation = load_ablation(tmp_path / "ablation.toml")
    assert list(ablation.variants) == ["all", "edu_top50", "edu_top30", "edu_top10"]
    assert not [t for t in ablation.variants["all"].thresholds if t.rule == "edu"]
    for name, quantile in (("edu_top50", 0.5), ("edu_top30", 0.7), ("edu_top10", 0.9)):
        (threshold,) = [t for t in ablation.variants[name].thresholds if t.rule == "edu"]
        assert (threshold.column, threshold.bound, threshold.quantile) == ("edu.score", "min", quantile)
        assert ablation.variants[name].documents_from == ablation.documents.output
