"""What each node last heard of its replica groups, so that a heartbeat carries only the groups that changed.

A node echoes the `groups_epoch` of the last reply it applied. When that is the epoch the controller last answered
it with, the reply lists only the groups that changed since (none, in O(1), when neither the plan, membership nor the
partitions the node reports moved: `ReplicaGroups.generation`, `Membership.changes`, `NodeRecord.keys_version`);
otherwise every group of the node's primaries, under a new epoch. Only partitions the node itself claims count: a
node ignores the group of one it is not primary of (yet). A lost reply, a restarted node (epoch 0) or a restarted
controller (epochs start at a random number) so gets every group again, never a delta against a state it does not
have.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

from statestore.controller.membership import Membership
from statestore.controller.replica_groups import PlanInForce, ReplicaGroups
from statestore.rpc import control_pb2


@dataclass(frozen=True)
class _Sent:
    epoch: int
    stamp: tuple  # (plan generation, membership changes, the node's keys version) the groups were computed at
    groups: dict[str, tuple[tuple[str, str], ...]]  # partition key -> replicas as (node id, address)


class SentGroups:
    """Per node, the groups the controller last answered it with."""

    def __init__(self, membership: Membership, chooser: ReplicaGroups) -> None:
        self._membership = membership
        self._chooser = chooser
        self._lock = threading.Lock()
        self._sent: dict[str, _Sent] = {}
        self._next_epoch = random.randrange(1, 1 << 48)

    def answer(
        self, node_id: str, echoed: int, plan: PlanInForce
    ) -> tuple[list[control_pb2.ReplicaGroup], int]:
        """The groups to send `node_id`, whose last applied reply had epoch `echoed`, and the reply's epoch."""
        node = self._membership.node(node_id)
        claimed = node.primaries if node is not None else {}
        stamp = (self._chooser.generation, self._membership.changes, node.keys_version if node is not None else 0)
        with self._lock:
            sent = self._sent.get(node_id)
        delta = sent is not None and echoed == sent.epoch
        if delta and sent.stamp == stamp:
            return [], sent.epoch
        # Only the partitions the node claims: it applies no group of a partition it is not primary of, so one
        # sent before it claims it (a restarted node's first heartbeat) must be sent again once it does.
        records = {p.key: p for p in self._membership.primaries_of(node_id) if p.key in claimed}
        now: dict[str, tuple[tuple[str, str], ...]] = {}
        for key in records:
            members = self._chooser.choose_replica_group(key, node_id, plan)
            now[key] = tuple(
                (member, record.address) for member in members if (record := self._membership.node(member)) is not None
            )
        changed = [key for key, group in now.items() if not delta or sent.groups.get(key) != group]
        with self._lock:
            if delta and not changed:
                epoch = sent.epoch
            else:
                epoch = self._next_epoch
                self._next_epoch += 1
            self._sent[node_id] = _Sent(epoch, stamp, now)
        groups = [
            control_pb2.ReplicaGroup(
                store=records[key].store,
                primary_node=node_id,
                replicas=[control_pb2.NodeRef(node_id=n, address=a) for n, a in now[key]],
            )
            for key in changed
        ]
        return groups, epoch
