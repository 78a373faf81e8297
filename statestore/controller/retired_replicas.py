"""Which replicas a node should delete, decided at each heartbeat at the cost of what changed since the last one.

A node deletes its replica of a partition (docs/node.md, membership) that was forgotten; that it is the primary of
itself; or whose live primary no longer ships to it while the plan in force gives it no role in the partition's
group. It keeps one of a partition this controller never saw (it restarted) and one whose primary is dead (its
replicas are what failover wants).

Each node's verdicts change only when one of their inputs does, so a heartbeat looks again at: the replicas the node
started holding and those of partitions it started or stopped claiming (`NodeRecord.keys_version`); those of task
partitions whose groups changed (`ReplicaGroups.groups_changed_since`) or whose partitions appeared, went or changed
primary (`Membership.tasks_changed_since`); and those still waiting for their primary to stop shipping to it (the
primary's report says when). Every replica of the node is looked at when a node joined, moved or died anywhere, or
the logs no longer reach back to its last heartbeat.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from statestore.cluster.membership import Membership
from statestore.controller.replica_groups import PlanInForce, ReplicaGroups
from statestore.partition_key import task_partition_key_of
from statestore.rpc import common_pb2


@dataclass(frozen=True)
class _Checked:
    node_changes: int  # Membership.node_changes at the last look
    keys_version: int  # the node's keys_version then
    group_position: int
    task_position: int
    held: frozenset[str]  # the replicas the node held then
    claimed: frozenset[str]  # the partitions it claimed then
    waiting: frozenset[str]  # replicas placed elsewhere that their primary still shipped to


class RetiredReplicas:
    """Per node, what its last heartbeat was told to delete and what still waits."""

    def __init__(self, membership: Membership, chooser: ReplicaGroups) -> None:
        self._membership = membership
        self._chooser = chooser
        self._lock = threading.Lock()
        self._checked: dict[str, _Checked] = {}

    def of(self, node_id: str) -> list[common_pb2.StoreRef]:
        """The replicas `node_id` should delete now (each named once: a node told forgets it at once)."""
        record = self._membership.node(node_id)
        if record is None:
            return []
        with self._lock:
            last = self._checked.get(node_id)
        node_changes = self._membership.node_changes
        group_changes, group_position, plan = self._chooser.groups_changed_since(last.group_position if last else None)
        task_changes, task_position = self._membership.tasks_changed_since(last.task_position if last else None)
        keys_version = record.keys_version
        replicas = self._membership.replicas_of(node_id)
        held = frozenset(replicas)
        claimed = frozenset(record.primaries)
        if last is None or last.node_changes != node_changes or group_changes is None or task_changes is None:
            candidates: set[str] = set(held)
        else:
            candidates = set(last.waiting)
            if last.keys_version != keys_version:
                candidates |= (held - last.held) | ((claimed ^ last.claimed) & held)
            changed = group_changes | task_changes
            if changed:  # by the replicas' own keys: a forgotten partition's is gone from the task's index
                candidates.update(key for key in held if task_partition_key_of(key) in changed)
        retired: dict[str, common_pb2.StoreRef] = {}
        waiting = set()
        for key in candidates:
            store = replicas.get(key)
            if store is None:
                continue
            verdict = self._verdict(key, node_id, plan)
            if verdict is True:
                retired[key] = store
            elif verdict is None:
                waiting.add(key)
        with self._lock:
            if len(self._checked) > 64 and len(self._checked) > 2 * len(self._membership.nodes()) + 16:
                # Nodes the membership dropped (dead past forget_after: executors come and go for the life of an
                # application) take their entries with them.
                for gone in [n for n in self._checked if self._membership.node(n) is None]:
                    del self._checked[gone]
            self._checked[node_id] = _Checked(
                node_changes,
                keys_version,
                group_position,
                task_position,
                held - retired.keys(),
                claimed,
                frozenset(waiting),
            )
        return list(retired.values())

    def _verdict(self, key: str, node_id: str, plan: PlanInForce) -> bool | None:
        """True: delete the replica; False: keep it; None: keep it for now, placed elsewhere while its primary still
        ships to it."""
        partition = self._membership.partition(key)
        if partition is None:
            return self._membership.is_forgotten(key)
        if self._membership.claims(node_id, key):
            return True
        if self._chooser.has_role(key, node_id, plan) is not False:
            return False
        if self._shipping_stopped(partition.primary, key, node_id, partition.report.replicas):
            return True
        return None

    def _shipping_stopped(self, primary: str, key: str, node_id: str, replicas: list) -> bool:
        """Whether the partition's primary is alive, claims it, and no longer lists `node_id` among the replicas
        it ships to (so a retired replica is not recreated by shipments still on their way)."""
        if not self._membership.claims(primary, key):
            return False
        return node_id not in {r.node_id for r in replicas}
