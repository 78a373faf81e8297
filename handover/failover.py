"""Failover: a lost executor's partitions resume from their warm replicas (DESIGN.md section 4, "Failover").

The protocol's steps, in order (the provider's side of steps 4 and 5 is `StateLoader` in the Java provider):

1. **Notice** the loss from Spark itself: the driver's executor watch reports the removed executor
   (`Failover.executor_lost`), without waiting for missed heartbeats.
2. **Fence** the executor's state node: dead from now on (`Membership.lose`), so placement re-plans around it
   and nothing it still says counts.
3. **Choose**, for each task partition whose primary ran there (the stores one task loads: a stream-stream
   join's four), the freshest live replica holder of all its stores: the most stores held, then the highest
   version held by its least fresh store, then the fewest primaries, then the node id (deterministic).
4. **Steer** the partition's next task to that holder's executor (Spark's `StateStoreCoordinator`, through the
   `steer` callback the driver gives), before the next micro-batch is planned.
5. There the provider **materializes** the last committed version from its node's replica plus the
   increments it lacks, read from the checkpoint location, and **promotes** the node to primary. Until then
   the partition is among the steered node's `incoming` (`Failover.incoming`, in its heartbeat replies), so
   that its executor opens a copy ahead while the rest of the cluster catches up: the task takes it then.
6. The controller **re-plans** the partition's replica group back to q replicas around the new primary (on
   the promotion's heartbeat).

Spark replays the failed batch from its offset log, so results stay exactly-once; a replica whose lineage
is in doubt is never used (the provider checks it against the checkpoint location).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from statestore.cluster.membership import Membership, NodeRecord, PartitionRecord
from statestore.logs import log_event
from statestore.partition_key import task_partition_key
from statestore.rpc import common_pb2

_log = logging.getLogger("statestore.controller.failover")


@dataclass(frozen=True)
class Steer:
    """One steering decision: run partition `store`'s next task on `executor_id` at `executor_host`, where node
    `node_id` holds its replica at `version_held`. `run_id` and `state_root` name the partition to Spark."""

    store: common_pb2.StoreRef
    run_id: str
    state_root: str
    executor_id: str
    executor_host: str
    node_id: str
    version_held: int
    primary_version: int
    lost_executor: str
    restarted_run: bool = False  # the query restarted on its checkpoint (Failover.query_started)

    def describe(self) -> str:
        """One line for logs and status."""
        if self.lost_executor:
            why = f"after executor {self.lost_executor} was lost"
        elif self.restarted_run:
            why = f"as query run {self.run_id} started"
        else:
            why = "for a planned hand-over"
        return (
            f"executor {self.executor_id} (node {self.node_id}, replica at version {self.version_held} of "
            f"{self.primary_version}) {why}"
        )

    @property
    def location(self) -> str:
        """The coordinator's name for the executor steered to (`executor_<host>_<id>`)."""
        return f"executor_{self.executor_host}_{self.executor_id}"


SteerFunction = Callable[[Steer], None]


def freshest_holder(
    membership: Membership,
    task: str,
    stores: list[PartitionRecord],
    exclude: frozenset[str] = frozenset(),
    avoid: frozenset[str] = frozenset(),
) -> tuple[NodeRecord, dict[str, int]] | None:
    """The live node (with a known executor, not in `exclude`) to run task partition `task` on from its replica,
    and the version it holds of each of its stores: a node not in `avoid` (being drained: its executor runs no new
    task) before one in it, then the most stores held, then the highest version held by its least fresh store,
    then the fewest primaries, then the node id (deterministic). None when no node holds any."""
    held: dict[str, dict[str, int]] = {}  # node id -> partition key -> version
    records: dict[str, NodeRecord] = {}
    for partition in stores:
        for record, version in membership.holders(partition.key):
            if record.executor_id and record.executor_host and record.node_id not in exclude:
                held.setdefault(record.node_id, {})[partition.key] = version
                records[record.node_id] = record
    if not held:
        log_event(_log, "not_steered", task=task, why="no live replica holder with a known executor")
        return None

    def rank(node_id: str) -> tuple:
        versions = held[node_id]
        return (node_id in avoid, -len(versions), -min(versions.values()), len(records[node_id].primaries), node_id)

    best = min(held, key=rank)
    return records[best], held[best]


# How long a lost partition stays among the incoming of the node it was steered to, when no live primary of it
# appears meanwhile (the query stopped, or Spark ran it nowhere yet): its copy opened ahead is closed then.
OPEN_AHEAD_AFTER_LOSS_SECONDS = 120.0


# Where Spark's coordinator places the decision's partition now (`executor_<host>_<id>`, "" when nowhere).
LocateFunction = Callable[[Steer], str]


class Failover:
    """Runs the failover protocol for the controller; remembers the last decision per partition for status."""

    def __init__(self, membership: Membership) -> None:
        self._membership = membership
        self._lock = threading.Lock()
        self._steered: dict[str, tuple[Steer, float]] = {}  # partition key -> (decision, when)
        # Node id -> partition key -> (store, when): a lost partition steered there, not yet promoted anywhere.
        self._awaiting_promotion: dict[str, dict[str, tuple[common_pb2.StoreRef, float]]] = {}

    def executor_lost(
        self,
        executor_id: str,
        steer: SteerFunction,
        skip: frozenset[str] = frozenset(),
        draining: frozenset[str] = frozenset(),
    ) -> list[Steer]:
        """Steps 1 to 4 for Spark's report that executor `executor_id` is gone; returns the decisions taken.
        The task partitions in `skip` are left to the hand-over already steering them elsewhere (the executor
        was drained as Spark decommissioned it). Nodes `draining` take a lost partition only when no other node
        holds it (their executors run no new task, or are about to be emptied)."""
        # 1. notice (the caller is Spark's executor-removed event)
        node_id = self._membership.node_of_executor(executor_id)
        log_event(_log, "executor_lost", executor=executor_id, node=node_id)
        if node_id is None:
            return []
        # 2. fence
        self._membership.lose(node_id)
        with self._lock:
            self._awaiting_promotion.pop(node_id, None)  # steered again below
        tasks: dict[str, list[PartitionRecord]] = {}
        partitions = self._membership.partitions()
        with self._lock:
            # Forgotten partitions' decisions go (status shows the last decision of each known partition).
            known = {p.key for p in partitions}
            self._steered = {k: v for k, v in self._steered.items() if k in known}
            steered_here = {k for k, (decision, _) in self._steered.items() if decision.node_id == node_id}
        for partition in partitions:
            # Also a partition an earlier loss steered here that has not been promoted here yet: its primary is
            # still the node lost before (a second loss in a row).
            if partition.primary == node_id or (
                partition.key in steered_here and not self._primary_alive(partition)
            ):
                tasks.setdefault(task_partition_key(partition.store), []).append(partition)
        decisions = []
        for task, stores in sorted(tasks.items()):
            if task in skip:
                log_event(_log, "not_steered", task=task, why="a hand-over already steered it off the executor")
                continue
            # 3. choose
            target = freshest_holder(self._membership, task, stores, avoid=draining)
            if target is None:
                continue
            record, held = target
            for partition in stores:
                place = partition.report.place
                if not place.run_id or not place.state_root:
                    log_event(_log, "not_steered", store=partition.store.store_id, why="run and state root unknown")
                    continue
                decision = Steer(
                    partition.store,
                    place.run_id,
                    place.state_root,
                    record.executor_id,
                    record.executor_host,
                    record.node_id,
                    held.get(partition.key, 0),
                    partition.report.version,
                    executor_id,
                )
                # 4. steer
                try:
                    steer(decision)
                except Exception as exc:  # steering is an optimisation: Spark still runs the task somewhere
                    log_event(_log, "steer_failed", logging.WARNING, store=partition.store.store_id, error=repr(exc))
                    continue
                with self._lock:
                    now = time.monotonic()
                    self._steered[partition.key] = (decision, now)
                    for awaiting in self._awaiting_promotion.values():
                        awaiting.pop(partition.key, None)
                    self._awaiting_promotion.setdefault(decision.node_id, {})[partition.key] = (partition.store, now)
                log_event(
                    _log,
                    "steered",
                    store=partition.store.store_id,
                    checkpoint=partition.store.checkpoint_dir,
                    to_executor=decision.executor_id,
                    node=decision.node_id,
                    version_held=decision.version_held,
                    primary_version=decision.primary_version,
                )
                decisions.append(decision)
        return decisions

    def incoming(self, node_id: str) -> list[common_pb2.StoreRef]:
        """The lost partitions steered to node `node_id` that no live node is primary of yet: its executor opens
        copies of them ahead of their tasks. Costs O(such partitions of that node); an entry goes once a live
        primary of its partition is known (wherever Spark ran it), or after OPEN_AHEAD_AFTER_LOSS_SECONDS."""
        with self._lock:
            awaiting = dict(self._awaiting_promotion.get(node_id, {}))
        if not awaiting:
            return []
        now = time.monotonic()
        done = set()
        for key, (_, since) in awaiting.items():
            partition = self._membership.partition(key)  # not under our lock: membership has its own
            if partition is None or now - since > OPEN_AHEAD_AFTER_LOSS_SECONDS or self._primary_alive(partition):
                done.add(key)
        if done:
            with self._lock:
                current = self._awaiting_promotion.get(node_id, {})
                for key in done:
                    if key in current and current[key][1] == awaiting[key][1]:  # not steered here again since
                        del current[key]
                if not current:
                    self._awaiting_promotion.pop(node_id, None)
        return [store for key, (store, _) in awaiting.items() if key not in done]

    def _primary_alive(self, partition: PartitionRecord) -> bool:
        record = self._membership.node(partition.primary)
        return record is not None and self._membership.is_alive(record)

    def query_started(
        self, run_id: str, state_root: str, steer: SteerFunction, draining: frozenset[str] = frozenset()
    ) -> list[Steer]:
        """A query run `run_id` starts on the checkpoint whose stores live under `state_root` (a restart: Spark
        gave it a new run id). Spark's coordinator knows no place for the new run's partitions, so its first batch
        would load them wherever it runs them: steer each task partition the controller knows under that state
        root to its freshest replica holder, which loads it from its replica (the stopped run's provider on the
        old primary's executor stays the partition's owner there until Spark's maintenance unloads it, so that
        node has no copy to give yet); to the old primary's executor when no replica is held (q=0, one executor).
        Nodes `draining` are chosen only when no other node holds the partition. The decisions are remembered as
        a loss's are (status shows them; a loss of the chosen node before the new run's first batch steers again).
        Returns the decisions taken (none for a query never seen: nothing to keep)."""
        tasks: dict[str, list[PartitionRecord]] = {}
        for partition in self._membership.partitions():
            place = partition.report.place
            if place.state_root.rstrip("/") == state_root.rstrip("/") and place.run_id != run_id:
                tasks.setdefault(task_partition_key(partition.store), []).append(partition)
        decisions = []
        for task, stores in sorted(tasks.items()):
            target = freshest_holder(self._membership, task, stores, avoid=draining)
            primary = self._membership.node(stores[0].primary)
            if target is not None:
                record, held = target
            elif (
                primary is not None
                and self._membership.is_alive(primary)
                and primary.executor_id
                and primary.executor_host
            ):
                record, held = primary, {p.key: p.report.version for p in stores}
            else:
                continue
            for partition in stores:
                decision = Steer(
                    partition.store,
                    run_id,
                    state_root,
                    record.executor_id,
                    record.executor_host,
                    record.node_id,
                    held.get(partition.key, 0),
                    partition.report.version,
                    "",
                    restarted_run=True,
                )
                try:
                    steer(decision)
                except Exception as exc:  # steering is an optimisation: Spark still runs the task somewhere
                    log_event(_log, "steer_failed", logging.WARNING, store=partition.store.store_id, error=repr(exc))
                    continue
                with self._lock:
                    self._steered[partition.key] = (decision, time.monotonic())
                log_event(
                    _log, "steered_restart", store=partition.store.store_id, checkpoint=partition.store.checkpoint_dir,
                    run_id=run_id, to_executor=record.executor_id, node=record.node_id,
                )  # fmt: skip
                decisions.append(decision)
        return decisions

    def steered(self, key: str) -> str:
        """The last steering decision for partition `key`, described, with how long ago ("" if none)."""
        with self._lock:
            entry = self._steered.get(key)
        if entry is None:
            return ""
        decision, at = entry
        return f"{decision.describe()}, {time.monotonic() - at:.0f}s ago"
