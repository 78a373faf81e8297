"""How busy each executor is: the load reports of its primaries, per task partition (load balancing's measure).

A node reports, per store partition it is primary of, what its last batches cost (`PartitionLoad`: means over
up to 8 batches). The stores one Spark task loads (a stream-stream join's four) are busy in the same task, so a
task partition's load is the largest of its stores' task times, not their sum. An executor's load is the sum of
its task partitions' loads, and that over its task slots is what balancing compares.
"""

from __future__ import annotations

from dataclasses import dataclass

from statestore.cluster.membership import Membership
from statestore.partition_key import task_partition_key


@dataclass(frozen=True)
class ExecutorLoad:
    """One live node's executor: the task partitions it runs and what their batches cost it."""

    node_id: str
    executor_id: str
    cores: int
    tasks: dict[str, float]  # task partition key -> task milliseconds per batch

    @property
    def millis(self) -> float:
        """Task milliseconds per batch, summed over its task partitions."""
        return sum(self.tasks.values())

    @property
    def per_core(self) -> float:
        """`millis` over its task slots (1 when not known)."""
        return self.millis / max(self.cores, 1)


def task_loads(membership: Membership) -> dict[str, float]:
    """Task partition key -> task milliseconds per batch (its stores' largest), for those with a load report."""
    loads: dict[str, float] = {}
    for partition in membership.partitions():
        if partition.report.HasField("load"):
            task = task_partition_key(partition.store)
            loads[task] = max(loads.get(task, 0.0), partition.report.load.task_millis)
    return loads


def executor_loads(membership: Membership, leaving: frozenset[str] = frozenset()) -> dict[str, ExecutorLoad]:
    """Node id -> its executor's load, for every live node serving a Spark executor (those running no task
    partition included, with no load: a new executor is where load should go), except the `leaving` ones
    (being drained: no load goes there)."""
    loads = task_loads(membership)
    live = set(membership.live_node_ids())
    running: dict[str, dict[str, float]] = {}
    for partition in membership.partitions():
        task = task_partition_key(partition.store)
        if partition.primary in live and task in loads:
            running.setdefault(partition.primary, {})[task] = loads[task]
    executors = [
        record
        for record in membership.nodes()
        if record.node_id in live and record.executor_id and record.node_id not in leaving
    ]
    # A node learns its executor's cores from the first stateful task it runs. One that joined and runs none yet
    # counted as one core, so no move to it could ever look like a gain: it counts as the largest executor known.
    unknown = max((record.executor_cores for record in executors), default=1) or 1
    return {
        record.node_id: ExecutorLoad(
            record.node_id, record.executor_id, record.executor_cores or unknown, running.get(record.node_id, {})
        )
        for record in executors
    }
