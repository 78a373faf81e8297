"""One placement problem as dense arrays: the form the solver, the baselines and the tests work on.

An assignment is an integer array `X` of shape (partitions, 1 + replicas): column 0 is the primary's node,
columns 1.. the replicas' nodes, -1 where a role is not placed yet.

The copies of a partition sit on distinct nodes, and at most `rack_limit` of them on one rack:
`rack_limit` is the smallest the racks allow, ceil(copies / racks), raised only as far as rack capacity
forces. With enough racks it is 1 (distinct racks); with 2 racks and 3 copies, 2 (both racks used); with
one rack, the number of copies (distinct nodes only).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from placement.costs import CostBreakdown
from placement.groups import Placement, ReplicaGroup


@dataclass
class Problem:
    """Dense arrays of one placement problem (internal to the package)."""

    node_ids: tuple[str, ...]
    partition_ids: tuple[str, ...]
    increment: np.ndarray  # (l,) bytes per batch
    size: np.ndarray  # (l,) bytes of state
    hops: np.ndarray  # (z, z) switch hops
    rack: np.ndarray  # (z,) rack index of each node
    rack_limit: int  # most copies of one partition on one rack
    slot_costs: np.ndarray  # (z, S) load cost of the (j+1)-th role on a node over the horizon; inf: no slot
    holder: np.ndarray  # (l, z) node holds a live copy of the partition now
    old_primary: np.ndarray  # (l,) node of the current primary, -1 if none or gone
    start: np.ndarray  # (l, 1 + q) current roles still usable, -1 where a role must be placed
    known: np.ndarray  # (l,) the partition has a current group: its new copies are migrations
    horizon: float
    migration_weight: float
    pinned: np.ndarray = field(default=None)  # type: ignore[assignment]  # (l,) node a primary must stay on, -1: free

    def __post_init__(self) -> None:
        if self.pinned is None:
            self.pinned = np.full(len(self.partition_ids), -1, dtype=np.int64)

    @property
    def replicas(self) -> int:
        return self.start.shape[1] - 1

    @property
    def partitions(self) -> int:
        return len(self.partition_ids)

    @property
    def nodes(self) -> int:
        return len(self.node_ids)

    @cached_property
    def slots(self) -> np.ndarray:
        """Roles each node may take (its finite slot costs)."""
        return np.isfinite(self.slot_costs).sum(axis=1)

    @cached_property
    def primary_costs(self) -> np.ndarray:
        """(l, z): the hand-over cost of a partition's primary sitting on each node.

        Moving the primary of a partition that has a current group costs one increment (the new primary
        must have the last one before it serves); keeping it where it is costs nothing. A pinned primary
        (placed by someone else, e.g. where Spark runs the task) costs nothing on its node and inf
        elsewhere: every neighbourhood prices a primary through this array, so none can move it.
        """
        nodes = np.arange(self.nodes)[None, :]
        moved = nodes != self.old_primary[:, None]
        costs = self.migration_weight * (self.increment * self.known)[:, None] * moved
        pinned = self.pinned >= 0
        if pinned.any():
            costs[pinned] = np.where(nodes == self.pinned[pinned, None], 0.0, np.inf)
        return costs

    @cached_property
    def cumulative_slot_costs(self) -> np.ndarray:
        """Load cost of a node holding j+1 roles, at [n, j]."""
        return np.cumsum(self.slot_costs, axis=1)

    @cached_property
    def same_rack(self) -> np.ndarray:
        """(z, z): the two nodes share a rack."""
        return self.rack[:, None] == self.rack[None, :]

    @cached_property
    def position_classes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Nodes that look alike from every other rack, for choosing one group in O(z + classes^2).

        Two nodes share a class when they share a rack and are as many hops from every node of every
        other rack (in a tree, the nodes of one rack). Returns each node's class, the hops between
        classes of different racks, and each class's rack. Used when `rack_limit` is 1.
        """
        keys: dict[tuple, int] = {}
        node_class = np.empty(self.nodes, dtype=np.int64)
        for n in range(self.nodes):
            outside = np.where(self.same_rack[n], -1, self.hops[n])
            node_class[n] = keys.setdefault((int(self.rack[n]), outside.tobytes()), len(keys))
        first = np.array([np.flatnonzero(node_class == c)[0] for c in range(len(keys))], dtype=np.int64)
        return node_class, self.hops[np.ix_(first, first)], self.rack[first]

    @cached_property
    def lookahead(self) -> np.ndarray:
        """Per node, the mean hops to the `replicas` nearest nodes a replica of a primary there may use.

        Used only while placing primaries before their replicas, as an estimate of the replica traffic a
        primary on that node will cause.
        """
        if self.replicas == 0:
            return np.zeros(self.nodes)
        hops = np.where(self.slots[None, :] > 0, self.hops, np.inf)
        nearest = replica_choice_cost(hops, self.rack, self.rack_limit, self.replicas)
        finite = nearest[np.isfinite(nearest)]
        return np.where(np.isfinite(nearest), nearest, finite.max(initial=0.0)) / self.replicas

    def forbidden(self, others: np.ndarray) -> np.ndarray:
        """(r, z): nodes where another copy may not go, given each row's other copies (-1: none)."""
        placed = (others >= 0)[:, :, None]
        node = np.arange(self.nodes)[None, None, :]
        on_node = (placed & (others[:, :, None] == node)).any(axis=1)
        same_rack = placed & (self.rack[np.maximum(others, 0)][:, :, None] == self.rack[None, None, :])
        return on_node | (same_rack.sum(axis=1) >= self.rack_limit)

    def restrict(self, rows: np.ndarray, slot_costs: np.ndarray) -> Problem:
        """The sub-problem of partitions `rows` with the node slots `slot_costs` (a share of this one's)."""
        return replace(
            self,
            partition_ids=tuple(self.partition_ids[i] for i in rows),
            increment=self.increment[rows],
            size=self.size[rows],
            slot_costs=slot_costs,
            holder=self.holder[rows],
            old_primary=self.old_primary[rows],
            start=self.start[rows],
            known=self.known[rows],
            pinned=self.pinned[rows],
        )

    def counts(self, X: np.ndarray) -> np.ndarray:
        """Roles per node in assignment `X`."""
        placed = X[X >= 0]
        return np.bincount(placed, minlength=self.nodes)

    def evaluate(self, X: np.ndarray) -> CostBreakdown:
        """Cost of a complete assignment (every role placed)."""
        if X.size and X.min() < 0:
            raise ValueError("cannot evaluate an assignment with unplaced roles")
        rows = np.arange(self.partitions)[:, None]
        traffic = self.horizon * float((self.increment[:, None] * self.hops[X[:, :1], X[:, 1:]]).sum())
        counts = self.counts(X)
        used = counts > 0
        if (counts > self.slot_costs.shape[1]).any():
            load = np.inf
        else:
            load = float(self.cumulative_slot_costs[used, counts[used] - 1].sum())
        new_copies = (self.size[:, None] * (~self.holder[rows, X] & self.known[:, None])).sum()
        primary = X[:, 0] if X.size else np.zeros(0, dtype=np.int64)
        handovers = self.primary_costs[np.arange(self.partitions), primary].sum()
        migration = self.migration_weight * float(new_copies) + float(handovers)
        return CostBreakdown(traffic=traffic, load=load, migration=migration)

    def violations(self, X: np.ndarray) -> list[str]:
        """Every broken constraint of assignment `X`: unplaced roles, shared nodes, crowded racks, overfull nodes."""
        problems = []
        if X.size and X.min() < 0:
            problems.append(f"{int((X < 0).sum())} roles unplaced")
            return problems
        for p, row in enumerate(X.tolist()):
            if len(set(row)) < len(row):
                problems.append(f"partition {self.partition_ids[p]} has two copies on one node")
            racks = np.bincount(self.rack[row])
            if racks.max(initial=0) > self.rack_limit:
                problems.append(f"partition {self.partition_ids[p]} has {racks.max()} copies on one rack")
            if self.pinned[p] >= 0 and row[0] != self.pinned[p]:
                problems.append(f"partition {self.partition_ids[p]} has its pinned primary moved")
        counts = self.counts(X)
        for n in np.flatnonzero(counts > self.slots):
            problems.append(f"node {self.node_ids[n]} holds {counts[n]} roles, capacity {self.slots[n]}")
        return problems

    def role_costs(self, X: np.ndarray, rows: np.ndarray, ranks: np.ndarray, *, lookahead: bool) -> np.ndarray:
        """Cost of putting role `ranks[i]` of partition `rows[i]` on each node, every other role fixed.

        Load is left out: it depends on how many roles a node ends with, so it lives in the node slots.
        Nodes the partition's other copies rule out cost inf. With `lookahead`, a primary whose replicas
        are not placed yet is charged hops to the nearest nodes its replicas could use.
        """
        increment = self.increment[rows][:, None]
        holder = self.holder[rows]
        known = self.known[rows][:, None]
        cost = self.migration_weight * self.size[rows][:, None] * (~holder & known)
        others = X[rows]
        is_primary = ranks == 0
        hops = np.zeros((len(rows), self.nodes))
        if is_primary.any():
            replicas = others[is_primary, 1:]
            placed = replicas >= 0
            to_replicas = np.where(placed[:, :, None], self.hops[np.maximum(replicas, 0)], 0.0).sum(axis=1)
            if lookahead:
                to_replicas += (~placed).sum(axis=1)[:, None] * self.lookahead[None, :]
            hops[is_primary] = to_replicas
            cost[is_primary] += self.primary_costs[rows[is_primary]]
        if (~is_primary).any():
            primary = others[~is_primary, 0]
            hops[~is_primary] = np.where((primary >= 0)[:, None], self.hops[np.maximum(primary, 0)], 0.0)
        cost += self.horizon * increment * hops
        mine = np.arange(others.shape[1])[None, :] == ranks[:, None]
        cost[self.forbidden(np.where(mine, -1, others))] = np.inf
        return cost

    def copy_costs(self, X: np.ndarray, rows: np.ndarray, which: np.ndarray) -> np.ndarray:
        """Cost of moving copy `which[i]` (a column of X) of partition `rows[i]` to each node.

        The partition's other copies stay; whichever copy then makes the cheapest primary becomes it, so
        the cost is traffic plus hand-over of the best arrangement, plus the new copy's migration bytes.
        Load is left to the node slots; nodes the other copies rule out cost inf.
        """
        r, copies = len(rows), X.shape[1]
        group = X[rows]
        others = group[np.arange(copies)[None, :] != which[:, None]].reshape(r, copies - 1)
        increment = self.increment[rows][:, None]
        holder = self.holder[rows]
        new_copy = self.migration_weight * self.size[rows][:, None] * (~holder & self.known[rows][:, None])
        handover = self.primary_costs[rows]
        best = self.horizon * increment * self.hops[others].sum(axis=1) + handover  # the new copy leads
        if copies > 1:
            among = self.hops[others[:, :, None], others[:, None, :]].sum(axis=2)
            others_handover = handover[np.arange(r)[:, None], others]
            for i in range(copies - 1):  # copy i of the others leads
                lead = self.horizon * increment * (among[:, i : i + 1] + self.hops[others[:, i]])
                best = np.minimum(best, lead + others_handover[:, i : i + 1])
        cost = new_copy + best
        cost[self.forbidden(others)] = np.inf
        return cost

    def placement(self, X: np.ndarray) -> Placement:
        """The assignment as a `Placement` keyed by partition and node ids."""
        ids = self.node_ids
        return Placement(
            {
                partition: ReplicaGroup(ids[row[0]], tuple(ids[n] for n in row[1:]))
                for partition, row in zip(self.partition_ids, X.tolist(), strict=True)
            }
        )


def replica_choice_cost(costs: np.ndarray, rack: np.ndarray, rack_limit: int, q: int) -> np.ndarray:
    """For each row a (a primary on node a), the least sum of `q` of its columns (replica nodes).

    `costs` is (..., z, z), primaries by replicas, with any leading batch axes. Replicas avoid node a,
    and a rack holds at most `rack_limit` copies counting the primary's: a rack limit is a partition
    matroid, so taking each rack's cheapest allowed nodes, then the q cheapest of those, is exact. inf
    when no q nodes fit.
    """
    z = costs.shape[-1]
    costs = costs.copy()
    costs[..., np.arange(z), np.arange(z)] = np.inf
    pool = []
    for r in np.unique(rack):
        members = costs[..., rack == r]
        if members.shape[-1] > rack_limit:  # only the rack_limit cheapest can count
            members = np.partition(members, rack_limit - 1, axis=-1)[..., :rack_limit]
        ordered = np.sort(members, axis=-1)
        ordered[..., rack == r, rack_limit - 1 :] = np.inf  # the primary takes one of its rack's places
        pool.append(ordered)
    merged = np.concatenate(pool, axis=-1)
    if merged.shape[-1] < q:
        return np.full(costs.shape[:-1], np.inf)
    return np.partition(merged, q - 1, axis=-1)[..., :q].sum(axis=-1)
