"""The replica groups' controller in the driver: started by `enable()`, stopped with the SparkContext.

Executors learn its address from the `controller` setting (a Spark conf the provider reads) and pass it
to the state nodes they start. Once the SparkContext is up, an executor watch fails the partitions of every
executor Spark removes over to their replica holders (spark_provider.steering). The controller's log goes to
a file (`log_path`), as JSON lines, not to the driver's console.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

_POLL_SECONDS = 0.5
_running: list[DriverController] = []


def is_local_master(master: str | None) -> bool:
    """Whether `master` runs every executor on this machine (`local`, `local[N]`, `local-cluster[...]`)."""
    return bool(master) and master.split("[", 1)[0] in ("local", "local-cluster")


def controller_hosts(
    master: str | None, driver_host: str | None, bind_address: str | None = None
) -> tuple[str, str]:
    """(host to listen on, host executors reach it at): loopback for local masters, else the driver's host, as
    Spark's own driver endpoints: reached at `spark.driver.host`, listening on `spark.driver.bindAddress` when
    set (a container's `0.0.0.0`), else on that host only, never on every interface unasked."""
    if is_local_master(master):
        return "127.0.0.1", "127.0.0.1"
    advertised = driver_host or socket.getfqdn()
    return bind_address or advertised, advertised


@dataclass
class DriverController:
    """A `statestore.controller.server.Controller` running in this process, with its advertised address."""

    replication_factor: int
    listen_host: str
    advertise_host: str
    dead_after: float = 3.0
    forget_after: float = 60.0
    rereplication_delay: float = 10.0
    load_balancing: Any = None  # statestore.controller.load_balancer.BalancerSettings; None: off
    secret: str = field(default="", repr=False)  # the application's (statestore.auth); "": calls unchecked
    tls_files: Any = None  # statestore.tls.TlsFiles: this process serves and calls over TLS while it runs
    port: int = 0  # 0: any free port
    metrics_port: int | None = None  # the Prometheus endpoint's port (0: any free one); None: no endpoint
    metrics_address: str = ""
    address: str = ""
    application: str = ""  # the Spark application's name, for this host's registry
    log_path: str = ""
    _registration: Any = None
    watch: Any = None  # spark_provider.steering.ExecutorWatch, once the SparkContext is up
    _controller: Any = None
    _stopped: threading.Event = field(default_factory=threading.Event)

    def start(self) -> str:
        """Serve on `port` (0: a free one); returns the address executors use."""
        from statestore import auth, tls
        from statestore.controller.server import Controller  # grpc loads only when replication is on

        if self.tls_files is not None:
            tls.use(self.tls_files)

        self.log_path = self.log_path or _log_to_file()
        self._controller = Controller(
            f"{self.listen_host}:{self.port}",
            self.replication_factor,
            self.dead_after,
            forget_after=self.forget_after,
            rereplication_delay=self.rereplication_delay,
            load_balancing=self.load_balancing,
            secret=self.secret,
        )
        from statestore.node.server import NodeStartupError

        try:
            port = self._controller.start()
        except NodeStartupError as exc:
            setting = " (the controller_port setting, spark.sql.streaming.stateStore.statestore.controllerPort)"
            raise RuntimeError(f"the statestore controller cannot start{setting if self.port else ''}: {exc}") from exc
        self.address = f"{self.advertise_host}:{port}"
        if self.metrics_port is not None:
            from statestore.controller.metrics import serve_metrics

            bound = serve_metrics(self._controller, self.listen_host, self.metrics_port)
            self.metrics_address = f"{self.advertise_host}:{bound}"
        auth.remember(self.address, self.secret)  # this process's clients of it (operator calls, steering)
        from statestore.controller.registry import register

        self._registration = register(self.address, self.secret, self.application)  # for `statestore status`
        _running.append(self)
        _stop_before_thread_pools_shut()
        return self.address

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.watch is not None:
            self.watch.stop()
        if self._controller is not None:
            self._controller.stop(grace=1.0)
        if self._registration is not None:
            from statestore.controller.registry import unregister

            unregister(self._registration)
        if self.address:
            from statestore import auth, tls

            auth.forget(self.address)
            if self.tls_files is not None and tls.current() == self.tls_files:
                tls.use(None)
        if self in _running:
            _running.remove(self)

    def stop_with_spark_context(self) -> None:
        """Stop once the SparkContext that is (or next becomes) active has stopped, watched from a thread."""

        def watch() -> None:
            from pyspark import SparkContext

            context = None
            # The active context is set before its JVM side (`_jsc`) exists: wait for both.
            while (context is None or getattr(context, "_jsc", None) is None) and not self._stopped.wait(
                _POLL_SECONDS
            ):
                context = SparkContext._active_spark_context
            if context is not None:
                self._watch_executors(context)
            while SparkContext._active_spark_context is context and not self._stopped.wait(_POLL_SECONDS):
                pass
            self.stop()

        threading.Thread(target=watch, name="statestore-controller-watch", daemon=True).start()

    def _watch_executors(self, context: Any) -> None:
        from handover.handover import SparkLevers
        from spark_provider.steering import ExecutorWatch

        try:
            watch = ExecutorWatch(context, self._controller)
            watch.start()
        except Exception as exc:  # no steering is slower failover, never a failed query
            logging.getLogger("statestore.controller").warning("executor watch not started: %r", exc)
            return
        self.watch = watch
        self._controller.attach_spark(SparkLevers(watch.steer, watch.locate))


def start_driver_controller(
    replication_factor: int,
    master: str | None,
    driver_host: str | None,
    forget_after: float = 60.0,
    rereplication_delay: float = 10.0,
    load_balancing: Any = None,
    secret: str = "",
    bind_address: str | None = None,
    tls_files: Any = None,
    port: int = 0,
    metrics_port: int | None = None,
) -> DriverController:
    """Start a controller for a Spark application with this master; it stops with the SparkContext.
    `load_balancing`: the policy's `BalancerSettings` (None: off); `secret`: what every call must carry."""
    listen_host, advertise_host = controller_hosts(master, driver_host, bind_address)
    controller = DriverController(
        replication_factor,
        listen_host,
        advertise_host,
        forget_after=forget_after,
        rereplication_delay=rereplication_delay,
        load_balancing=load_balancing,
        secret=secret,
        tls_files=tls_files,
        port=port,
        metrics_port=metrics_port,
    )
    controller.start()
    controller.stop_with_spark_context()
    return controller


def running_controllers() -> list[DriverController]:
    """The controllers running in this process, oldest first."""
    return list(_running)


def _log_to_file() -> str:
    """Send the `statestore` loggers of this (the driver's) process to a JSON-lines file; returns its path.
    Set STATESTORE_CONTROLLER_LOG to choose it."""
    from statestore.logs import configure_logging

    path = os.environ.get("STATESTORE_CONTROLLER_LOG") or os.path.join(
        tempfile.gettempdir(), f"statestore-controller-{os.getpid()}.log"
    )
    configure_logging("INFO", open(path, "a", buffering=1, encoding="utf-8"))  # noqa: SIM115 (lives with the process)
    return path


@atexit.register
def _stop_all() -> None:
    for controller in list(_running):
        controller.stop()


_stop_registered = threading.Lock()
_registered: list[bool] = []


def _stop_before_thread_pools_shut() -> None:
    """Have the interpreter stop our controllers as it starts to exit, before `concurrent.futures` refuses new
    work: threading runs its exit hooks (last registered first) before `atexit`'s, and one of them shuts the
    thread pools gRPC serves calls on. A call arriving after that killed the server's thread and the driver
    waited forever at exit. (`atexit` still stops them if this hook is unavailable.)"""
    with _stop_registered:
        if _registered:
            return
        register = getattr(threading, "_register_atexit", None)
        if register is not None:
            try:
                register(_stop_all)
            except RuntimeError:  # the interpreter is already exiting
                return
        _registered.append(True)
