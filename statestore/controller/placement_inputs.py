"""What the controller feeds placement: a topology of the live nodes, each partition's demand, the pins.

Capacity rule (docs/node.md): every live node gets the even share of all copies,
`ceil(copies * partitions / nodes)`, plus one spare slot so a re-plan can leave roles where they are,
raised where Spark's tasks crowd a node to that node's pinned primaries plus its even share of replicas.
Equal capacities make the convex load cost (k-th role costs k / capacity) spread roles evenly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from placement import Node, PartitionDemand, ReplicaGroup, Topology
from statestore.cluster.membership import NodeRecord, PartitionRecord

# Used until a partition's replicas have reported lag (bytes per version behind) to estimate from.
DEFAULT_INCREMENT_BYTES = 1 << 20
DEFAULT_STATE_BYTES = 64 << 20


def build_topology(nodes: Sequence[NodeRecord], copies: int, pins: Mapping[str, str], partitions: int) -> Topology:
    """A topology of `nodes` (live), each its own rack unless it reported one, with the capacity rule above."""
    if not nodes:
        return Topology(())
    even = math.ceil(copies * partitions / len(nodes))
    replicas_even = math.ceil((copies - 1) * partitions / len(nodes))
    pinned = {record.node_id: 0 for record in nodes}
    for node in pins.values():
        if node in pinned:
            pinned[node] += 1
    return Topology(
        tuple(
            Node(
                record.node_id,
                record.rack or f"node:{record.node_id}",
                capacity=max(even, pinned[record.node_id] + replicas_even) + 1,
            )
            for record in nodes
        )
    )


def demand_of(partition: PartitionRecord, state_bytes: int = 0) -> PartitionDemand:
    """A partition's demand from what nodes report, defaults where they report nothing yet.

    Increment bytes per commit: the primary's node's mean of its last increments, else estimated from a
    replica `lag_versions` behind with `lag_bytes` missing, else 1 MiB. State size: `state_bytes` (the
    largest replica on disk, `Membership.state_bytes`), else 64 MiB.
    """
    increment = partition.report.increment_bytes
    if increment <= 0:
        samples = [
            r.lag_bytes / (partition.report.version - r.acked_version)
            for r in partition.report.replicas
            if r.lag_bytes > 0 and partition.report.version > r.acked_version
        ]
        increment = max(1, int(max(samples))) if samples else DEFAULT_INCREMENT_BYTES
    return PartitionDemand(partition.key, state_bytes if state_bytes > 0 else DEFAULT_STATE_BYTES, increment)


def repair_topology(
    nodes: Sequence[NodeRecord],
    copies: int,
    pins: Mapping[str, str],
    partitions: int,
    kept: Iterable[ReplicaGroup],
    touched: Sequence[PartitionDemand],
) -> Topology:
    """The topology a repair re-places the `touched` groups on (statestore.controller.replica_groups): each live
    node with the room the capacity rule leaves it beside the `kept` groups' roles, those roles counted as its load
    (so a node already holding many is dearer), and room at least for the touched primaries pinned to it."""
    full = build_topology(nodes, copies, pins, partitions)
    used = Counter(node for group in kept for node in group.nodes)
    pinned = Counter(pins[d.id] for d in touched if d.id in pins)
    return Topology(
        tuple(
            replace(
                node,
                capacity=max((node.capacity or 0) - used[node.id], pinned[node.id]),
                load=min(used[node.id] / max(node.capacity or 0, 1), 1.0),
            )
            for node in full.nodes
        )
    )
