"""Operator commands from a notebook or the driver's program: `status`, `move`, `drain` and `rebalance` on the
application's controller: the one at `controller=HOST:PORT`, else the one `spark`'s confs name (the driver
plugin's, which `enable()` turns on; a Spark Connect session's: the address is a conf of the session, the secret
too unless redacted, as a Connect server does: then STATESTORE_SECRET's or this host's registry's), else the
active session's, else the one registered on this host.

    from spark_provider import move, drain, rebalance, status
    move({"3": "2"})                      # task partition 3 of every stateful operator to executor 2
    drain("1", strategy="fluid")          # everything off executor 1, one partition per batch
    rebalance(dry_run=True).moves         # what a rebalance would move
    print(status(spark=spark, text=True)) # nodes, replica groups and lag, as `statestore status` shows them

Each waits until its operation is done (a progress bar on stderr) unless `wait=False`, at most `timeout`
seconds (an hour by default: every move ends by its own time limits well before; a `TimeoutError` says the
controller stopped carrying it out), and returns the operation's status
(`statestore.rpc.control_pb2.OperationStatus`); a refusal raises `ControlError` naming what is wrong.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

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
    spark: Any = None,
) -> control_pb2.OperationStatus:
    """Move each task partition (key: `PARTITION`, `OPERATOR/PARTITION` or a store id) to its executor (value)."""
    return _run(controller_address(controller, spark), wait, timeout, lambda c: c.move(moves, strategy, query))


def drain(
    executor: str,
    strategy: str = "batched",
    wait: bool = True,
    controller: str | None = None,
    timeout: float | None = DEFAULT_WAIT_SECONDS,
    spark: Any = None,
) -> control_pb2.OperationStatus:
    """Move every primary and replica off `executor` (a Spark executor id)."""
    return _run(controller_address(controller, spark), wait, timeout, lambda c: c.drain(executor, strategy))


def rebalance(
    strategy: str = "batched",
    dry_run: bool = False,
    wait: bool = True,
    controller: str | None = None,
    timeout: float | None = DEFAULT_WAIT_SECONDS,
    spark: Any = None,
) -> control_pb2.OperationStatus:
    """Re-plan primaries and replicas with placement and carry the moves out (only plan them with `dry_run`)."""
    return _run(controller_address(controller, spark), wait, timeout, lambda c: c.rebalance(strategy, dry_run))


def status(controller: str | None = None, spark: Any = None, text: bool = False) -> Any:
    """The controller's status (`statestore.rpc.control_pb2.StatusReply`), or with `text` the tables
    `statestore status` prints."""
    from statestore import auth
    from statestore.controller.status import format_status
    from statestore.rpc import control_pb2, control_pb2_grpc

    with auth.channel(controller_address(controller, spark)) as channel:
        reply = control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=10)
    return format_status(reply) if text else reply


def controller_address(controller: str | None = None, spark: Any = None) -> str:
    """The controller to call, found as the module says (its secret remembered for the calls); raises ControlError
    saying where it looked when none is found."""
    from statestore import auth
    from statestore.controller.client import ControlError
    from statestore.registry import ControllerNotFound, choose

    if controller:
        return controller
    session = spark if spark is not None else _active_session()
    if session is not None:
        address = session.conf.get(_CONTROLLER_KEY, None)
        if address:
            # A Spark Connect server redacts the secret it hands a client: then the environment's, else this
            # host's registry's (statestore.auth.secret_for looks there).
            secret = session.conf.get(_SECRET_KEY, None)
            if secret and "redacted" not in secret:
                auth.remember(address, secret)
            return address
    if spark is not None:
        # The session was named: another application's controller on this host is not its own.
        raise ControlError(
            f"the Spark session given names no statestore controller ({_CONTROLLER_KEY} is unset: replication is "
            "off, or the session is not on the statestore provider); pass controller='HOST:PORT' to call one"
        )
    try:
        address, secret = choose(None, None)
    except ControllerNotFound as exc:
        raise ControlError(
            f"no statestore controller found: no Spark session names one "
            f"({_CONTROLLER_KEY}), and {exc}"
        ) from None
    if secret:
        auth.remember(address, secret)
    return address


_CONTROLLER_KEY = "spark.sql.streaming.stateStore.statestore.controller"
_SECRET_KEY = "spark.sql.streaming.stateStore.statestore.secret"


def _active_session() -> Any:
    """The active SparkSession of this thread (classic or Spark Connect), None without one."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None:
        try:
            from pyspark.sql.connect.session import SparkSession as ConnectSession

            session = ConnectSession.getActiveSession()
        except ImportError:  # Spark Connect's client libraries are not installed
            return None
    return session


def _run(
    controller: str,
    wait: bool,
    timeout: float | None,
    start: Callable[[ControlClient], control_pb2.OperationStatus]
) -> control_pb2.OperationStatus:
    from statestore.controller.client import ControlClient, in_flight, moves_done

    with ControlClient(controller) as client:
        status = start(client)
        if not wait or not in_flight(status):
            return status
        from tqdm import tqdm

        with tqdm(total=len(status.moves), unit="move", desc=status.kind, file=sys.stderr) as bar:

            def show(now: control_pb2.OperationStatus) -> None:
                bar.total = len(now.moves)  # a queued command's moves are known once it starts
                bar.n = moves_done(now)
                bar.refresh()

            return client.wait(status.operation_id, timeout=timeout, on_progress=show)
