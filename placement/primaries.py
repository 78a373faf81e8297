"""Even out primaries: where a partition's task runs is where its batch's work is done.

The placement cost counts roles, not which role a copy plays, so a placement can leave one node with many
primaries and another with only replicas. `balance_primaries` swaps roles inside groups (the cheapest move
there is: a hand-over costs one increment, no copy) until no node has two primaries more than another that
could take one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from placement.groups import Placement, ReplicaGroup


def balance_primaries(placement: Placement, fixed: frozenset[str] = frozenset()) -> Placement:
    """`placement` with primaries swapped to replicas of the same group until primary counts per node differ by
    at most one wherever a swap can fix it; partitions in `fixed` keep their primary. Deterministic."""
    groups = dict(placement.items())
    nodes = sorted({node for group in groups.values() for node in group.nodes})
    while True:
        count = Counter({node: 0 for node in nodes})
        count.update(group.primary for group in groups.values())
        swap = _best_swap(groups, count, fixed)
        if swap is None:
            return Placement(groups)
        partition, node = swap
        group = groups[partition]
        replicas = tuple(group.primary if r == node else r for r in group.replicas)
        groups[partition] = ReplicaGroup(node, replicas)


def _best_swap(groups: Mapping[str, ReplicaGroup], count: Counter, fixed: frozenset[str]) -> tuple[str, str] | None:
    """The swap (partition, new primary) that takes a primary from the busiest node that can give one to the
    idlest node that can take it, or None when every possible swap would not narrow the gap."""
    for busy in sorted(count, key=lambda n: (-count[n], n)):
        candidates = [
            (count[replica], replica, partition)
            for partition, group in sorted(groups.items())
            if group.primary == busy and partition not in fixed
            for replica in group.replicas
            if count[replica] + 1 < count[busy]
        ]
        if candidates:
            _, replica, partition = min(candidates)
            return partition, replica
    return None
