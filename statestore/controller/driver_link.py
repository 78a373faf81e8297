"""The controller's end of its link with the driver JVM, when the provider jar's driver plugin started it as a
sidecar (`statestore controller --driver-link SOCKET`, started by `DriverSide.java`).

The link is a Unix socket the controller listens on and the plugin connects to, one JSON object a line each way
(docs/node.md, "The driver link"):

    plugin -> controller   {"event": "executor_removed", "executor": "2", "reason": "..."}
                           {"event": "decommissioning", "executors": ["2"]}
                           {"event": "application", "id": "app-2026...", "name": ..., "ui": "http://..."}
                           {"event": "query_started", "run_id": ..., "state_root": ..., "ack": 3}
    controller -> plugin   {"ack": 3}   once the started query's partitions are steered
                           {"reply": 7, "location": "executor_127.0.0.1_3"}      or {"reply": 7, "error": "..."}
    controller -> plugin   {"request": 7, "op": "steer" | "locate", "state_root": ..., "operator": 0,
                            "partition": 3, "store_name": "default", "run_id": ..., "host": ..., "executor": ...}

Events go to statestore.controller.spark_events on a thread of their own, so a failover's steering requests are
answered (by the reading thread) while it runs. Spark's levers (handover.handover.SparkLevers) are the two
requests: the plugin calls the `StateStoreCoordinator` in the driver's JVM and answers.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from handover.failover import Steer
from handover.handover import SparkLevers
from statestore.controller.spark_events import SparkEvents
from statestore.logs import log_event

_log = logging.getLogger("statestore.controller.driver_link")
# How long a steering request waits for the driver's answer.
REQUEST_TIMEOUT_SECONDS = 10.0


class DriverLinkError(RuntimeError):
    """The driver could not steer: no link, no answer in time, or the coordinator refused."""


class DriverLink:
    """Serves the driver plugin's link at `path` for `controller` (statestore.controller.server.Controller)."""

    def __init__(
        self, path: Path, controller: Any, on_application: Callable[[dict[str, str]], None] | None = None
    ) -> None:
        """`on_application` is called with the application's {"id", "name", "ui"} as the driver announces it."""
        self.path = path
        self._on_application = on_application
        self.events = SparkEvents(controller)
        self._controller = controller
        self._listener: socket.socket | None = None
        self._connection: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._pending: dict[int, Future] = {}
        self._ids = itertools.count(1)
        self._inbox: queue.Queue[dict | None] = queue.Queue()
        self._stopped = threading.Event()

    def start(self) -> None:
        """Listen at the socket path (replacing a stale socket file), lend the controller the driver's levers."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        os.chmod(self.path, 0o600)  # the driver's user only: the link steers Spark without the secret
        listener.listen(1)
        self._listener = listener
        threading.Thread(target=self._accept, name="driver-link-accept", daemon=True).start()
        threading.Thread(target=self._handle_events, name="driver-link-events", daemon=True).start()
        self._controller.attach_spark(SparkLevers(self.steer, self.locate))
        log_event(_log, "driver_link_listening", path=str(self.path))

    def stop(self) -> None:
        """Close the link and stop its threads."""
        self._stopped.set()
        self._inbox.put(None)
        for closing in (self._listener, self._connection):
            if closing is not None:
                with contextlib.suppress(OSError):
                    closing.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def steer(self, decision: Steer) -> None:
        """Have the driver report the decision's partition active on its executor (raises DriverLinkError)."""
        location = self._request("steer", decision)
        log_event(_log, "coordinator_location", store=decision.store.store_id, location=location)

    def locate(self, decision: Steer) -> str:
        """Where Spark's coordinator places the decision's partition now (`executor_<host>_<id>`, "" nowhere)."""
        return self._request("locate", decision)

    # ----------------------------------------------------------------- the socket

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            previous, self._connection = self._connection, connection
            if previous is not None:  # a restarted plugin: the newest connection is the driver
                with contextlib.suppress(OSError):
                    previous.close()
            log_event(_log, "driver_link_connected")
            threading.Thread(target=self._read, args=(connection,), name="driver-link-read", daemon=True).start()

    def _read(self, connection: socket.socket) -> None:
        with contextlib.suppress(OSError), connection.makefile("r", encoding="utf-8") as lines:
            for line in lines:
                try:
                    message = json.loads(line)
                except ValueError:
                    log_event(_log, "driver_link_bad_line", logging.WARNING, line=line[:200])
                    continue
                if "reply" in message:
                    pending = self._pending.pop(int(message["reply"]), None)
                    if pending is not None:
                        pending.set_result(message)
                else:
                    self._inbox.put(message)
        if self._connection is connection:
            log_event(_log, "driver_link_closed", logging.WARNING)

    def _send(self, message: dict) -> None:
        connection = self._connection
        if connection is None:
            raise DriverLinkError("the driver has not connected to the controller's link (no driver plugin?)")
        data = (json.dumps(message) + "\n").encode()
        with self._send_lock:
            try:
                connection.sendall(data)
            except OSError as exc:
                raise DriverLinkError(f"the driver's link is broken: {exc}") from exc

    def _request(self, op: str, decision: Steer) -> str:
        operator_id, partition_id, store_name = decision.store.store_id.split("/", 2)
        request_id = next(self._ids)
        answer: Future = Future()
        self._pending[request_id] = answer
        try:
            self._send(
                {
                    "request": request_id,
                    "op": op,
                    "state_root": decision.state_root,
                    "operator": int(operator_id),
                    "partition": int(partition_id),
                    "store_name": store_name,
                    "run_id": decision.run_id,
                    "host": decision.executor_host,
                    "executor": decision.executor_id,
                }
            )
            reply = answer.result(timeout=REQUEST_TIMEOUT_SECONDS)
        except FutureTimeout:
            raise DriverLinkError(
                f"the driver did not answer {op} of {decision.store.store_id} within {REQUEST_TIMEOUT_SECONDS:.0f}s"
            ) from None
        finally:
            self._pending.pop(request_id, None)
        if reply.get("error"):
            raise DriverLinkError(f"the driver could not {op} {decision.store.store_id}: {reply['error']}")
        return str(reply.get("location", ""))

    def _handle_events(self) -> None:
        while True:
            event = self._inbox.get()
            if event is None:
                return
            try:
                self._handle(event)
            except Exception as exc:
                # This thread carries every later failover and drain: one bad event must not end it.
                log_event(_log, "driver_event_failed", logging.ERROR, message=str(event)[:200], error=repr(exc))

    def _handle(self, event: dict) -> None:
        """Act on one of the driver's events."""
        kind = event.get("event")
        if kind == "executor_removed":
            self.events.executor_removed(str(event["executor"]), str(event.get("reason", "")), self.steer)
        elif kind == "decommissioning":
            self.events.decommissioning([str(e) for e in event.get("executors", [])])
        elif kind == "query_started":
            try:
                decisions = self._controller.query_started(
                    str(event["run_id"]), str(event["state_root"]), self.steer
                )
                log_event(_log, "query_started", run_id=event["run_id"], steered=len(decisions))
            except Exception as exc:  # the query's start never waits on our error: it is acknowledged anyway
                log_event(_log, "query_start_not_steered", logging.WARNING, error=repr(exc))
            with contextlib.suppress(DriverLinkError):  # the driver stopped waiting: its own bound
                self._send({"ack": event.get("ack")})
        elif kind == "query_stopped":
            ended = self._controller.query_stopped(str(event["run_id"]))
            log_event(_log, "query_stopped", run_id=event["run_id"], moves_ended=ended)
        elif kind == "application":
            log_event(_log, "spark_application", id=event.get("id"), ui=event.get("ui"))
            if self._on_application is not None:
                self._on_application({k: str(event.get(k) or "") for k in ("id", "name", "ui")})
        else:
            log_event(_log, "driver_link_unknown_event", logging.WARNING, message=str(event)[:200])
