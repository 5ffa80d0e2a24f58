"""What an ablation costs and what it can detect, told before anything trains (`corpus ablate plan JOB`).

The cost: per model size, the steps, tokens and passes of a run, the distinct token streams (identical variants
train once), the runs left to do, and their time: on this machine's CPU from a few measured training steps, on a
GPU from the model's FLOPs at an assumed utilisation. The power: from a pilot's noise (an earlier ablation's
results, or this job's own last run), per metric the smallest Δ this plan detects with 80 % power, and, for a
Δ the user names, the seeds or the items that would detect it (`corpus.lab.noise.Noise`).
"""

from __future__ import annotations

import os
import time

import numpy as np
import pyarrow as pa

from corpus.lab.noise import POWER, Noise, minimum_detectable_effect
from corpus.lab.training_runs import to_do
from corpus.lab.verdicts import DEFAULT_METRICS, evaluation_steps, metric_columns, verdict_rows

GPU_PEAK_FLOPS = 989e12  # an H100's dense bf16 peak
ASSUMED_MFU = 0.3  # what an estimate of GPU time assumes; models of a few million parameters reach far less
MOST_SEEDS = 64
MOST_ITEMS_FACTOR = 100.0


def measured_tokens_per_s(model: dict, batch_size: int, threads: int, steps: int = 3) -> float:
    """Training tokens per second of `model` on this machine's CPU: `steps` steps on random tokens after one
    left out (allocation), with the ablation's threads per run."""
    import torch
    from torch.nn import functional as F

    from corpus.lab.models import LanguageModel, ModelConfig

    config = ModelConfig(**model)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        network = LanguageModel(config)
        optimizer = torch.optim.AdamW(network.parameters(), lr=1e-3)
        tokens = torch.randint(0, config.vocab_size, (batch_size, config.seq_len + 1))
        started = 0.0
        for step in range(steps + 1):
            if step == 1:
                started = time.perf_counter()
            logits = network(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, config.vocab_size), tokens[:, 1:].reshape(-1))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        return steps * batch_size * config.seq_len / (time.perf_counter() - started)
    finally:
        torch.set_num_threads(previous)


def flops_per_token(model: dict) -> int:
    from corpus.lab.models import LanguageModel, ModelConfig

    return LanguageModel(ModelConfig(**model)).flops_per_token()


def _fewest_factor(noise: Noise, seeds: int, delta: float, confidence: float, comparisons: int) -> float | None:
    """The fewest times the items (of 60 steps from 1 to `MOST_ITEMS_FACTOR`) at which `seeds` seeds detect
    `delta`; None past the last."""
    if not noise.item_parts:
        return None
    return next(
        (float(f) for f in np.geomspace(1, MOST_ITEMS_FACTOR, 60)
         if minimum_detectable_effect(noise.scaled(seeds, f), confidence, comparisons) <= delta),
        None,
    )  # fmt: skip


def needed_for(
    noise: Noise, delta: float, confidence: float, comparisons: int
) -> tuple[int | None, float | None, tuple[int, float] | None]:
    """What detects `delta` with 80 % power: the fewest seeds (items as they are), the fewest times the items
    (seeds as they are), and, where neither alone does, the fewest seeds with the fewest times the items; None
    where even `MOST_SEEDS` seeds or `MOST_ITEMS_FACTOR` times the items would not do."""
    seeds = next(
        (s for s in range(2, MOST_SEEDS + 1)
         if minimum_detectable_effect(noise.scaled(s), confidence, comparisons) <= delta),
        None,
    )  # fmt: skip
    factor = _fewest_factor(noise, noise.seeds, delta, confidence, comparisons)
    both = None
    if seeds is None and factor is None:
        for more in range(noise.seeds + 1, MOST_SEEDS + 1):
            found = _fewest_factor(noise, more, delta, confidence, comparisons)
            if found is not None:
                both = (more, found)
                break
    return seeds, factor, both


def pilot_noise(results: pa.Table, final: float, confidence: float) -> dict[str, Noise]:
    """Per metric, a pilot's noise of Δ (its first model's): of the variants it judged, the one with the median
    variance."""
    noises: dict[str, list[Noise]] = {}
    first = results.column("model")[0].as_py()
    for row in verdict_rows(results, metric_columns(results, DEFAULT_METRICS), final, confidence):
        if row["noise_parts"] is not None and not row["data_limited"] and row["model"] == first:
            noises.setdefault(row["metric"], []).append(row["noise_parts"])
    return {m: sorted(found, key=lambda n: n.variance)[len(found) // 2] for m, found in noises.items()}


def power_lines(noises: dict[str, Noise], seeds: int, comparisons: int, confidence: float,
                delta: float | None) -> list[str]:  # fmt: skip
    """Per metric: the smallest Δ detectable with `seeds` seeds (items as in the pilot) and, for `delta`, the seeds
    or items that would detect it."""
    lines = []
    for metric, pilot in noises.items():
        noise = pilot.scaled(seeds)
        mde = minimum_detectable_effect(noise, confidence, comparisons)
        line = f"  {metric}: detects |Δ| ≥ {mde:.4f} with {seeds} seeds"
        if delta is not None:
            more_seeds, more_items, both = needed_for(noise, delta, confidence, comparisons)
            options = []
            if more_seeds is not None:
                options.append(f"{more_seeds} seeds")
            if more_items is not None:
                options.append(f"{more_items:.1f}x the items")
            if both is not None:
                options.append(f"{both[0]} seeds and {both[1]:.1f}x the items together")
            if mde <= delta:
                line += f"; Δ = {delta:g}: detectable as planned"
            elif options:
                line += f"; Δ = {delta:g} needs " + " or ".join(options)
            else:
                line += (
                    f"; Δ = {delta:g} is out of reach with ≤ {MOST_SEEDS} seeds or ≤ {MOST_ITEMS_FACTOR:g}x the "
                    "items: a larger model or budget moves the metric more"
                )
        lines.append(line)
    return lines


def plan_lines(ablation, prepared, pilot: pa.Table | None, pilot_name: str, delta: float | None) -> list[str]:
    """The plan of a prepared ablation, in lines: runs, budget, time, and power."""
    spec = ablation.spec
    todo = {task.id for task in to_do(prepared.plan, prepared.tasks)}
    streams = len(set(prepared.members.values()))
    lines = [
        f"{spec.name}: {len(prepared.members)} variants, {streams} distinct token streams x {len(ablation.models)} "
        f"model(s) x {len(spec.seeds)} seeds = {len(prepared.tasks)} training runs ({len(todo)} to do)"
    ]
    threads = spec.train.threads
    parallel = max(1, (os.cpu_count() or 1) // threads)
    cpu_total = gpu_total = 0.0
    for model in ablation.models:
        mine = {run for (_, label, _), run in prepared.run_of.items() if label == model.label}
        config = prepared.plan.runs[next(iter(mine))].model
        steps = prepared.steps[model.label]
        tokens = steps * spec.train.batch_size * model.seq_len
        passes = [facts["passes"][model.label] for facts in prepared.summary["variants"].values()]
        evaluations = len(evaluation_steps(steps, spec.train.eval_every))
        rate = measured_tokens_per_s(config, spec.train.batch_size, threads)
        scored = sum(sum(len(d) for d in r.documents) for r in prepared.plan.references) + sum(
            sum(len(c) + len(t) for c, t in zip(task.contexts, task.continuations, strict=True))
            for task in prepared.plan.tasks
        )
        cpu = tokens / rate + evaluations * scored / (3 * rate)  # a forward pass is about a third of a step
        gpu = flops_per_token(config) * (tokens + evaluations * scored / 3) / (GPU_PEAK_FLOPS * ASSUMED_MFU)
        cpu_total += cpu * len(mine & todo)
        gpu_total += gpu * len(mine & todo)
        lines.append(
            f"  {model.label}: {steps:,} steps, {tokens:,} training tokens a run, {min(passes):.2f}-{max(passes):.2f} "
            f"passes over the variants' tokens, {evaluations} evaluations; {rate:,.0f} tokens/s measured here: "
            f"{cpu:,.0f} s a run on CPU"
        )
    lines.append(
        f"time of the {len(todo)} runs to do: {cpu_total:,.0f} CPU-seconds, ~{cpu_total / parallel:,.0f} s on this "
        f"machine ({parallel} at a time, {threads} thread(s) each); ~{gpu_total:,.1f} s on one H100 at an assumed "
        f"{ASSUMED_MFU:.0%} MFU (models this small reach less)"
    )
    comparisons = max(1, streams - 1)
    if pilot is None:
        lines.append(
            "power: no pilot's noise to read (no --pilot, and no results of this job yet); run the ablation (or a "
            "smaller one) once, then plan again to see what Δ it detects"
        )
        return lines
    confidence, final = spec.evaluation.confidence, spec.evaluation.final
    lines.append(
        f"power, from the noise of {pilot_name} ({POWER:.0%} power, {confidence:.0%} intervals for {comparisons} "
        "variant(s) at once, items as in the pilot):"
    )
    lines += power_lines(pilot_noise(pilot, final, confidence), len(spec.seeds), comparisons, confidence, delta)
    if delta is not None:
        lines.append(
            "  tokens: how Δ grows with the budget is not read from one pilot; run the pilot at two budgets to see it"
        )
    return lines
