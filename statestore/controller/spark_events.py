"""What the controller does with Spark's executor events, wherever they come from: the driver plugin's link
(statestore.controller.driver_link: the driver JVM's listener, the plugin's driver side).

An executor Spark removed: its partitions fail over to their replica holders, each steered there
(handover.failover). An executor Spark is decommissioning (dynamic allocation's scale-down, a decommissioned
worker or executor, with `spark.decommission.enabled`): it is drained at once (an operation already running takes
it in), retried while its node is silent or the controller cannot plan it yet, so that its partitions are handed
over before it exits.
"""

from __future__ import annotations

import logging
from typing import Any

from handover.failover import SteerFunction
from statestore.logs import log_event

_log = logging.getLogger("statestore.controller.steering")


class SparkEvents:
    """Executor removals and decommissions, turned into failovers and drains of `controller`
    (statestore.controller.server.Controller)."""

    def __init__(self, controller: Any) -> None:
        self._controller = controller
        self.drained: dict[str, int] = {}  # decommissioning executor id -> its drain's operation id (0: none)
        self._announced: set[str] = set()
        self._drain_failed: set[str] = set()  # events ("1,2") whose drain failed once (logged once, retried)
        self._deferred: set[str] = set()  # executors whose drain had to wait (logged once)

    def executor_removed(self, executor_id: str, reason: str, steer: SteerFunction) -> None:
        """Spark removed `executor_id`: fail its partitions over, steering each with `steer` (never raises: the
        caller's thread must outlive one failed failover, later losses need it too)."""
        log_event(_log, "spark_executor_removed", logging.WARNING, executor=executor_id, reason=reason)
        # Gone for good: what was kept of its decommission goes (executors come and go for an application's life).
        self.drained.pop(executor_id, None)
        self._announced.discard(executor_id)
        self._deferred.discard(executor_id)
        self._drain_failed = {key for key in self._drain_failed if executor_id not in key.split(",")}
        try:
            self._controller.executor_lost(executor_id, steer)
        except Exception as exc:
            log_event(_log, "failover_failed", logging.ERROR, executor=executor_id, error=repr(exc))

    def decommissioning(self, executor_ids: list[str]) -> None:
        """Spark is decommissioning these executors now: start draining each not drained yet (call again with
        the executors still decommissioning to retry those whose drain had to wait)."""
        waiting = [executor_id for executor_id in executor_ids if executor_id not in self.drained]
        for executor_id in waiting:
            if executor_id not in self._announced:
                self._announced.add(executor_id)
                log_event(_log, "spark_executor_decommissioning", logging.WARNING, executor=executor_id)
        if not waiting:
            return
        try:
            # Together: a drain of one must not hand its partitions to another that is about to go.
            started = self._controller.executors_decommissioning(waiting)
        except Exception as exc:  # retried at the next call (logged once)
            key = ",".join(sorted(waiting))
            if key not in self._drain_failed:
                self._drain_failed.add(key)
                log_event(_log, "decommission_drain_failed", logging.ERROR, executors=waiting, error=repr(exc))
            return
        for executor_id, operation_id in started.items():
            if operation_id is not None:
                self.drained[executor_id] = operation_id
            elif executor_id not in self._deferred:  # said once: the call is repeated every poll
                self._deferred.add(executor_id)
                log_event(_log, "decommission_waits", logging.WARNING, executor=executor_id,
                          why="its state node is silent or no placement fits yet: retried while Spark decommissions "
                          "it; if it exits first, its partitions fail over")  # fmt: skip
