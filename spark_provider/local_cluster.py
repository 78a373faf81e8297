"""Spark's executor JVMs on this machine (`local-cluster` or a standalone worker here): found by their command
line, killed with a real SIGKILL. For the demo, the failover benchmark and the tests."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

_EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def _argv(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return None
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0")]


def executors_of(master: str, default: int = 3) -> int:
    """How many executors `master` starts: N of `local-cluster[N,cores,memory]`, else `default`."""
    found = re.fullmatch(r"local-cluster\[(\d+),\s*\d+,\s*\d+\]", master.strip())
    return int(found.group(1)) if found else default


def executor_pids(app_id: str | None = None) -> dict[str, int]:
    """Executor id -> pid of every running executor JVM on this machine, of Spark application `app_id` only when
    given (executor ids repeat across applications: another one's executor "1" is not this one's)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = _argv(int(entry.name))
        if not argv or _EXECUTOR_MAIN not in argv or "--executor-id" not in argv:
            continue
        if app_id is not None and ("--app-id" not in argv or argv[argv.index("--app-id") + 1] != app_id):
            continue
        found[argv[argv.index("--executor-id") + 1]] = int(entry.name)
    return found


def kill_executor(executor_id: str, timeout: float = 10.0, app_id: str | None = None) -> int:
    """SIGKILL the JVM of executor `executor_id` (of application `app_id` when given), wait until it is gone,
    and return its pid."""
    pid = executor_pids(app_id)[executor_id]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while _argv(pid) is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"executor {executor_id} (pid {pid}) still runs {timeout}s after SIGKILL")
        time.sleep(0.02)
    return pid


def children_of(pid: int) -> list[int]:
    """The pids of the running processes whose parent is `pid` (an executor JVM's state-node sidecar)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry.name}/status").read_text()
        except OSError:
            continue
        ppid = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), None)
        if ppid == str(pid) and not gone(int(entry.name)):
            found.append(int(entry.name))
    return found


def kill_executor_and_node(executor_id: str, timeout: float = 10.0, app_id: str | None = None) -> int:
    """SIGKILL executor `executor_id`'s JVM and, at once, its state node (a host lost whole, disk and all: a node
    left running for the moment it takes to notice its JVM gone still writes to the host's directories); wait until
    both are gone and return the JVM's pid."""
    pid = executor_pids(app_id)[executor_id]
    children = children_of(pid)
    for victim in (pid, *children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while not all(gone(victim) for victim in (pid, *children)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"executor {executor_id} (pid {pid}) or its node still runs {timeout}s after SIGKILL")
        time.sleep(0.02)
    return pid


def sidecar_pids(local_dir: Path) -> dict[str, int]:
    """Node id -> pid of each running state-node sidecar whose data dir is under the provider's `local_dir`
    (`<local_dir>/<jvm dir>/node-<id>`), found by its `--data-dir` (its socket may be elsewhere)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = _argv(int(entry.name))
        if argv is None or "--local-socket" not in argv or "--data-dir" not in argv:
            continue
        data_dir = Path(argv[argv.index("--data-dir") + 1])
        if data_dir.parent.parent == local_dir and data_dir.name.startswith("node-"):
            found[data_dir.name.removeprefix("node-")] = int(entry.name)
    return found


def sidecar_data_dir(pid: int) -> Path | None:
    """The `--data-dir` of sidecar `pid`, or None when it is gone."""
    argv = _argv(pid)
    if argv is None or "--data-dir" not in argv:
        return None
    return Path(argv[argv.index("--data-dir") + 1])


def stopped(pid: int) -> bool:
    """Whether process `pid` is stopped (SIGSTOP: a `pause` fault point fired in it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def gone(pid: int) -> bool:
    """Whether process `pid` has exited (or is a zombie)."""
    return _argv(pid) is None
