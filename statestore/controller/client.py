"""Operator commands from Python: move, drain and rebalance through the controller's `Control` service, and wait
for them. The `statestore` CLI (statestore.controller.operator_cli) and notebooks (spark_provider.operate) use it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import grpc

from statestore import auth
from statestore.rpc import control_pb2, control_pb2_grpc

_POLL_SECONDS = 0.25


class ControlError(Exception):
    """The controller refused a command or could not be reached; the message says which and why."""


class ControlClient:
    """A connection to one controller (`HOST:PORT`)."""

    def __init__(self, address: str, timeout: float = 10.0) -> None:
        self.address = address
        self.timeout = timeout
        self._channel = auth.channel(address)
        self._stub = control_pb2_grpc.ControlStub(self._channel)

    def close(self) -> None:
        """Close the connection."""
        self._channel.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def move(self, moves: Mapping[str, str], strategy: str = "batched", query: str = "") -> control_pb2.OperationStatus:
        """Start moving each partition (key) to its executor (value); returns the operation's plan."""
        request = control_pb2.MoveRequest(
            moves=[control_pb2.PartitionMove(partition=p, to_executor=e, query=query) for p, e in moves.items()],
            strategy=strategy,
        )
        return self._call("move", self._stub.Move, request)

    def drain(self, executor: str, strategy: str = "batched") -> control_pb2.OperationStatus:
        """Start moving every primary and replica off `executor`."""
        return self._call("drain", self._stub.Drain, control_pb2.DrainRequest(executor=executor, strategy=strategy))

    def rebalance(self, strategy: str = "batched", dry_run: bool = False) -> control_pb2.OperationStatus:
        """Start a rebalance (only plan it with `dry_run`)."""
        request = control_pb2.RebalanceRequest(strategy=strategy, dry_run=dry_run)
        return self._call("rebalance", self._stub.Rebalance, request)

    def operation(self, operation_id: int = 0) -> control_pb2.OperationStatus:
        """Operation `operation_id`'s progress (0: the last one)."""
        request = control_pb2.OperationRequest(operation_id=operation_id)
        return self._call("operation", self._stub.Operation, request)

    def status(self) -> control_pb2.StatusReply:
        """The cluster's status."""
        return self._call("status", self._stub.Status, control_pb2.StatusRequest())

    def wait(
        self,
        operation_id: int,
        timeout: float | None = None,
        on_progress: Callable[[control_pb2.OperationStatus], None] | None = None,
    ) -> control_pb2.OperationStatus:
        """Poll operation `operation_id` until it is neither queued nor running (or `timeout` seconds passed:
        then raises TimeoutError); `on_progress` sees every answer."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.operation(operation_id)
            if on_progress is not None:
                on_progress(status)
            if not in_flight(status):
                return status
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"operation {operation_id} ({status.kind}) still {status.state} after {timeout:g}s: "
                    "`statestore status` shows the step each move is at"
                )
            time.sleep(_POLL_SECONDS)

    def _call(self, name: str, method: Callable, request: object) -> object:
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code()
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise ControlError(
                    f"{name}: controller {self.address} unreachable ({code.name}: {exc.details()})"
                ) from None
            raise ControlError(f"{name}: {exc.details()}") from None


def in_flight(status: control_pb2.OperationStatus) -> bool:
    """Whether the operation is still to end: running, or queued behind another."""
    return status.state in ("running", "queued")


def moves_done(status: control_pb2.OperationStatus) -> int:
    """How many of the operation's moves are finished (done or failed)."""
    return sum(1 for move in status.moves if move.step in ("done", "failed"))
