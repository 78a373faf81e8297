"""The state node process: checks its start-up conditions, serves gRPC, heartbeats, shuts down gracefully."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent import futures
from dataclasses import replace
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from statestore import auth, tls
from statestore.faults import link_faults
from statestore.faults.points import fault_point
from statestore.logs import log_event
from statestore.node.file_replicas import FileReplicas, KeptFile
from statestore.node.increment_log import IncrementLog
from statestore.node.local_channel import (
    MATERIALIZED_OK,
    SOURCE_NAMES,
    Committed,
    Demote,
    FetchFiles,
    FileKept,
    FileRead,
    Incoming,
    Load,
    LocalChannelError,
    LocalChannelServer,
    Materialize,
    Materialized,
    Promote,
    ShipResult,
)
from statestore.node.materialize import Materializer
from statestore.node.membership import Heartbeater
from statestore.node.replica import ReplicaSet
from statestore.node.service import PrimaryService, ReplicationService
from statestore.node.settings import GRPC_MESSAGE_OPTIONS, NodeSettings
from statestore.node.shipper import BatchCost, LoadNote, Shipper
from statestore.rpc import common_pb2, control_pb2, replication_pb2_grpc

_log = logging.getLogger("statestore.node")
SERVICE_NAMES = ("statestore.rpc.Replication", "statestore.rpc.Primary")


class NodeStartupError(Exception):
    """The node cannot start; the message says why and what to change."""


def split_address(address: str) -> tuple[str, int]:
    """`host:port` (IPv6 hosts in brackets) as (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise NodeStartupError(f"--listen {address!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def join_address(host: str, port: int) -> str:
    """`host:port`, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


_WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def advertised_address(settings: NodeSettings, bound_port: int) -> str:
    """The address peers reach the node at: `--advertise` as given (its port 0, or no port, meaning the bound
    one); else, for a node listening on every interface, the executor's host (as Spark names it) or this
    machine's name, never a wildcard that no peer can call; else "" (the listen address is reachable)."""
    if settings.advertise:
        host, sep, port = settings.advertise.rpartition(":")
        if not sep or not port.isdigit():  # a bare host (an IPv6 one is in brackets)
            return join_address(settings.advertise.strip("[]"), bound_port)
        return join_address(host.strip("[]"), bound_port) if port == "0" else settings.advertise
    host, _ = split_address(settings.listen)
    if host in _WILDCARD_HOSTS:
        return join_address(settings.executor_host or socket.getfqdn(), bound_port)
    return ""


def check_port_free(address: str) -> None:
    """Raise NodeStartupError naming the address when it cannot be bound (in use, or not local)."""
    host, port = split_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise NodeStartupError(f"cannot listen on {address}: {exc.strerror or exc}") from exc


def first_free_address(address: str, retries: int) -> str:
    """`address`, or with its port taken the first of the next `retries` ports that is free (port 0: as given,
    the system picks). Raises NodeStartupError naming every port tried."""
    host, port = split_address(address)
    if port == 0 or retries <= 0:
        check_port_free(address)
        return address
    for candidate in range(port, min(port + retries, 65535) + 1):
        try:
            check_port_free(join_address(host, candidate))
            return join_address(host, candidate)
        except NodeStartupError:
            continue
    raise NodeStartupError(f"cannot listen on {host} at any port from {port} to {port + retries}: all are taken")


def check_data_dir(path: Path) -> None:
    """Raise NodeStartupError unless `path` exists (or can be created) and is writable."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise NodeStartupError(f"data dir {path} is not writable: {exc.strerror or exc}") from exc


class StateNode:
    """One state node: replicas, shipper, membership, the gRPC server and the local channel that expose them.

    `local_socket`: serve the provider's local channel there (docs/formats.md section 6).
    """

    def __init__(self, settings: NodeSettings, local_socket: Path | None = None) -> None:
        self.settings = settings
        self._server: grpc.Server | None = None
        self._health = health.HealthServicer()
        self._stopped = threading.Event()
        self.replicas = ReplicaSet(settings.data_dir / "replicas", settings)
        self.increment_log = IncrementLog(settings.increment_log_bytes)
        # Built in start(), once the listening port is known (`--listen HOST:0` binds any free port).
        self.shipper: Shipper | None = None
        self.heartbeater: Heartbeater | None = None
        self.materializer: Materializer | None = None
        self.file_replicas: FileReplicas | None = None
        self.local_channel = LocalChannelServer(local_socket, self, settings.provider_paths) if local_socket else None

    def _ask_replica_groups(self, wait: bool) -> None:
        """A heartbeat now (`wait`: on this thread, for its answer), bringing back replica groups."""
        assert self.heartbeater is not None
        if wait:
            self.heartbeater.beat()
        else:
            self.heartbeater.request_beat()

    def start(self) -> None:
        """Check the data dir and the port, reopen replicas, serve, and join the controller."""
        check_data_dir(self.settings.data_dir)
        raise_open_files_limit()
        self.settings = replace(
            self.settings, listen=first_free_address(self.settings.listen, self.settings.port_retries)
        )
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="rpc"),
            # Without this gRPC binds with SO_REUSEPORT and a second node on the same port starts silently.
            options=[("grpc.so_reuseport", 0), *GRPC_MESSAGE_OPTIONS],
            interceptors=auth.server_interceptors(self.settings.secret, f"node {self.settings.identity}"),
        )
        try:
            port = tls.add_port(server, self.settings.listen)
        except (RuntimeError, tls.TlsError) as exc:
            raise NodeStartupError(f"cannot listen on {self.settings.listen}: {exc}") from exc
        if port == 0:
            raise NodeStartupError(f"cannot listen on {self.settings.listen}")
        host, requested = split_address(self.settings.listen)
        if requested == 0:
            self.settings = replace(self.settings, listen=join_address(host, port))
        self.settings = replace(self.settings, advertise=advertised_address(self.settings, port))
        proxied = link_faults.proxied_inbound(self.settings.listen, host)  # the fault suite's, when asked
        if proxied is not None:
            self.settings = replace(self.settings, advertise=proxied)
        self.shipper = Shipper(
            self.settings,
            self.increment_log,
            self._ask_replica_groups,
            lambda store: self.replicas.drop(store, reason="this node became the partition's primary"),
        )
        self.file_replicas = files = FileReplicas(self.settings, lambda: self._ask_replica_groups(False))
        shipper = self.shipper

        def on_groups(groups: list[control_pb2.ReplicaGroup]) -> None:
            shipper.set_replica_groups(groups)
            files.set_groups(groups)

        def on_demoted(claims: list[common_pb2.VersionHeld]) -> None:
            shipper.demote(claims)
            files.demote(claims)

        self.heartbeater = Heartbeater(
            self.settings,
            lambda: [*shipper.reports(), *files.reports()],
            lambda: [*self.replicas.held(), *files.held()],
            on_groups,
            on_demoted,
            self._retire_replicas,
        )
        self.replicas.open_existing()
        self.materializer = Materializer(self.settings, self.replicas, self.shipper.is_primary)
        replication_pb2_grpc.add_ReplicationServicer_to_server(
            ReplicationService(
                self.settings,
                self.replicas,
                self.increment_log,
                self.shipper.is_primary,
                self.shipper.awaits_local_release,
                files,
            ),
            server,
        )
        replication_pb2_grpc.add_PrimaryServicer_to_server(PrimaryService(self.shipper), server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        if self.local_channel is not None:
            try:
                self.local_channel.start()
            except LocalChannelError as exc:
                raise NodeStartupError(str(exc)) from exc
        server.start()
        self._server = server
        for name in ("", *SERVICE_NAMES):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log_event(
            _log,
            "listening",
            address=self.settings.listen,
            node=self.settings.identity,
            data_dir=str(self.settings.data_dir),
            controller=self.settings.controller,
            local_socket=str(self.local_channel.path) if self.local_channel else None,
            pid=os.getpid(),
        )
        self.heartbeater.start()

    def _retire_replicas(self, stores: list[common_pb2.StoreRef]) -> None:
        for store in stores:
            self.replicas.drop(store, reason="retired by the controller")
        if self.file_replicas is not None:
            self.file_replicas.retire(stores)

    # ----------------------------------------------------------------- the local provider (local_channel.LocalPrimary)

    def ship(self, store: common_pb2.StoreRef, message: Committed) -> ShipResult:
        """COMMITTED: the same shipping path as `Primary.Ship`."""
        assert self.shipper is not None
        outcome = self.shipper.ship(
            store, message.increment, message.sync, 0.0, rewrites_history=message.rewrites_history
        )
        return ShipResult(synced=outcome.synced, detail=outcome.detail)

    def release(self, store: common_pb2.StoreRef) -> bool:
        """RELEASED: the same path as `Primary.Release`."""
        assert self.shipper is not None
        return self.shipper.release(store)

    def materialize(self, store: common_pb2.StoreRef, message: Materialize) -> Materialized:
        """MATERIALIZE: this node's copy of the partition, or a peer's (statestore.node.materialize). A copy of a
        partition a hand-over moves here is reported to the controller (the executor opens it ahead of the move)."""
        assert self.materializer is not None and self.heartbeater is not None
        answer = self.materializer.materialize(store, message)
        if answer.status == MATERIALIZED_OK:
            self.heartbeater.note_opened_ahead(store, answer.version)
        return answer

    def load(self, store: common_pb2.StoreRef, message: Load) -> str:
        """LOAD: what a committed batch cost the executor, kept for the heartbeat's load report."""
        assert self.shipper is not None and self.heartbeater is not None
        if message.executor_cores:
            self.heartbeater.set_executor_cores(message.executor_cores)
        cost = BatchCost(message.version, message.task_millis, message.rows_written, message.state_bytes)
        return "recorded" if self.shipper.record_cost(store, cost) else "not primary here: ignored"

    def incoming(self) -> list[Incoming]:
        """INCOMING: the partitions the controller's running hand-over moves here, with this node's replicas'
        versions (0: not held yet, a warm-up under way)."""
        assert self.heartbeater is not None
        self.heartbeater.note_incoming_asked()
        entries = []
        for store in self.heartbeater.incoming:
            replica = self.replicas.get(store)
            entries.append(Incoming(store.store_id, store.checkpoint_dir, replica.version if replica else 0))
        return entries

    def promote(self, store: common_pb2.StoreRef, message: Promote) -> str:
        """PROMOTE: the provider loaded the partition to write it here: this node becomes its primary."""
        fault_point("promote", store.store_id)
        assert self.shipper is not None and self.heartbeater is not None
        if message.executor_id and message.executor_host:
            self.heartbeater.set_executor(message.executor_id, message.executor_host)
        load = LoadNote(
            SOURCE_NAMES[message.source],
            message.load_version,
            message.from_version,
            message.load_version - message.from_version,
            message.millis,
            time.monotonic(),
        )
        place = control_pb2.SparkPlace(
            run_id=message.run_id,
            state_root=message.state_root,
            executor_id=message.executor_id,
            executor_host=message.executor_host,
        )
        became = self.shipper.promote(store, message.version, load, place)
        return "promoted" if became else "already the primary"

    def demote(self, store: common_pb2.StoreRef, message: Demote) -> str:
        """DEMOTE: the provider unloaded the partition; keep its directory as a replica if it is sound."""
        assert self.shipper is not None
        if not message.directory or message.lineage is None:
            self.shipper.release(store)
            return "released; nothing to adopt"
        # Released first (a heartbeat between the two must not report both the claim and the replica: the
        # controller retires a replica its node claims), with shipments told to wait for the directory meanwhile:
        # one arriving in between would otherwise make an empty replica, which the directory then could not become
        # (the provider deletes it, and the replica bootstraps over the network).
        self.shipper.release(store, adopting=True)
        try:
            return self.replicas.adopt(store, Path(message.directory), message.version, message.lineage)
        finally:
            self.shipper.adopted(store)

    def file_kept(self, store: common_pb2.StoreRef, message: FileKept) -> str:
        """FILE_KEPT: the executor kept a copy of one of the partition's state files (Spark's own RocksDB provider
        under the checkpoint file layer): this node ships it to the partition's replica group."""
        assert self.file_replicas is not None and self.heartbeater is not None
        if message.executor_id and message.executor_host:
            self.heartbeater.set_executor(message.executor_id, message.executor_host)
        place = None
        if message.run_id:
            place = control_pb2.SparkPlace(
                run_id=message.run_id,
                state_root=message.state_root,
                executor_id=message.executor_id,
                executor_host=message.executor_host,
            )
        file = KeptFile(
            message.checkpoint_path, message.name, message.version, message.size, message.crc32,
            Path(message.copy_path), message.modified_ms,
        )  # fmt: skip
        return self.file_replicas.kept(store, file, place)

    def file_read(self, store: common_pb2.StoreRef, message: FileRead) -> str:
        """FILE_READ: what a load of a partition on Spark's provider read of one state file, and from where."""
        assert self.file_replicas is not None
        return self.file_replicas.read(store, message.name, message.version, message.bytes, message.source)

    def fetch_files(self, store: common_pb2.StoreRef, message: FetchFiles) -> str:
        """FETCH_FILES: a load here lacks the partition's files; fetch them from a peer holding them."""
        assert self.file_replicas is not None
        return self.file_replicas.fetch(store, message.version, message.timeout_ms / 1000)

    def stop(self, grace: float = 5.0) -> None:
        """Stop serving (in-flight calls get `grace` seconds), stop shipping, close the replicas."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        log_event(_log, "stopping", grace_seconds=grace)
        self._health.enter_graceful_shutdown()
        if self.local_channel is not None:
            self.local_channel.stop()
        if self.heartbeater is not None:
            self.heartbeater.stop()
        if self.shipper is not None:
            self.shipper.close()
        if self.file_replicas is not None:
            self.file_replicas.close()
        if self._server is not None:
            self._server.stop(grace).wait()
        self.replicas.close()
        log_event(_log, "stopped")

    def wait(self) -> None:
        """Block until `stop` was called."""
        self._stopped.wait()


def raise_open_files_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit, as services holding many files do: a node
    keeps each replica's RocksDB files open (at least 8 a replica: its lock, log, manifest, write-ahead log,
    directory and an SST), and at Spark's 200 partitions, two operators and q=1 a node holds 200 replicas, past a
    common soft limit of 1,024. Returns the soft limit in force."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:
        log_event(_log, "open_files_limit_kept", logging.WARNING, soft=soft, hard=hard, error=str(exc))
        return soft
    log_event(_log, "open_files_limit_raised", soft=soft, to=hard)
    return hard


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return True
    return fields[0] != "Z"


def watch_parent(parent_pid: int, on_gone: Callable[[], None], interval: float = 0.5) -> threading.Thread:
    """Call `on_gone` once process `parent_pid` has exited (a sidecar follows its executor JVM)."""

    def watch() -> None:
        while process_alive(parent_pid):
            threading.Event().wait(interval)
        log_event(_log, "parent_gone", parent_pid=parent_pid)
        on_gone()

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


def run_node(settings: NodeSettings, local_socket: Path | None = None, parent_pid: int | None = None) -> int:
    """Run a node until SIGTERM or SIGINT (or until `parent_pid` exits); returns the process exit code."""
    node = StateNode(settings, local_socket)
    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log_event(_log, "signal", signal=signal.Signals(signum).name)
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    if parent_pid is not None:
        watch_parent(parent_pid, stop_requested.set)
    try:
        node.start()
    except NodeStartupError as exc:
        log_event(_log, "startup_failed", logging.ERROR, error=str(exc))
        node.stop(grace=0)
        print(f"statestore node: error: {exc}", file=sys.stderr)
        return 2
    while not stop_requested.wait(1.0):
        pass
    node.stop()
    return 0
