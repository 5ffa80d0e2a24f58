"""The cluster configurations docs/cluster.md gives users: valid for Ray's launcher, agreeing with each other and
with the soak's sizing, and pointing at a job file that loads."""

from __future__ import annotations

import copy
import re
import shlex

import pytest
import yaml
from support import REPO

from corpus.config.job import load_job

LAUNCHER = REPO / "docs" / "cluster" / "ray-cluster.yaml"
RAYJOB = REPO / "docs" / "cluster" / "rayjob.yaml"
TASK_MEMORY_GIB = 2.0  # what a task holds at most with its extractor process (benchmarks/soak.py, docs/cluster.md)


def _gib(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Gi|Mi)", quantity).groups()
    return int(number) / (1 if unit == "Gi" else 1024)


def _start_options(command: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in shlex.split(command) if part.startswith("--") and "=" in part)


def test_the_launcher_config_passes_rays_own_schema_and_a_typo_would_not():
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load(LAUNCHER.read_text())
    validate_config(prepare_config(copy.deepcopy(config)))
    misspelt = copy.deepcopy(config)
    misspelt["available_node_types"]["worker"]["max_wrkers"] = 4
    with pytest.raises(Exception, match="max_wrkers"):
        validate_config(prepare_config(misspelt))
    assert config["available_node_types"]["head"]["resources"] == {"CPU": 0}  # no task beside the driver
    starts = [*config["head_start_ray_commands"], *config["worker_start_ray_commands"]]
    assert all("RAY_AUTH_MODE=token" in command for command in starts if "ray start" in command)
    assert "~/.ray/auth_token" in config["file_mounts"]


def test_the_rayjob_runs_a_job_file_that_loads_and_sizes_pods_as_the_launcher_does():
    launcher = yaml.safe_load(LAUNCHER.read_text())
    rayjob = yaml.safe_load(RAYJOB.read_text())
    assert (rayjob["apiVersion"], rayjob["kind"]) == ("ray.io/v1", "RayJob")
    program, command, job_file = rayjob["spec"]["entrypoint"].split()
    assert (program, command) == ("corpus", "run")
    job = load_job(REPO / job_file)
    assert job.ray.num_cpus_per_task == 1 and job.output.startswith("s3://")
    cluster = rayjob["spec"]["rayClusterSpec"]
    assert cluster["authOptions"] == {"mode": "token"}
    worker_start = next(c for c in launcher["worker_start_ray_commands"] if "ray start" in c)
    store = _start_options(worker_start)["--object-store-memory"]
    assert cluster["headGroupSpec"]["rayStartParams"]["object-store-memory"] == store
    for group in cluster["workerGroupSpecs"]:
        assert group["rayStartParams"]["object-store-memory"] == store
        (container,) = group["template"]["spec"]["containers"]
        cpus = int(container["resources"]["requests"]["cpu"])
        memory = _gib(container["resources"]["limits"]["memory"])
        assert container["resources"]["requests"] == container["resources"]["limits"]  # guaranteed, never evicted
        assert memory >= cpus * TASK_MEMORY_GIB * 1.25 + int(store) / 2**30, (cpus, memory)
        spill = group["rayStartParams"]["object-spilling-directory"]
        assert spill in {mount["mountPath"] for mount in container["volumeMounts"]}
