"""The controller: `Controller`, and `run_controller`, which runs it as a process (`statestore controller`, the
sidecar of a driver's JVM)."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from handover.failover import Steer, SteerFunction
from handover.handover import SparkLevers
from statestore import auth, tls
from statestore.cluster.membership import Membership
from statestore.controller.load_balancer import BalancerSettings, LoadBalancer
from statestore.controller.operations import Operations
from statestore.controller.service import ControlService
from statestore.faults.link_faults import proxied_inbound
from statestore.logs import log_event
from statestore.node.server import NodeStartupError, check_port_free, watch_parent
from statestore.registry import register, unregister
from statestore.rpc import control_pb2, control_pb2_grpc

_log = logging.getLogger("statestore.controller")

# Long enough for Spark's replacement executor to register and for the batch that resumes the failed-over
# partitions to finish (statestore.controller.replica_groups explains why re-replication waits).
REREPLICATION_DELAY_SECONDS = 10.0

# How long, past its grace, stop() waits for gRPC to confirm that the server stopped.
_STOP_CONFIRM_SECONDS = 3.0


class Controller:
    """The Control gRPC server with its membership."""

    def __init__(
        self,
        listen: str,
        replication_factor: int = 1,
        dead_after: float = 3.0,
        heartbeat_interval: float = 0.5,
        forget_after: float = 60.0,
        rereplication_delay: float = REREPLICATION_DELAY_SECONDS,
        load_balancing: BalancerSettings | None = None,
        secret: str | None = None,
    ) -> None:
        self.listen = listen
        # Every call must carry it (statestore.auth); None: this process's environment's, "": none.
        self._secret = auth.secret_from_env() if secret is None else secret
        self.replication_factor = replication_factor
        self.membership = Membership(dead_after, forget_after=forget_after)
        self._service = ControlService(self.membership, replication_factor, heartbeat_interval, rereplication_delay)
        self._server: grpc.Server | None = None
        self.port = 0
        balancing = load_balancing or BalancerSettings()
        self.load_balancer = LoadBalancer(self.membership, self._service.operations, balancing)
        self.failovers = 0  # executors lost and failed over (statestore.controller.metrics)
        self.failed_over_partitions = 0  # partitions those failovers steered to replica holders

    def start(self) -> int:
        """Serve; returns the bound port (useful with port 0). Raises NodeStartupError if it cannot listen."""
        if not self.listen.endswith(":0"):
            check_port_free(self.listen)
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=8),
            options=[("grpc.so_reuseport", 0)],
            interceptors=auth.server_interceptors(self._secret, "controller"),
        )
        control_pb2_grpc.add_ControlServicer_to_server(self._service, server)
        health_servicer = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        try:
            self.port = tls.add_port(server, self.listen)
        except (RuntimeError, tls.TlsError) as exc:
            raise NodeStartupError(f"cannot listen on {self.listen}: {exc}") from exc
        server.start()
        health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        health_servicer.set("statestore.rpc.Control", health_pb2.HealthCheckResponse.SERVING)
        self._server = server
        self.load_balancer.start()
        log_event(
            _log,
            "listening",
            address=self.listen,
            port=self.port,
            replication_factor=self.replication_factor,
            dead_after=self.membership.dead_after,
            load_balancing=self.load_balancer.settings.mode,
        )
        return self.port

    def query_started(self, run_id: str, state_root: str, steer: SteerFunction) -> list[Steer]:
        """A query run started on a checkpoint (its state stores under `state_root`): steer its partitions for its
        first batch to the executors holding them (handover.failover.Failover.query_started)."""
        return self._service.failover.query_started(
            run_id, state_root, steer, draining=self._service.operations.draining()
        )

    def query_stopped(self, run_id: str) -> int:
        """A query run stopped: moves of its partitions that wait for Spark end, and no later operation moves
        their primaries (statestore.controller.operations.Operations.query_stopped). The moves ended."""
        return self._service.operations.query_stopped(run_id)

    def executor_lost(self, executor_id: str, steer: SteerFunction) -> list[Steer]:
        """Spark removed executor `executor_id`: fail its partitions over to their replica holders, steering
        each partition's next task with `steer` (handover.failover)."""
        node_id = self.membership.node_of_executor(executor_id)
        handed_over = self._service.operations.steered_from(node_id) if node_id else frozenset()
        decisions = self._service.failover.executor_lost(
            executor_id, steer, skip=handed_over, draining=self._service.operations.draining()
        )
        self.failovers += 1
        self.failed_over_partitions += len(decisions)
        return decisions

    def executors_decommissioning(self, executor_ids: list[str]) -> dict[str, int | None]:
        """Spark is decommissioning these executors (each exits once idle): drain them now, together. Returns per
        executor its drain's operation id (0 when there is nothing to drain), None while another operation must
        end first."""
        return self._service.operations.decommissioning_all(executor_ids)

    def attach_spark(self, levers: SparkLevers) -> None:
        """Lend the controller the driver's levers on Spark's task placement, for operator commands."""
        self._service.operations.attach_spark(levers)

    def status(self) -> control_pb2.StatusReply:
        """What `statestore status` shows (the Status call's answer)."""
        return self._service.Status(control_pb2.StatusRequest(), None)

    @property
    def secret(self) -> str:
        """The secret every call must carry ("" for none)."""
        return self._secret

    @property
    def operations(self) -> Operations:
        """The operator commands (move, drain, rebalance) this controller runs."""
        return self._service.operations

    def stop(self, grace: float = 2.0) -> None:
        """Stop serving: in-flight calls get `grace` seconds, and this returns within a few seconds more even if
        gRPC never confirms (its serving thread dies when a call arrives during interpreter shutdown, and then
        the confirmation never comes: a driver that waited for it never exited)."""
        self.load_balancer.stop()
        self._service.operations.stop()
        if self._server is not None:
            confirmed = self._server.stop(grace).wait(grace + _STOP_CONFIRM_SECONDS)
            self._server = None
            log_event(_log, "stopped", confirmed=confirmed)


def run_controller(
    controller: Controller,
    parent_pid: int | None = None,
    port_file: Path | None = None,
    driver_link: Path | None = None,
    application: str = "",
    metrics_port: int | None = None,
) -> int:
    """Run until SIGTERM or SIGINT (or until `parent_pid` exits: a sidecar of the driver's JVM); returns the exit
    code. `port_file`: where to write the bound port once serving (written whole, then renamed into place);
    `driver_link`: the Unix socket to serve the driver plugin's link at (statestore.controller.driver_link);
    `application`: the Spark application's name, for the registration operators' commands find it by;
    `metrics_port`: serve the Prometheus endpoint there (statestore.controller.metrics), None: none."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if parent_pid is not None:
        watch_parent(parent_pid, stop.set)
    try:
        port = controller.start()
    except NodeStartupError as exc:
        log_event(_log, "startup_failed", logging.ERROR, error=str(exc))
        print(f"statestore controller: error: {exc}", file=sys.stderr)
        return 2
    host = controller.listen.rpartition(":")[0]
    # The fault suite's link faults (off unless STATESTORE_LINK_FAULTS_FILE is set): the nodes reach this
    # controller through a proxy following that file, so the port to hand them is the proxy's.
    proxied = proxied_inbound(f"{host}:{port}", host.strip("[]"))
    advertised_port = int(proxied.rpartition(":")[2]) if proxied else port
    spark_application: dict[str, str] = {}
    registration_lock = threading.Lock()

    def register_here() -> Path:
        with registration_lock:
            return register(
                f"{host}:{advertised_port}", controller.secret, application,
                application_id=spark_application.get("id", ""), spark_ui=spark_application.get("ui", ""),
                tls=tls.environment(tls.current()),
            )  # fmt: skip

    def application_known(announced: dict[str, str]) -> None:  # the driver's JVM tells its id once Spark has it
        spark_application.update(announced)
        register_here()

    link = None
    if driver_link is not None:
        from statestore.controller.driver_link import DriverLink

        link = DriverLink(driver_link, controller, on_application=application_known)
        link.start()
    if metrics_port is not None:
        from statestore.controller.metrics import serve_metrics

        bound = serve_metrics(controller, host.strip("[]"), metrics_port)
        log_event(_log, "metrics_listening", address=f"{host}:{bound}", path="/metrics")
    registration = register_here()
    if port_file is not None:
        written = port_file.with_name(port_file.name + ".tmp")
        written.write_text(str(advertised_port))
        written.replace(port_file)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        unregister(registration)
    if link is not None:
        link.stop()
    controller.stop()
    return 0
