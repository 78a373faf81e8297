"""What each node last heard of its replica groups, so that a heartbeat carries only the groups that changed.

A node echoes the `groups_epoch` of the last reply it applied. When that is the epoch the controller last answered
it with, the reply lists only the groups that changed since, and finding them costs O(what changed): the task
partitions whose groups the plan changed (`ReplicaGroups.groups_changed_since`), those whose partitions appeared,
went or changed primary (`Membership.tasks_changed_since`), and the partitions the node started or stopped claiming
(`NodeRecord.keys_version`); none, in O(1), when nothing moved. Otherwise (a first heartbeat, an epoch the
controller did not send last, a node joining, moving or dying anywhere, a change to every group) every group of the
node's primaries is computed, under a new epoch. Only partitions the node itself claims count: a node ignores the
group of one it is not primary of (yet). A lost reply, a restarted node (epoch 0) or a restarted controller (epochs
start at a random number) so gets every group again, never a delta against a state it does not have.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from statestore.cluster.membership import Membership, NodeRecord
from statestore.controller.replica_groups import PlanInForce, ReplicaGroups
from statestore.rpc import common_pb2, control_pb2

_Group = tuple[tuple[str, str], ...]  # replicas as (node id, address)


@dataclass(frozen=True)
class _Sent:
    epoch: int
    node_changes: int  # Membership.node_changes when the groups were computed
    keys_version: int  # the node's NodeRecord.keys_version then
    group_position: int  # ReplicaGroups.groups_changed_since's position then
    task_position: int  # Membership.tasks_changed_since's position then
    groups: dict[str, _Group]  # partition key -> its group as sent


class SentGroups:
    """Per node, the groups the controller last answered it with."""

    def __init__(self, membership: Membership, chooser: ReplicaGroups) -> None:
        self._membership = membership
        self._chooser = chooser
        self._lock = threading.Lock()
        self._sent: dict[str, _Sent] = {}
        self._next_epoch = random.randrange(1, 1 << 48)

    def answer(self, node_id: str, echoed: int) -> tuple[list[control_pb2.ReplicaGroup], int]:
        """The groups to send `node_id`, whose last applied reply had epoch `echoed`, and the reply's epoch."""
        node = self._membership.node(node_id)
        with self._lock:
            sent = self._sent.get(node_id)
        delta = sent is not None and echoed == sent.epoch
        node_changes = self._membership.node_changes
        group_changes, group_position, plan = self._chooser.groups_changed_since(
            sent.group_position if delta else None
        )
        task_changes, task_position = self._membership.tasks_changed_since(sent.task_position if delta else None)
        keys_version = node.keys_version if node is not None else 0
        stores: dict[str, common_pb2.StoreRef] = {}
        if delta and sent.node_changes == node_changes and group_changes is not None and task_changes is not None:
            candidates = self._candidates(sent, node, group_changes | task_changes)
            now = sent.groups
            if candidates:
                now = dict(sent.groups)
                stores = self._compute(node_id, node, candidates, plan, now)
            changed = [key for key in candidates if key in now and sent.groups.get(key) != now[key]]
        else:
            now = {}
            stores = self._compute(node_id, node, [p.key for p in self._membership.primaries_of(node_id)], plan, now)
            changed = [key for key, group in now.items() if not delta or sent.groups.get(key) != group]
        with self._lock:
            if delta and not changed:
                epoch = sent.epoch
            else:
                epoch = self._next_epoch
                self._next_epoch += 1
            if len(self._sent) > 64 and len(self._sent) > 2 * len(self._membership.nodes()) + 16:
                # Nodes the membership dropped (dead past forget_after: executors come and go for the life of an
                # application) take their entries with them.
                for gone in [n for n in self._sent if self._membership.node(n) is None]:
                    del self._sent[gone]
            self._sent[node_id] = _Sent(epoch, node_changes, keys_version, group_position, task_position, now)
        groups = [
            control_pb2.ReplicaGroup(
                store=stores[key],
                primary_node=node_id,
                replicas=[control_pb2.NodeRef(node_id=n, address=a) for n, a in now[key]],
            )
            for key in changed
        ]
        return groups, epoch

    def _candidates(self, sent: _Sent, node: NodeRecord | None, tasks: set[str]) -> set[str]:
        """The partitions whose group to `node` may differ from the one `sent`: of the task partitions `tasks`,
        and those the node started or stopped claiming."""
        claimed = node.primaries if node is not None else {}
        candidates: set[str] = set()
        if node is None or node.keys_version != sent.keys_version:
            candidates.update(claimed.keys() ^ sent.groups.keys())
        for task in tasks:
            candidates.update(key for key in self._membership.keys_of_task(task) if key in claimed)
        return candidates

    def _compute(
        self,
        node_id: str,
        node: NodeRecord | None,
        keys: Iterable[str],
        plan: PlanInForce,
        now: dict[str, _Group],
    ) -> dict[str, common_pb2.StoreRef]:
        """Put into `now` the group of each of `keys` the node claims and is primary of (and take the others out);
        returns the stores of those put in."""
        claimed = node.primaries if node is not None else {}
        stores: dict[str, common_pb2.StoreRef] = {}
        for key in keys:
            record = self._membership.partition(key)
            # Only the partitions the node claims: it applies no group of a partition it is not primary of, so
            # one sent before it claims it (a restarted node's first heartbeat) must be sent again once it does.
            if record is None or record.primary != node_id or key not in claimed:
                now.pop(key, None)
                continue
            members = self._chooser.choose_replica_group(key, node_id, plan)
            now[key] = tuple(
                (member, found.address) for member in members if (found := self._membership.node(member)) is not None
            )
            stores[key] = record.store
        return stores
