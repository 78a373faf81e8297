"""Real processes for the node, replication and controller tests: a controller and state nodes started
with `python -m statestore.cli`, a primary in the test process (engine store + checkpoint location),
digests of stores, and bounded polling. Holds no tests of its own."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from statestore import auth
from statestore.checkpoint_location import CheckpointLocation
from statestore.errors import StateStoreError
from statestore.options import StoreOptions
from statestore.rpc import common_pb2, control_pb2, control_pb2_grpc, replication_pb2, replication_pb2_grpc
from statestore.store import VersionedStore
from statestore.waiting import wait_for

PROJECT_ROOT = Path(__file__).resolve().parent.parent
HEARTBEAT = 0.1


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(condition: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll `condition` until it returns a truthy value; fail the test after `timeout` seconds."""
    try:
        return wait_for(condition, timeout, what, 0.05)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None


def statestore_command(*args: str) -> list[str]:
    """The command line of `statestore ARGS` with this interpreter."""
    return [sys.executable, "-m", "statestore.cli", *args]


def is_serving(address: str) -> bool:
    """Whether the gRPC health check at `address` answers SERVING."""
    with auth.channel(address) as channel:  # over TLS when this process has TLS files (statestore.tls)
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=0.5)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


@dataclass
class Process:
    """A started process, its log file and how to start it again."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill9(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=10)

    def terminate(self, timeout: float = 10.0) -> int | None:
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        return self.popen.returncode


class FakeClock:
    """A clock for Membership that moves only when a test sets `now`."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Cluster:
    """A controller and named state nodes on loopback, every process cleaned up by `close`."""

    root: Path
    q: int = 1
    dead_after: float = 5.0
    forget_after: float = 60.0
    rereplication_delay: float = 0.0  # most tests watch replication itself, not its wait after a loss
    controller_address: str = ""
    processes: dict[str, Process] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)

    def start_controller(self) -> None:
        self.controller_address = f"127.0.0.1:{free_port()}"
        argv = statestore_command(
            "controller",
            "--listen",
            self.controller_address,
            "-q",
            str(self.q),
            "--dead-after",
            str(self.dead_after),
            "--forget-after",
            str(self.forget_after),
            "--rereplication-delay",
            str(self.rereplication_delay),
            "--heartbeat-interval",
            str(HEARTBEAT),
        )
        self._start(Process("controller", argv, self.root / "controller.log"), self.controller_address)

    def start_node(self, name: str, *extra: str) -> str:
        address = self.addresses.get(name) or f"127.0.0.1:{free_port()}"
        self.addresses[name] = address
        argv = statestore_command(
            "node",
            "--listen",
            address,
            "--data-dir",
            str(self.data_dir(name)),
            "--controller",
            self.controller_address,
            "--node-id",
            name,
            "--heartbeat-interval",
            str(HEARTBEAT),
            "--retry-max-backoff",
            "0.2",
            "--log-level",
            "DEBUG",
            *extra,
        )
        self._start(Process(name, argv, self.root / f"{name}.log"), address)
        return address

    def data_dir(self, name: str) -> Path:
        return self.root / f"{name}-data"

    def _start(self, process: Process, address: str) -> None:
        self.processes[process.name] = process
        process.start()
        wait_until(lambda: is_serving(address) or process.popen.poll() is not None, 20, f"{process.name} serving")
        assert process.popen.poll() is None, f"{process.name} exited:\n{process.log()}"

    def status(self) -> control_pb2.StatusReply:
        with auth.channel(self.controller_address) as channel:
            return control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=5)

    def held(self, node: str, store_id: str) -> int | None:
        """The version of `store_id` that `node` holds according to the controller's status."""
        for partition in self.status().partitions:
            if partition.store.store_id == store_id:
                for replica in partition.replicas:
                    if replica.node_id == node:
                        return replica.version_held
        return None

    def wait_groups(self, expected_live: int) -> None:
        wait_until(lambda: sum(n.alive for n in self.status().nodes) == expected_live, 20, "nodes alive")

    def close(self) -> None:
        for process in reversed(list(self.processes.values())):
            process.kill9()

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{p.log()[-4000:]}" for name, p in self.processes.items())


@contextlib.contextmanager
def running_cluster(
    root: Path,
    names: tuple[str, ...],
    q: int,
    dead_after: float = 5.0,
    forget_after: float = 60.0,
    extra: dict[str, tuple[str, ...]] | None = None,
) -> Iterator[Cluster]:
    """A controller and the named nodes (`extra`: more arguments of some), all registered; their logs are printed
    if the body fails."""
    cluster = Cluster(root, q=q, dead_after=dead_after, forget_after=forget_after)
    try:
        cluster.start_controller()
        for name in names:
            cluster.start_node(name, *(extra or {}).get(name, ()))
        cluster.wait_groups(len(names))
        yield cluster
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.close()


class Primary:
    """A primary in the test process: an engine store committing versions to a checkpoint location and
    shipping each increment through its node's Primary.Ship, as the provider's local channel will."""

    def __init__(self, root: Path, store_id: str, node_address: str) -> None:
        self.ref = common_pb2.StoreRef(
            store_id=store_id, checkpoint_dir=str(root / "checkpoint" / store_id.replace("/", "_"))
        )
        self.location = CheckpointLocation(self.ref.checkpoint_dir, store_id)
        self.store = VersionedStore.open(
            root / "primary" / store_id.replace("/", "_"), store_id, StoreOptions(write_buffer_mb=4, block_cache_mb=4)
        )
        self.channel = auth.channel(node_address)
        self.stub = replication_pb2_grpc.PrimaryStub(self.channel)

    def commit(self, version_seed: int) -> bytes:
        """Commit a version of deterministic puts, deletes and merges over two column families."""
        store = self.store
        v = store.version + 1
        if v == 1:
            store.create_column_family("other")
        for i in range(20):
            key = f"k{(v * 7 + i) % 50:03d}".encode()
            if (i + version_seed) % 5 == 0:
                store.delete(key)
            elif i % 3 == 0:
                store.merge(key, f"+{v}".encode())
            else:
                store.put(key, f"v{v}-{i}".encode() * (1 + i % 4))
        store.put(f"o{v % 13}".encode(), str(v).encode(), "other")
        self.location.commit(store)
        return self.location.increment_path(v).read_bytes()

    def ship(self, data: bytes, sync: bool = False, rewrites_history: bool = False) -> replication_pb2.ShipResult:
        blob = common_pb2.IncrementBlob(
            store=self.ref,
            version=self.store.version,
            base_version=self.store.version - 1,
            data=data,
            rewrites_history=rewrites_history,
        )
        return self.stub.Ship(
            replication_pb2.ShipCommand(increment=blob, sync=sync, sync_timeout_seconds=10), timeout=15
        )

    def release(self) -> bool:
        """Unload the partition, as the provider's close(): its node stops being the primary."""
        return self.stub.Release(self.ref, timeout=5).was_primary

    def move_to(self, node_address: str) -> None:
        """Ship through another node from now on, as when Spark runs the partition's task on another executor."""
        self.channel.close()
        self.channel = auth.channel(node_address)
        self.stub = replication_pb2_grpc.PrimaryStub(self.channel)

    def commit_and_ship(self, count: int, sync: bool = False) -> list[replication_pb2.ShipResult]:
        return [self.ship(self.commit(i), sync) for i in range(count)]

    def roll_back(self, version: int) -> None:
        """Reload `version` from the checkpoint location, as Spark does before re-running a batch."""
        path = self.store.path
        self.store.close()
        self.store = self.location.restore(path, version, StoreOptions(write_buffer_mb=4, block_cache_mb=4))

    def digest(self) -> dict[str, str]:
        return {cf: _digest_pairs(self.store.items(cf)) for cf in self.store.column_families()}

    def close(self) -> None:
        self.channel.close()
        self.store.close()


def _digest_pairs(pairs: Any) -> str:
    digest = hashlib.sha256()
    for key, value in pairs:
        digest.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
    return digest.hexdigest()


def replica_dir(data_dir: Path, store_id: str, checkpoint_dir: str | None = None) -> Path:
    """The directory of a node's replica of `store_id` (of that checkpoint location, if given), found by the
    `store.json` the node writes beside each replica (docs/node.md)."""
    found = []
    for ref_file in sorted((data_dir / "replicas").glob("*/store.json")):
        ref = json.loads(ref_file.read_text())
        if ref["store_id"] == store_id and checkpoint_dir in (None, ref["checkpoint_dir"]):
            found.append(ref_file.parent)
    assert len(found) == 1, f"{len(found)} replicas of {store_id} ({checkpoint_dir}) in {data_dir}: {found}"
    return found[0]


def replica_digest(data_dir: Path, store_id: str, checkpoint_dir: str | None = None) -> tuple[int, dict[str, str]]:
    """(version, digest per user column family) of a node's replica, read-only while the node runs."""
    path = replica_dir(data_dir, store_id, checkpoint_dir) / "db"
    options = StoreOptions(write_buffer_mb=1, block_cache_mb=1)

    def read() -> tuple[int, dict[str, str]] | None:
        try:
            with VersionedStore.open(path, store_id, options, read_only=True) as store:
                return store.version, {cf: _digest_pairs(store.items(cf)) for cf in store.column_families()}
        except StateStoreError as exc:
            # A read-only open reads the MANIFEST, then opens the files it lists: a compaction the node finishes
            # in between (one follows the release of a replica's undo-record snapshot) has deleted one of them.
            if "No such file or directory" in str(exc):
                return None
            raise

    return wait_for(read, 10, f"a read-only open of {path} between the node's compactions", interval=0.05)


def pid_of(process: Process) -> int:
    assert process.popen is not None
    return process.popen.pid


def send_stop(process: Process) -> None:
    os.kill(pid_of(process), signal.SIGSTOP)


def send_cont(process: Process) -> None:
    os.kill(pid_of(process), signal.SIGCONT)
