"""The state node process: checks its start-up conditions, serves gRPC, heartbeats, shuts down gracefully."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import uuid
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from statestore.node.increment_log import IncrementLog
from statestore.node.logs import log_event
from statestore.node.membership import Heartbeater
from statestore.node.replica import ReplicaSet
from statestore.node.service import PrimaryService, ReplicationService
from statestore.node.settings import GRPC_MESSAGE_OPTIONS, NodeSettings
from statestore.node.shipper import Shipper
from statestore.rpc import replication_pb2_grpc

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
    """One state node: replicas, shipper, membership and the gRPC server that exposes them."""

    def __init__(self, settings: NodeSettings) -> None:
        self.settings = settings
        self._server: grpc.Server | None = None
        self._health = health.HealthServicer()
        self._stopped = threading.Event()
        self.replicas = ReplicaSet(settings.data_dir / "replicas", settings)
        self.increment_log = IncrementLog(settings.increment_log_bytes)
        self.shipper = Shipper(settings, self.increment_log, self._ask_replica_groups)
        self.heartbeater = Heartbeater(
            settings, self.shipper.reports, self.replicas.held, self.shipper.set_replica_groups
        )

    def _ask_replica_groups(self) -> None:
        self.heartbeater.beat()

    def start(self) -> None:
        """Check the data dir and the port, reopen replicas, serve, and join the controller."""
        check_data_dir(self.settings.data_dir)
        check_port_free(self.settings.listen)
        scratch = self.settings.data_dir / "scratch"
        scratch.mkdir(exist_ok=True)
        self.replicas.open_existing()
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="rpc"),
            # Without this gRPC binds with SO_REUSEPORT and a second node on the same port starts silently.
            options=[("grpc.so_reuseport", 0), *GRPC_MESSAGE_OPTIONS],
        )
        replication_pb2_grpc.add_ReplicationServicer_to_server(
            ReplicationService(self.settings, self.replicas, self.increment_log, scratch), server
        )
        replication_pb2_grpc.add_PrimaryServicer_to_server(PrimaryService(self.shipper), server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        try:
            port = server.add_insecure_port(self.settings.listen)
        except RuntimeError as exc:
            raise NodeStartupError(f"cannot listen on {self.settings.listen}: {exc}") from exc
        if port == 0:
            raise NodeStartupError(f"cannot listen on {self.settings.listen}")
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
            pid=os.getpid(),
        )
        self.heartbeater.start()

    def stop(self, grace: float = 5.0) -> None:
        """Stop serving (in-flight calls get `grace` seconds), stop shipping, close the replicas."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        log_event(_log, "stopping", grace_seconds=grace)
        self._health.enter_graceful_shutdown()
        self.heartbeater.stop()
        self.shipper.close()
        if self._server is not None:
            self._server.stop(grace).wait()
        self.replicas.close()
        log_event(_log, "stopped")

    def wait(self) -> None:
        """Block until `stop` was called."""
        self._stopped.wait()


def run_node(settings: NodeSettings) -> int:
    """Run a node until SIGTERM or SIGINT; returns the process exit code."""
    node = StateNode(settings)
    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        log_event(_log, "signal", signal=signal.Signals(signum).name)
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
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
