"""What an application's processes use, sampled from /proc: peak resident memory per role and CPU seconds.

The benchmarks run Spark from this Python process, so every process of the application descends from it: the
driver's JVM (py4j's gateway), the executors' JVMs (`local-cluster`: children of the driver's JVM), the state nodes
(children of their executors) and Python workers. Each is given a role from its command line; the controller runs
in this process (`spark_provider.enable`), so its memory is counted under `driver_python` with the benchmark's own.
A process seen once keeps its last CPU reading after it exits, so a killed executor's CPU still counts.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")

ROLES = ("driver_python", "driver_jvm", "executor", "node", "python_worker", "other")


def role_of(pid: int, cmdline: str) -> str:
    """The role of process `pid` in a benchmark's application, from its command line."""
    if pid == os.getpid():
        return "driver_python"
    if "CoarseGrainedExecutorBackend" in cmdline:
        return "executor"
    if "statestore.cli node" in cmdline:
        return "node"
    if "SparkSubmit" in cmdline or ("py4j" in cmdline and "java" in cmdline):
        return "driver_jvm"
    if "pyspark.daemon" in cmdline or "pyspark.worker" in cmdline:
        return "python_worker"
    return "other"


def _read(pid: int) -> tuple[str, int, float, int] | None:
    """(command line, resident bytes, CPU seconds, parent pid) of `pid`, None if it is gone."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        statm = Path(f"/proc/{pid}/statm").read_text().split()
    except (OSError, IndexError):
        return None
    return cmdline, int(statm[1]) * _PAGE, (int(stat[11]) + int(stat[12])) / _TICKS, int(stat[1])


_OPEN_FILES_ROLES = ("node", "executor")


def _open_files(pid: int) -> int:
    """File descriptors `pid` has open (0 if it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


@dataclass
class Usage:
    """Peak resident memory per role (the largest single process of that role, and the largest sum over the
    role's processes at one sample), peak open files of one node or executor, and CPU seconds per role, between
    `start` and `stop`."""

    peak_process_mb: dict[str, float] = field(default_factory=dict)
    peak_total_mb: dict[str, float] = field(default_factory=dict)
    # The most file descriptors one process of the role had open at a sample (state nodes and executors).
    peak_open_files: dict[str, int] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    samples: int = 0

    def to_json(self) -> dict[str, object]:
        """The usage as a JSON object, with CPU summed over every role."""
        return {
            "peak_process_mb": self.peak_process_mb,
            "peak_total_mb": self.peak_total_mb,
            "peak_open_files": self.peak_open_files,
            "cpu_s": self.cpu_s,
            "cpu_s_total": sum(self.cpu_s.values()),
            "samples": self.samples,
        }


class ProcessSampler:
    """Samples this process and its descendants every `interval` seconds on a thread of its own."""

    def __init__(self, interval: float = 0.25) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_at_start: dict[int, float] = {}
        self._cpu_last: dict[int, tuple[str, float]] = {}  # pid -> (role, CPU seconds last read)
        self.usage = Usage()

    def start(self) -> ProcessSampler:
        """Begin sampling (CPU counts from now)."""
        self._stop.clear()
        self.usage = Usage()
        self._cpu_last = {}
        self._cpu_at_start = {}
        for pid in _descendants(os.getpid()):
            read = _read(pid)
            if read is not None:
                self._cpu_at_start[pid] = read[2]
        self._thread = threading.Thread(target=self._run, name="process-sampler", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        totals: dict[str, float] = {}
        for pid in _descendants(os.getpid()):
            read = _read(pid)
            if read is None:
                continue
            cmdline, rss, cpu, _ = read
            role = role_of(pid, cmdline)
            mb = rss / (1 << 20)
            totals[role] = totals.get(role, 0.0) + mb
            self.usage.peak_process_mb[role] = max(self.usage.peak_process_mb.get(role, 0.0), mb)
            self._cpu_last[pid] = (role, cpu)
            if role in _OPEN_FILES_ROLES:
                files = _open_files(pid)
                self.usage.peak_open_files[role] = max(self.usage.peak_open_files.get(role, 0), files)
        for role, mb in totals.items():
            self.usage.peak_total_mb[role] = max(self.usage.peak_total_mb.get(role, 0.0), mb)
        self.usage.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def stop(self) -> Usage:
        """Stop sampling; the usage since `start`."""
        self._sample()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        cpu: dict[str, float] = {}
        for pid, (role, seconds) in self._cpu_last.items():
            cpu[role] = cpu.get(role, 0.0) + seconds - self._cpu_at_start.get(pid, 0.0)
        self.usage.cpu_s = {role: round(seconds, 2) for role, seconds in cpu.items()}
        return self.usage
