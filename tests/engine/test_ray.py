"""The job on Ray: killed and resumed, and spread over a two-node cluster, always with the clean run's output."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from support import REPO, sample_in_two_shards, write_job

from corpus.config.job import load_job
from corpus.engine import run_job

pytestmark = pytest.mark.slow


spec = importlib.util.spec_from_file_location("faults", REPO / "benchmarks" / "faults.py")
faults = importlib.util.module_from_spec(spec)
spec.loader.exec_module(faults)
shard_files = faults.shard_hashes


def test_sigkill_of_the_driver_then_rerun_equals_a_clean_run(clean_run, tmp_path):
    job, clean_stats, clean_out = clean_run
    result = faults.kill_driver(list(job.inputs), tmp_path)
    assert 2 <= result["done_at_kill"] < len(job.inputs), "the kill must land half-way"
    assert result["exit_code"] == 0
    stats = json.loads((result["out"] / "stats.json").read_text())
    assert stats["shards"]["skipped_complete"] >= result["done_at_kill"]
    assert stats["totals"] == clean_stats["totals"]
    assert shard_files(result["out"]) == shard_files(clean_out)  # byte-identical documents
    assert result["leftovers"] == 0  # the killed run's partial files are cleared
    assert result["ray_processes"] > 2 and result["ray_left_running"] == 0  # no Ray agent outlives its driver


def _decisions(out: Path) -> list[tuple]:
    import pyarrow.parquet as pq

    rows = pq.read_table(out / "selection").to_pylist()
    return sorted(
        (r["id"], r["kept"], r["first_failure"], r["duplicate_of"], r["cluster_id"], r["cluster_size"]) for r in rows
    )


def test_two_node_cluster_gives_the_same_documents_and_dedup_clusters(clean_run, tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    job, _, clean_out = clean_run
    small = [s for s in job.inputs if "aut" not in s and "ipwb" not in s]  # keep it quick
    dedup = '[annotate]\nrules = ["gopher_quality"]\n[dedup]\nsteps = ["url", "exact", "minhash"]\npartitions = 4\n'
    sample = sample_in_two_shards(tmp_path)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address)
        two_nodes = load_job(write_job(tmp_path, small, tmp_path / "out"))
        stats = run_job(two_nodes, use_ray=True)
        deduped = run_job(load_job(write_job(tmp_path, sample, tmp_path / "dedup", dedup, "d")), use_ray=True)
    finally:
        ray.shutdown()
        cluster.shutdown()
    one_node = run_job(load_job(write_job(tmp_path, sample, tmp_path / "inline", dedup, "i")), use_ray=False)
    counts = [{k: v for k, v in run["stages"]["dedup"].items() if k != "seconds"} for run in (deduped, one_node)]
    assert counts[0] == counts[1] and counts[0]["dropped"]["minhash_duplicate"] > 0
    assert _decisions(tmp_path / "dedup") == _decisions(tmp_path / "inline")
    assert stats["shards"]["complete"] == len(small) and not stats["failed_shards"]
    assert stats["totals"]["unaccounted"] == 0
    workers = {json.loads(p.read_text())["worker"] for p in (tmp_path / "out" / "shards").glob("*.json")}
    assert len(workers) == 2, f"both nodes should have run shards, got {workers}"
    clean = shard_files(clean_out)
    assert shard_files(tmp_path / "out") == {source: clean[source] for source in small}


def test_a_worker_killed_mid_shard_is_retried_and_the_output_equals_a_clean_run(clean_run, tmp_path):
    job, clean_stats, clean_out = clean_run
    result = faults.kill_worker(list(job.inputs), tmp_path)
    assert result["killed"] is not None, "no shard task was seen running"
    stats = result["stats"]
    assert not stats["failed_shards"] and stats["totals"] == clean_stats["totals"]
    assert shard_files(result["out"]) == shard_files(clean_out)


def test_losing_a_node_mid_job_loses_and_doubles_no_shard(clean_run, tmp_path):
    job, clean_stats, clean_out = clean_run
    result = faults.lose_node(list(job.inputs), tmp_path)
    stats = result["stats"]
    assert len(list((result["out"] / "shards").glob("*.json"))) == len(job.inputs)
    assert stats["shards"]["complete"] == len(job.inputs)
    assert not stats["failed_shards"] and stats["totals"] == clean_stats["totals"]
    assert shard_files(result["out"]) == shard_files(clean_out)  # each shard once, byte for byte


def test_a_worker_node_of_a_started_three_node_cluster_lost_mid_run_loses_and_doubles_no_shard(clean_run, tmp_path):
    """The cluster as a user deploys one: `ray start` on a head and two worker nodes, `corpus run` pointed at it by
    RAY_ADDRESS; one worker node SIGKILLed (raylet, agents, workers) with the run half done."""
    job, clean_stats, clean_out = clean_run
    result = faults.lose_started_node(list(job.inputs), tmp_path)
    assert result["exit_code"] == 0, result["said"]
    assert 2 <= result["done_at_loss"] < len(job.inputs), "the node must be lost half-way"
    assert result["killed"] >= 2  # its raylet and what runs under it
    stats = result["stats"]
    assert stats["runners"] and "3 nodes" in json.dumps(stats["runners"]), stats["runners"]
    assert stats["shards"]["complete"] == len(job.inputs) and not stats["failed_shards"]
    assert stats["totals"] == clean_stats["totals"]
    assert shard_files(result["out"]) == shard_files(clean_out)  # each shard once, byte for byte
    workers = {json.loads(p.read_text())["worker"] for p in (result["out"] / "shards").glob("*.json")}
    assert len(workers) >= 2, f"shards should have run on several nodes, got {workers}"


def test_a_run_without_ray_address_starts_its_own_cluster_not_one_left_on_the_machine(tmp_path):
    """`ray start` leaves a cluster (and its address in Ray's current-cluster file) that a bare `ray.init()` would
    join; a run starts its own local cluster instead, says so first, and the other cluster never sees it."""
    import os
    import subprocess
    import sys

    current = Path("/tmp/ray/ray_current_cluster")  # where `ray start` records the cluster a bare init() joins
    saved = current.read_bytes() if current.exists() else None
    environment = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    try:
        with faults.StartedRayCluster(cpus=1) as other:  # every port its own; stopped by its own processes
            inputs = sample_in_two_shards(tmp_path)
            job = write_job(tmp_path, inputs, tmp_path / "out", annotate={"rules": ["gopher_quality"]})
            run = subprocess.run([sys.executable, "-m", "corpus.cli", "run", str(job)], env=environment,
                                 capture_output=True, text=True, timeout=600)  # fmt: skip
            assert run.returncode == 0, run.stderr
            first, second = run.stderr.splitlines()[:2]  # said before Ray's seconds of start-up, then where it runs
            assert first.endswith("starting a local Ray cluster for this run (a few seconds)"), first
            assert second.endswith(f"running on a local Ray cluster of this run's own ({os.cpu_count()} CPUs)"), second
            noise = [line for line in run.stderr.splitlines() if not re.match(r"\[\d\d:\d\d:\d\d\] ", line)]
            assert noise == []  # quiet: only the run's own progress lines, none of Ray's
            check = (
                f"import ray; ray.init(address='{other.address}', log_to_driver=False); print(len(ray.state.jobs()))"
            )
            jobs = subprocess.run([sys.executable, "-c", check], env=other.env, capture_output=True, text=True,
                                  timeout=120)  # fmt: skip
            assert jobs.stdout.strip() == "1", jobs.stderr  # only this check's own driver ever joined it
    finally:
        if saved is None:
            current.unlink(missing_ok=True)
        else:
            current.write_bytes(saved)
