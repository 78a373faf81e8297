"""What the fault suite works with: a Spark session on our provider whose executors, state nodes and controller
read one faults file, a fault proxy between the nodes and the controller, and the processes it disturbs
(executor JVMs and state-node sidecars on this machine, found in /proc and signalled for real).

The nodes reach the controller through a proxy (`statestore.faults.link_faults`) the controller puts in front
of its port: the session's `controller` conf names the proxy. The suite itself asks the controller directly, so
a cut link does not blind it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_provider import local_cluster
from spark_provider.fault_suite.suite_query import SuiteQuery
from statestore import auth
from statestore.controller.client import ControlClient
from statestore.rpc import control_pb2, control_pb2_grpc
from statestore.waiting import wait_for

FAULTS_KEY = "spark.sql.streaming.stateStore.statestore.faultsFile"
SECRET_KEY = "spark.sql.streaming.stateStore.statestore.secret"
FAULTS_ENV = "STATESTORE_FAULTS_FILE"
LINK_FAULTS_ENV = "STATESTORE_LINK_FAULTS_FILE"
EXECUTORS = 3
# Spark's own settings for the suite's session: a small shuffle, no UI, maintenance every 2 s (an executor a
# partition moved away from unloads it soon, as in a long-running query).
SPARK_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
    "spark.executor.memory": "1g",
    "spark.dynamicAllocation.enabled": "false",
    "spark.sql.streaming.stateStore.maintenanceInterval": "2s",
    # The recomputation reads which files each batch took from the offset log: keep all of it (Spark keeps 100).
    "spark.sql.streaming.minBatchesToRetain": "100000",
    # Every batch's progress (load sources): a random schedule's settling may run hundreds (Spark keeps 100).
    "spark.sql.streaming.numRecentProgressUpdates": "100000",
}


def links_file(faults_file: Path) -> Path:
    """The file the nodes' inbound fault proxies follow, beside the faults file."""
    return faults_file.with_name(faults_file.name + ".links")


def controller_links_file(faults_file: Path) -> Path:
    """The file the controller's inbound fault proxy follows, beside the faults file (the driver's side of the
    plugin hands it to the controller it starts)."""
    return faults_file.with_name(faults_file.name + ".controller-links")


class ControllerLink:
    """The link from every node to the controller: the fault the controller's inbound proxy applies."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def set(self, kind: str, millis: int = 0, every: int = 1) -> None:
        """Apply `kind` (`pass`, `cut`, `delay` with `millis`, `corrupt` every `every` messages) from now on."""
        number = millis if kind == "delay" else (every if kind == "corrupt" else 0)
        staging = self._path.with_name(self._path.name + ".tmp")
        staging.write_text(f"{kind} {number}\n" if number else f"{kind}\n")
        staging.replace(self._path)

    def stop(self) -> None:
        """Let everything through again."""
        self.set("pass")


def start_session(master: str, root: Path, faults_file: Path, app: str, **settings: object) -> tuple[Any, str]:
    """A session on our provider (q=1 unless `settings` say otherwise) whose processes read `faults_file`, with
    a fault proxy between its nodes and its controller. Returns the session and the controller's own address."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_provider

    builder = SparkSession.builder.master(master).appName(app)
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    builder = builder.config(f"spark.executorEnv.{FAULTS_ENV}", str(faults_file))
    # Every node puts a proxy in front of its port that follows this file (statestore.faults.link_faults); so does
    # the controller the driver's JVM starts, following the file beside the faults file: the nodes reach it through
    # that proxy (the session's controller conf names it) and the suite reaches it directly, on a port of its own.
    builder = builder.config(f"spark.executorEnv.{LINK_FAULTS_ENV}", str(links_file(faults_file)))
    port = _free_port()
    settings = {
        "replication_factor": 1, "local_dir": str(root / "local"), "faults_file": str(faults_file),
        "controller_port": port, **settings,
    }  # fmt: skip
    builder = spark_provider.enable(builder, **settings)
    controller = f"127.0.0.1:{port}"
    auth.remember(controller, builder._options[SECRET_KEY])
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark._statestore_fault_proxy = ControllerLink(controller_links_file(faults_file))
    return spark, controller


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Rig:
    """The running session and the levers of the suite's scenarios."""

    spark: Any
    root: Path
    faults_file: Path
    controller: str
    pause_seconds: float = 6.0
    q: int = 1  # the session's replication factor
    executors: int = EXECUTORS  # executor JVMs the session's master runs (a killed one is restarted)
    _stopped_since: dict[int, float] = field(default_factory=dict)
    _mounts: list[Path] = field(default_factory=list)
    # Operations (move, drain, rebalance) the current scenario started: the suite judges how each ended.
    operations: list[int] = field(default_factory=list)

    @property
    def proxy(self) -> ControllerLink:
        return self.spark._statestore_fault_proxy

    @property
    def local_dir(self) -> Path:
        return self.root / "local"

    # ------------------------------------------------------------------ faults file
    def arm(self, *lines: str) -> None:
        """Arm fault points (`<point> <action> [millis] [partition]` lines), one shot each."""
        staging = self.faults_file.with_name(self.faults_file.name + ".arming")
        staging.write_text("".join(f"{line}\n" for line in lines))
        staging.replace(self.faults_file)

    def armed(self) -> bool:
        """Whether an armed line has not fired yet."""
        return self.faults_file.exists() and bool(self.faults_file.read_text().strip())

    def set_links(self, line: str) -> None:
        """The fault every node's inbound link applies from now on (`cut`, `delay 300`, `pass`...)."""
        path = links_file(self.faults_file)
        staging = path.with_name(path.name + ".tmp")
        staging.write_text(line + "\n")
        staging.replace(path)

    def disarm(self) -> None:
        self.operations.clear()
        with contextlib.suppress(FileNotFoundError):
            self.faults_file.unlink()

    # ------------------------------------------------------------------ the controller's view
    def status(self) -> control_pb2.StatusReply:
        with auth.channel(self.controller) as channel:
            return control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=5)

    def partitions(self, query: SuiteQuery) -> list[control_pb2.PartitionStatus]:
        """The controller's records of `query`'s store partitions."""
        mine = str(query.checkpoint.resolve())
        return [p for p in self.status().partitions if p.store.checkpoint_dir.startswith(mine)]

    def primary_of(self, query: SuiteQuery, partition: int) -> str:
        """The node (executor) id of the primary of `query`'s store partition `partition`."""
        for p in self.partitions(query):
            if p.store.store_id.split("/")[1] == str(partition):
                return p.primary_node
        raise LookupError(f"partition {partition} of {query.root.name} has no primary in the controller")

    def replica_holders(self, query: SuiteQuery, partition: int) -> list[str]:
        for p in self.partitions(query):
            if p.store.store_id.split("/")[1] == str(partition):
                return [r.node_id for r in p.replicas]
        return []

    def busiest(self, query: SuiteQuery) -> str:
        """The node (executor) id primary of most of `query`'s partitions."""
        counts: dict[str, int] = {}
        for p in self.partitions(query):
            counts[p.primary_node] = counts.get(p.primary_node, 0) + 1
        return max(sorted(counts), key=lambda n: counts[n])

    def converged(self, query: SuiteQuery) -> bool:
        """Whether each of `query`'s partitions has its q replicas at its primary's version."""
        parts = self.partitions(query)
        return bool(parts) and all(
            len(p.replicas) >= self.q and all(r.version_held == p.primary_version for r in p.replicas) for p in parts
        )

    def alive_nodes(self) -> set[str]:
        return {n.node.node_id for n in self.status().nodes if n.alive}

    # ------------------------------------------------------------------ operations
    def move(self, query: SuiteQuery, partition: int, executor: str, strategy: str = "batched") -> int:
        """Start moving `query`'s task partition `partition` to `executor` (not waited for); its operation id."""
        with ControlClient(self.controller) as client:
            status = client.move({str(partition): executor}, strategy, str(query.checkpoint))
        self.operations.append(status.operation_id)
        return status.operation_id

    def operation(self, operation_id: int) -> control_pb2.OperationStatus:
        with ControlClient(self.controller) as client:
            return client.operation(operation_id)

    def wait_step(
        self, operation_id: int, steps: tuple[str, ...], timeout: float = 60.0, query: SuiteQuery | None = None
    ) -> str:
        """Wait until a move of the operation is at one of `steps` (or past them all: done); the step reached.
        With `query`, a move steered (waiting for Spark's batch) gets one: a micro-batch is fed. Raises LookupError
        when the operation ended (failed) first, with its reasons."""
        reached: list[str] = []

        def at_step() -> bool:
            status = self.operation(operation_id)
            found = [m.step for m in status.moves if m.step in steps]
            if found:
                reached.append(found[0])
                return True
            if status.state == "failed":
                raise LookupError(f"operation {operation_id} failed before {steps}: {status.error}")
            if status.state == "done":
                reached.append("done")
                return True
            if query is not None and any(m.step == "steered" for m in status.moves):
                query.feed(1)
                query.wait_processed(60)
            return False

        wait_for(at_step, timeout, f"operation {operation_id} at step {' or '.join(steps)}", interval=0.05)
        return reached[0]

    def target_for(self, query: SuiteQuery, partition: int) -> str:
        """A live executor to move `query`'s partition to: one not its primary, holding no replica of it if any
        such (the move then warms a copy up), else any other."""
        primary = self.primary_of(query, partition)
        holders = set(self.replica_holders(query, partition))
        alive = sorted(n for n in self.alive_nodes() if n != primary)
        fresh = [n for n in alive if n not in holders]
        if not (fresh or alive):
            raise LookupError(f"no executor to move partition {partition} to (primary {primary}, alive {alive})")
        return (fresh or alive)[0]

    def executor_log_lines(self, needle: str) -> list[str]:
        """The executors' log lines containing `needle` (local-cluster executors log under pyspark's work
        directory; other masters: none)."""
        import pyspark

        work = Path(pyspark.__file__).parent / "work" / self.spark.sparkContext.applicationId
        lines = []
        for log in sorted(work.glob("*/stderr")):
            with contextlib.suppress(OSError):
                text = log.read_text(errors="replace")
                lines += [f"{log.parent.name}: {line}" for line in text.splitlines() if needle in line]
        return lines

    # ------------------------------------------------------------------ processes
    def kill_executor(self, executor_id: str) -> None:
        local_cluster.kill_executor(executor_id)

    def node_pid(self, node_id: str) -> int:
        pids = local_cluster.sidecar_pids(self.local_dir)
        if node_id not in pids:
            raise LookupError(f"no running state node {node_id} under {self.local_dir} (running: {sorted(pids)})")
        return pids[node_id]

    def kill_node(self, node_id: str, empty: bool = False) -> None:
        """SIGKILL node `node_id`'s sidecar (its executor's provider restarts it at its next commit); `empty`:
        and empty its data directory, as a node restarted on a new disk."""
        pid = self.node_pid(node_id)
        data_dir = local_cluster.sidecar_data_dir(pid)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: local_cluster.gone(pid), 10, f"state node {node_id} (pid {pid}) to die")
        if empty and data_dir is not None:
            for entry in data_dir.iterdir():
                if entry.name != "node.log":
                    _remove(entry)

    def fill_disk(self, node_id: str, size_kib: int = 512, left_kib: int = 32) -> Path:
        """Kill node `node_id` and give its data directory a filesystem of its own, `size_kib` KiB, all but
        `left_kib` KiB of it taken by a filler file: the node its executor restarts there runs out of space
        soon (a replica's disk full). Needs root (a tmpfs mount); raises PermissionError naming what failed."""
        pid = self.node_pid(node_id)
        data_dir = local_cluster.sidecar_data_dir(pid)
        if data_dir is None:
            raise LookupError(f"state node {node_id} exited before its disk could be filled")
        self.kill_node(node_id, empty=True)
        _remove(data_dir / "node.log")
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(data_dir)], capture_output=True, text=True
        )
        if mounted.returncode != 0:
            raise PermissionError(f"cannot mount a small filesystem on {data_dir}: {mounted.stderr.strip()}")
        self._mounts.append(data_dir)
        (data_dir / "filler").write_bytes(b"\0" * ((size_kib - left_kib) * 1024))
        return data_dir

    def disk_full_hit(self) -> bool:
        """Whether a node on a filled disk (`fill_disk`) ran out of space: its log says so, or it wrote all but
        the last 8 KiB of what was left."""
        for data_dir in self._mounts:
            log = data_dir / "node.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            if "No space left" in text or "ENOSPC" in text or "Errno 28" in text:
                return True
            with contextlib.suppress(OSError):
                stats = os.statvfs(data_dir)
                if stats.f_bavail * stats.f_frsize < 8 * 1024:
                    return True
        return False

    def release_disks(self) -> None:
        """Undo `fill_disk`: kill the nodes on the small filesystems, unmount them (their executors restart
        their nodes on the real disk)."""
        while self._mounts:
            data_dir = self._mounts.pop()
            for node_id, pid in local_cluster.sidecar_pids(self.local_dir).items():
                if local_cluster.sidecar_data_dir(pid) == data_dir:
                    with contextlib.suppress(LookupError, TimeoutError, ProcessLookupError):
                        self.kill_node(node_id)
            subprocess.run(["umount", "-l", str(data_dir)], capture_output=True)

    def resume_paused(self, older_than: float) -> list[int]:
        """SIGCONT every stopped executor JVM and sidecar stopped for `older_than` seconds or more (a `pause`
        fault stands for a long GC pause or a frozen VM, not a dead process)."""
        now = time.monotonic()
        resumed = []
        pids = set(local_cluster.executor_pids().values()) | set(local_cluster.sidecar_pids(self.local_dir).values())
        for pid in pids:
            if not local_cluster.stopped(pid):
                self._stopped_since.pop(pid, None)
                continue
            since = self._stopped_since.setdefault(pid, now)
            if now - since >= older_than:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                self._stopped_since.pop(pid, None)
                resumed.append(pid)
        return resumed

    @contextlib.contextmanager
    def resuming_paused(self) -> Iterator[None]:
        """While inside: resume paused processes after `pause_seconds`, in the background."""
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(0.25):
                self.resume_paused(self.pause_seconds)

        thread = threading.Thread(target=run, name="faults-resume", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(5)

    def settle(self, timeout: float = 180.0) -> None:
        """Back to a healthy cluster between scenarios: nothing armed, nothing paused, no small disk, the proxies
        passing, `executors` executor JVMs running and every running node alive in the controller's eyes."""
        self.disarm()
        self.proxy.set("pass")
        self.set_links("pass")
        self.resume_paused(0)
        self.release_disks()
        wanted = self.executors
        wait_for(lambda: len(local_cluster.executor_pids()) >= wanted, timeout, f"{wanted} executors running")
        # Every running node alive in the controller's eyes (a node killed and not restarted yet comes back at its
        # executor's next commit: a new executor's node starts with the executor).
        wait_for(
            lambda: set(local_cluster.sidecar_pids(self.local_dir)) <= self.alive_nodes(),
            timeout,
            "every running state node alive in the controller's eyes",
        )

    def keep_logs(self, into: Path) -> list[Path]:
        """Copy every state node's log under the session's local directory, and the controller's when
        STATESTORE_CONTROLLER_LOG names it, into `into` (a run's evidence outlives its executors); the copies."""
        import shutil

        into.mkdir(parents=True, exist_ok=True)
        logs = sorted(self.local_dir.rglob("node.log"))
        controller_log = os.environ.get("STATESTORE_CONTROLLER_LOG")
        if controller_log:
            logs.append(Path(controller_log))
        kept = []
        for number, log in enumerate(logs):
            with contextlib.suppress(OSError):
                kept.append(Path(shutil.copy(log, into / f"{number:02d}-{log.parent.name}-{log.name}")))
        return kept

    def stop(self) -> None:
        self.release_disks()
        self.disarm()
        self.set_links("pass")
        self.resume_paused(0)
        self.proxy.stop()
        self.spark.stop()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        import shutil

        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
