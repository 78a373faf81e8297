"""Operator commands from a notebook or the driver's program: `move`, `drain` and `rebalance` on the controller
that `enable()` started in this process (or the one at `controller=HOST:PORT`).

    from spark_provider import move, drain, rebalance
    move({"3": "2"})                      # task partition 3 of every stateful operator to executor 2
    drain("1", strategy="fluid")          # everything off executor 1, one partition per batch
    rebalance(dry_run=True).moves         # what a rebalance would move

Each waits until its operation is done (a progress bar on stderr) unless `wait=False`, at most `timeout`
seconds (an hour by default: every move ends by its own time limits well before; a `TimeoutError` says the
controller stopped carrying it out), and returns the operation's status
(`statestore.rpc.control_pb2.OperationStatus`); a refusal raises `ControlError` naming what is wrong.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

DEFAULT_WAIT_SECONDS = 3600.0

if TYPE_CHECKING:  # grpc loads only when a command runs
    from statestore.controller.client import ControlClient
    from statestore.rpc import control_pb2


def move(
    moves: Mapping[str, str],
    strategy: str = "batched",
    query: str = "",
    wait: bool = True,
    controller: str | None = None,
    timeout: float | None = DEFAULT_WAIT_SECONDS,
) -> control_pb2.OperationStatus:
    """Move each task partition (key: `PARTITION`, `OPERATOR/PARTITION` or a store id) to its executor (value)."""
    return _run(controller, wait, timeout, lambda c: c.move(moves, strategy, query))


def drain(
    executor: str,
    strategy: str = "batched",
    wait: bool = True,
    controller: str | None = None,
    timeout: float | None = DEFAULT_WAIT_SECONDS,
) -> control_pb2.OperationStatus:
    """Move every primary and replica off `executor` (a Spark executor id)."""
    return _run(controller, wait, timeout, lambda c: c.drain(executor, strategy))


def rebalance(
    strategy: str = "batched",
    dry_run: bool = False,
    wait: bool = True,
    controller: str | None = None,
    timeout: float | None = DEFAULT_WAIT_SECONDS,
) -> control_pb2.OperationStatus:
    """Re-plan primaries and replicas with placement and carry the moves out (only plan them with `dry_run`)."""
    return _run(controller, wait, timeout, lambda c: c.rebalance(strategy, dry_run))


def controller_address() -> str:
    """The address of the controller `enable()` started in this process (raises ControlError if none runs)."""
    from spark_provider.driver_controller import running_controllers
    from statestore.controller.client import ControlError

    running = running_controllers()
    if not running:
        raise ControlError(
            "no statestore controller runs in this process: call spark_provider.enable() with replication on, "
            "or pass controller='HOST:PORT'"
        )
    return running[-1].address


def _run(
    controller: str | None,
    wait: bool,
    timeout: float | None,
    start: Callable[[ControlClient], control_pb2.OperationStatus]
) -> control_pb2.OperationStatus:
    from statestore.controller.client import ControlClient, moves_done

    with ControlClient(controller or controller_address()) as client:
        status = start(client)
        if not wait or status.state != "running":
            return status
        from tqdm import tqdm

        with tqdm(total=len(status.moves), unit="move", desc=status.kind, file=sys.stderr) as bar:

            def show(now: control_pb2.OperationStatus) -> None:
                bar.n = moves_done(now)
                bar.refresh()

            return client.wait(status.operation_id, timeout=timeout, on_progress=show)
