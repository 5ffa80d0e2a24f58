"""A Ray cluster of `ray start` nodes on this machine, as a user starts one, for benchmarks and fault tests.

The head and each node added get ports of their own, every one chosen here: two raylets on one machine that let Ray
pick may take the same agent port, which kills one of them (ray#18053). Everything is stopped by its own processes
(those whose command line names the cluster's temporary folder, and their descendants: Ray's agents rename
themselves), never by `ray stop`, which would end every Ray cluster on the machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_NODE_PORTS = ("node-manager", "object-manager", "dashboard-agent-grpc", "dashboard-agent-listen", "metrics-export",
               "runtime-env-agent")  # fmt: skip
_WORKER_PORTS = 8  # worker processes a node may start


def _free_ports(count: int) -> list[int]:
    probes = [socket.socket() for _ in range(count)]
    for probe in probes:
        probe.bind(("127.0.0.1", 0))
    ports = [probe.getsockname()[1] for probe in probes]
    for probe in probes:
        probe.close()
    return ports


def _own_ports() -> tuple[list[str], int]:
    """`ray start` options giving a node ports of its own, and its node manager's port (what names the node)."""
    ports = _free_ports(len(_NODE_PORTS) + _WORKER_PORTS)
    options = [f"--{name}-port={number}" for name, number in zip(_NODE_PORTS, ports, strict=False)]
    options.append(f"--worker-port-list={','.join(map(str, ports[len(_NODE_PORTS) :]))}")
    return options, ports[0]


def _ray_start(arguments: list[str], env: dict) -> None:
    ray = str(Path(sys.executable).with_name("ray"))
    done = subprocess.run([ray, "start", *arguments, "--disable-usage-stats"], capture_output=True, text=True, env=env,
                          timeout=180)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"ray start {' '.join(arguments)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def process_table() -> tuple[dict[int, list[int]], dict[int, float], dict[int, str]]:
    """(children of each process, CPU seconds of each, command line of each) of every process on the machine."""
    children: dict[int, list[int]] = {}
    cpu, commands = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid = int(stat.parent.name)
            fields = stat.read_text().rsplit(")", 1)[1].split()
            commands[pid] = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        children.setdefault(int(fields[1]), []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return children, cpu, commands


def with_descendants(roots: list[int], children: dict[int, list[int]]) -> set[int]:
    found, pending = set(), list(roots)
    while pending:
        pid = pending.pop()
        if pid not in found:
            found.add(pid)
            pending.extend(children.get(pid, []))
    return found


def _kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


class StartedRayCluster:
    """A head started with `ray start` (`cpus` CPUs, `extra` more options); `add_node` starts more nodes and
    `stop_node` SIGKILLs one with its workers; `env` points a job at the cluster."""

    def __init__(self, cpus: int = 1, extra: tuple[str, ...] = ()):
        self.cpus, self.extra = cpus, extra
        self.nodes: list[int] = []  # node manager port of each node added

    def __enter__(self) -> StartedRayCluster:
        self.temp = tempfile.mkdtemp(prefix="corpus-ray-")
        (port,) = _free_ports(1)
        own, _ = _own_ports()
        env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
        arguments = ["--head", f"--port={port}", f"--num-cpus={self.cpus}", "--include-dashboard=false", *own]
        _ray_start([*arguments, *self.extra, f"--temp-dir={self.temp}"], env)
        self.address = f"127.0.0.1:{port}"
        # a second node, and a driver of a cluster with one, needs the token `ray start` made
        self.env = dict(env, RAY_ADDRESS=self.address, RAY_AUTH_MODE="token")
        return self

    def add_node(self, cpus: int = 1) -> int:
        """Start a worker node of `cpus` CPUs; returns its node manager's port, which names it for `stop_node`."""
        own, node_port = _own_ports()
        _ray_start([f"--address={self.address}", f"--num-cpus={cpus}", *own, f"--temp-dir={self.temp}"], self.env)
        self.nodes.append(node_port)
        return node_port

    def stop_node(self, node_port: int) -> int:
        """SIGKILL a node added by `add_node`: its raylet and every process under it (its workers and agents), as a
        machine lost would. Returns how many processes were killed."""
        children, _, commands = process_table()
        named = f"--node_manager_port={node_port} "
        raylets = [
            pid for pid, command in commands.items() if "raylet" in command.split(" ", 1)[0] and named in command
        ]
        doomed = with_descendants(raylets, children)
        _kill(doomed)
        return len(doomed)

    def settle(self, quiet_share: float = 0.02, limit_s: float = 120) -> None:
        """Wait until the cluster's own processes use under `quiet_share` of a core: `ray start` returns, and a
        first job ends, while its agents still boot on the task's core, which would bill a measured run."""
        started = time.perf_counter()
        before = self._cpu_seconds()
        while time.perf_counter() - started < limit_s:
            time.sleep(2)
            now = self._cpu_seconds()
            if now - before < quiet_share * 2:
                return
            before = now

    def _cpu_seconds(self) -> float:
        _, cpu, _ = process_table()
        return sum(cpu.get(pid, 0.0) for pid in self.processes())

    def processes(self) -> set[int]:
        """The cluster's processes: those whose command line names its temporary folder, and their descendants."""
        children, _, commands = process_table()
        return with_descendants([pid for pid, command in commands.items() if self.temp in command], children)

    def __exit__(self, *exc) -> None:
        _kill(self.processes())
        time.sleep(1)
        subprocess.run(["rm", "-rf", self.temp], check=False)
