"""Stops the processes of a run's own local Ray cluster when the run's process dies without stopping them.

A driver killed outright (`kill -9`, the OOM killer) leaves its local cluster's agents running (Ray's
DashboardAgent and RuntimeEnvAgent, ~225 MB): the raylet and GCS die with it, their children do not. `watch`
starts this file as a process of its own session, which notes the driver's descendants that are Ray's every second
and, once the driver is gone, kills the ones still running (each checked by its start time, so that a reused
process id is never hit). A driver that stops Ray itself leaves nothing to kill; the watcher then exits with it.

    python -P corpus/engine/ray_reaper.py DRIVER_PID
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 1.0


def running_processes() -> dict[int, tuple[int, str]]:
    """Every process: its parent and its start time (field 22 of /proc/PID/stat)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
        found[int(entry.name)] = (int(fields[1]), fields[19])
    return found


def _is_ray(pid: int) -> bool:
    """A process of Ray's: a worker or agent (`ray::...`) or one of its programs (raylet, gcs_server...)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return command.startswith(b"ray::") or b"/ray/" in command


def ray_descendants(root: int, processes: dict[int, tuple[int, str]]) -> dict[int, str]:
    """Ray's processes below `root` (children, their children...), with their start times; never this one."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    found, stack = {}, list(children.get(root, []))
    while stack:
        pid = stack.pop()
        if pid != os.getpid() and _is_ray(pid):
            found[pid] = processes[pid][1]
        stack += children.get(pid, [])
    return found


def reap(driver: int) -> None:
    """Note `driver`'s Ray descendants until it exits; then kill those still running as they were noted."""
    noted: dict[int, str] = {}
    while True:
        processes = running_processes()
        if driver not in processes:
            break
        noted |= ray_descendants(driver, processes)
        time.sleep(POLL_S)
    processes = running_processes()
    for pid, started in noted.items():
        if pid in processes and processes[pid][1] == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def watch(driver: int) -> None:
    """Start a watcher of `driver`'s local Ray cluster, in a session of its own (a Ctrl-C to the run's process
    group leaves it to do its work). Linux only: elsewhere nothing is started."""
    if not Path("/proc/self/stat").exists():
        return
    subprocess.Popen(
        [sys.executable, "-P", __file__, str(driver)],  # the file alone (stdlib only); -P: not its folder on the path
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


if __name__ == "__main__":
    reap(int(sys.argv[1]))
