"""Steering Spark after an executor loss, from the driver (DESIGN.md section 6; handover.failover).

Spark's `StateStoreCoordinator` keeps pointing a state store partition at the executor that last loaded it,
dead or alive, and the next micro-batch's task waits out the locality delay for it before running anywhere,
on an executor that holds nothing. The watch here turns Spark's executor-removed event into a failover: the
controller picks, for each partition that executor ran, the freshest live replica holder, and the partition
is reported active there (the provider jar's `Steering` class, called through py4j with plain strings), so
the next batch runs it where its state is warm.

Spark gives warning of a graceful removal (dynamic allocation's scale-down, a decommissioned worker or
executor, with `spark.decommission.enabled`) only by marking the executor decommissioning: it runs no new task
and exits about a second after its last one. The watch polls for it and has the controller drain the executor
at once (`Operations.decommissioning`): its partitions are handed over to their replica holders before it exits.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from handover.failover import Steer
from statestore.controller.spark_events import SparkEvents
from statestore.logs import log_event

_log = logging.getLogger("statestore.controller.steering")
_WAIT_MS = 500


class ExecutorWatch:
    """A driver thread that waits for Spark's executor removals and decommissions and hands them to the
    controller (statestore.controller.spark_events)."""

    def __init__(self, context: Any, controller: Any) -> None:
        self._context = context
        self._steering = context._jvm.io.statestore.spark.Steering
        self._stopped = threading.Event()
        self.events = SparkEvents(controller)

    @property
    def failovers(self) -> list[tuple[str, list[Steer]]]:
        """(executor id, decisions) of each failover, oldest first."""
        return self.events.failovers

    @property
    def drained(self) -> dict[str, int]:
        """Decommissioning executor id -> its drain's operation id (0: nothing to drain)."""
        return self.events.drained

    def start(self) -> None:
        """Listen to the SparkContext's executor removals from now on, on a daemon thread."""
        self._steering.watchExecutors(self._context._jsc.sc())
        threading.Thread(target=self._run, name="statestore-executor-watch", daemon=True).start()

    def stop(self) -> None:
        """Stop at the next wake-up (within half a second)."""
        self._stopped.set()

    def _run(self) -> None:
        from py4j.protocol import Py4JError

        while not self._stopped.is_set():
            try:
                event = self._steering.nextRemovedExecutor(_WAIT_MS)
                decommissioning = str(self._steering.decommissioningExecutors())
            except Py4JError:
                return  # the SparkContext stopped
            self.events.decommissioning(list(filter(None, decommissioning.split(","))))
            if event:
                executor_id, _, reason = event.partition("\t")
                self.events.executor_removed(executor_id, reason, self.steer)

    def steer(self, decision: Steer) -> None:
        """Report the decision's partition active on its executor (raises if Spark refuses)."""
        operator_id, partition_id, store_name = decision.store.store_id.split("/", 2)
        location = self._steering.steer(
            decision.state_root,
            int(operator_id),
            int(partition_id),
            store_name,
            decision.run_id,
            decision.executor_host,
            decision.executor_id,
        )
        log_event(_log, "coordinator_location", store=decision.store.store_id, location=location)

    def locate(self, decision: Steer) -> str:
        """Where Spark's coordinator places the decision's partition now (`executor_<host>_<id>`)."""
        operator_id, partition_id, store_name = decision.store.store_id.split("/", 2)
        return str(
            self._steering.location(
                decision.state_root, int(operator_id), int(partition_id), store_name, decision.run_id
            )
        )
