"""The replica groups' controller in the driver: started by `enable()`, stopped with the SparkContext.

Executors learn its address from the `controller` setting (a Spark conf the provider reads) and pass it
to the state nodes they start.
"""

from __future__ import annotations

import atexit
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

_POLL_SECONDS = 0.5
_running: list[DriverController] = []


def is_local_master(master: str | None) -> bool:
    """Whether `master` runs every executor on this machine (`local`, `local[N]`, `local-cluster[...]`)."""
    return bool(master) and master.split("[", 1)[0] in ("local", "local-cluster")


def controller_hosts(master: str | None, driver_host: str | None) -> tuple[str, str]:
    """(host to listen on, host executors reach it at): loopback for local masters, else the driver's host."""
    if is_local_master(master):
        return "127.0.0.1", "127.0.0.1"
    return "0.0.0.0", driver_host or socket.getfqdn()


@dataclass
class DriverController:
    """A `statestore.controller.server.Controller` running in this process, with its advertised address."""

    replication_factor: int
    listen_host: str
    advertise_host: str
    dead_after: float = 3.0
    forget_after: float = 60.0
    address: str = ""
    _controller: Any = None
    _stopped: threading.Event = field(default_factory=threading.Event)

    def start(self) -> str:
        """Serve on a free port; returns the address executors use."""
        from statestore.controller.server import Controller  # grpc loads only when replication is on

        self._controller = Controller(
            f"{self.listen_host}:0", self.replication_factor, self.dead_after, forget_after=self.forget_after
        )
        port = self._controller.start()
        self.address = f"{self.advertise_host}:{port}"
        _running.append(self)
        return self.address

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._controller is not None:
            self._controller.stop(grace=1.0)
        if self in _running:
            _running.remove(self)

    def stop_with_spark_context(self) -> None:
        """Stop once the SparkContext that is (or next becomes) active has stopped, watched from a thread."""

        def watch() -> None:
            from pyspark import SparkContext

            context = None
            while context is None and not self._stopped.wait(_POLL_SECONDS):
                context = SparkContext._active_spark_context
            while SparkContext._active_spark_context is context and not self._stopped.wait(_POLL_SECONDS):
                pass
            self.stop()

        threading.Thread(target=watch, name="statestore-controller-watch", daemon=True).start()


def start_driver_controller(
    replication_factor: int, master: str | None, driver_host: str | None, forget_after: float = 60.0
) -> DriverController:
    """Start a controller for a Spark application with this master; it stops with the SparkContext."""
    listen_host, advertise_host = controller_hosts(master, driver_host)
    controller = DriverController(replication_factor, listen_host, advertise_host, forget_after=forget_after)
    controller.start()
    controller.stop_with_spark_context()
    return controller


@atexit.register
def _stop_all() -> None:
    for controller in list(_running):
        controller.stop()
