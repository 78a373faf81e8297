"""From a topology, the partitions' demands and the placement in force to the dense `Problem`.

This is where requests are checked: too few nodes for the copies asked, or too little room, raise
`InfeasiblePlacement`; the rack limit is chosen (the fewest copies per rack the racks allow); and the
current placement is mapped to holders, old primaries and the roles that may stay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from placement.costs import CostModel
from placement.demand import PartitionDemand, check_unique
from placement.groups import Placement
from placement.problem import Problem
from placement.topology import Topology


class InfeasiblePlacement(ValueError):
    """The request cannot be met: too few nodes for the copies asked, or too little capacity."""

    def __init__(self, message: str, *, partitions: int, copies: int, needed: int, available: int) -> None:
        super().__init__(message)
        self.partitions = partitions
        self.copies = copies
        self.needed = needed
        self.available = available


def build_problem(
    topology: Topology,
    demands: Sequence[PartitionDemand],
    replicas: int,
    cost_model: CostModel,
    current: Placement | None = None,
    pinned_primaries: Mapping[str, str] | None = None,
) -> Problem:
    """The dense problem; refuses infeasible requests with `InfeasiblePlacement`.

    `pinned_primaries` maps partitions to the node their primary must stay on (`_pin`).
    """
    if replicas < 0:
        raise ValueError(f"replicas must be >= 0, got {replicas}")
    check_unique(demands)
    partitions, z, copies = len(demands), len(topology), replicas + 1
    size = np.array([d.size_bytes for d in demands], dtype=float)
    increment = np.array([d.increment_bytes for d in demands], dtype=float)
    capacity, slots = _node_slots(topology, size, partitions)
    rack, rack_limit = _rack_limit(topology, slots, partitions, copies)

    unit = increment.mean() if partitions and increment.mean() > 0 else 1.0
    per_role = cost_model.horizon_batches * cost_model.load_weight * unit
    load = np.array([node.load for node in topology.nodes])
    width = int(slots.max(initial=0))
    j = np.arange(1, width + 1)[None, :]
    slot_costs = per_role * (load[:, None] + j / np.maximum(capacity, 1)[:, None])
    slot_costs = np.where(j <= slots[:, None], slot_costs, np.inf)

    holder = np.zeros((partitions, z), dtype=bool)
    old_primary = np.full(partitions, -1, dtype=np.int64)
    start = np.full((partitions, copies), -1, dtype=np.int64)
    known = np.array([current is not None and d.id in current for d in demands], dtype=bool)
    pinned = _pin(topology, demands, pinned_primaries or {}, slots, copies)
    if current is not None:
        _map_current(topology, demands, current, slots, holder, old_primary, start)
    _place_pins(start, pinned)
    _drop_conflicts(start, rack, rack_limit, slots, pinned)
    return Problem(
        node_ids=tuple(node.id for node in topology.nodes),
        partition_ids=tuple(d.id for d in demands),
        increment=increment,
        size=size,
        hops=topology.hops.astype(float),
        rack=rack,
        rack_limit=rack_limit,
        slot_costs=slot_costs,
        holder=holder,
        old_primary=old_primary,
        start=start,
        known=known,
        horizon=cost_model.horizon_batches,
        migration_weight=cost_model.migration_weight,
        pinned=pinned,
    )


def _pin(
    topology: Topology,
    demands: Sequence[PartitionDemand],
    pins: Mapping[str, str],
    slots: np.ndarray,
    copies: int,
) -> np.ndarray:
    """Each partition's pinned primary node index (-1: free); refuses pins no placement can honour."""
    pinned = np.full(len(demands), -1, dtype=np.int64)
    position = {d.id: p for p, d in enumerate(demands)}
    unknown = sorted(set(pins) - set(position))
    if unknown:
        raise ValueError(f"pinned primaries name partitions without a demand: {', '.join(unknown[:5])}")
    index = topology.index
    for partition, node in pins.items():
        if node not in index or slots[index[node]] == 0:
            why = "is not in the topology" if node not in index else "takes no roles (draining or no capacity)"
            raise InfeasiblePlacement(
                f"partition {partition}'s primary is pinned to node {node}, which {why}",
                partitions=len(demands), copies=copies, needed=1, available=0,
            )
        pinned[position[partition]] = index[node]
    per_node = np.bincount(pinned[pinned >= 0], minlength=len(slots))
    for n in np.flatnonzero(per_node > slots):
        raise InfeasiblePlacement(
            f"{per_node[n]} primaries are pinned to node {topology.nodes[n].id}, which can hold only "
            f"{slots[n]} roles",
            partitions=len(demands), copies=copies, needed=int(per_node[n]), available=int(slots[n]),
        )
    return pinned


def _place_pins(start: np.ndarray, pinned: np.ndarray) -> None:
    """Put pinned primaries in place; a current replica on its partition's pinned node gives way to it."""
    for p in np.flatnonzero(pinned >= 0):
        replicas = [n for n in start[p, 1:] if n >= 0 and n != pinned[p]]
        start[p, 0] = pinned[p]
        start[p, 1:] = -1
        start[p, 1 : 1 + len(replicas)] = replicas


def _node_slots(topology: Topology, size: np.ndarray, partitions: int) -> tuple[np.ndarray, np.ndarray]:
    """Per node: its capacity in roles (for utilisation) and the roles it may take in this problem.

    A byte capacity is turned into roles of the largest partition's size: never overfull in bytes, but
    it may refuse a mix of sizes that a bin packer would fit.
    """
    largest = size.max(initial=0.0)
    capacity = np.zeros(len(topology), dtype=np.int64)
    for n, node in enumerate(topology.nodes):
        if node.draining:
            continue
        if node.capacity is None and node.capacity_bytes is None:
            raise ValueError(f"node {node.id!r} has no capacity: give capacity (partitions) or capacity_bytes")
        roles = node.capacity if node.capacity is not None else partitions
        if node.capacity_bytes is not None and largest > 0:
            roles = min(roles, int(node.capacity_bytes // largest))
        capacity[n] = roles
    draining = np.array([node.draining for node in topology.nodes], dtype=bool)
    # A node holds at most one copy of each partition.
    slots = np.where(draining, 0, np.minimum(capacity, partitions))
    return capacity, slots


def _rack_limit(topology: Topology, slots: np.ndarray, partitions: int, copies: int) -> tuple[np.ndarray, int]:
    """Each node's rack index, and the fewest copies per rack that capacities allow every partition."""
    needed = copies * partitions
    usable_nodes = int((slots > 0).sum())
    if partitions and usable_nodes < copies:
        raise InfeasiblePlacement(
            f"{partitions} partitions need {_copies(copies)} each on distinct nodes, but only "
            f"{usable_nodes} of {len(topology)} nodes can take roles",
            partitions=partitions, copies=copies, needed=copies, available=usable_nodes,
        )
    node_room = int(np.minimum(slots, partitions).sum())
    if node_room < needed:
        raise InfeasiblePlacement(
            f"{partitions} partitions x {copies} copies need {needed} role slots, but the nodes offer only "
            f"{node_room} (total capacity {int(slots.sum())}; a node holds at most one copy of a partition)",
            partitions=partitions, copies=copies, needed=needed, available=node_room,
        )
    index = {rack: i for i, rack in enumerate(topology.racks)}
    rack = np.array([index[node.rack] for node in topology.nodes], dtype=np.int64)
    # A rack holds at most rack_limit copies of a partition, each on its own node.
    per_node = np.minimum(slots, partitions)
    rack_room = np.bincount(rack, weights=per_node, minlength=len(index))
    usable_racks = max(int((rack_room > 0).sum()), 1)
    limit = -(-copies // usable_racks)
    while np.minimum(rack_room, limit * partitions).sum() < needed:
        limit += 1
    return rack, limit


def _copies(copies: int) -> str:
    if copies == 1:
        return "1 copy (the primary)"
    return f"{copies} copies (a primary and {copies - 1} replica{'s' if copies > 2 else ''})"


def _map_current(
    topology: Topology,
    demands: Sequence[PartitionDemand],
    current: Placement,
    slots: np.ndarray,
    holder: np.ndarray,
    old_primary: np.ndarray,
    start: np.ndarray,
) -> None:
    """Fill holders, old primaries and the usable current roles from `current`."""
    index = topology.index
    for p, demand in enumerate(demands):
        group = current.get(demand.id)
        if group is None:
            continue
        for node in group.nodes:
            if node in index:
                holder[p, index[node]] = True
        if group.primary in index:
            old_primary[p] = index[group.primary]
            if slots[index[group.primary]] > 0:
                start[p, 0] = index[group.primary]
        kept = [index[r] for r in group.replicas if r in index and slots[index[r]] > 0]
        kept = kept[: start.shape[1] - 1]
        start[p, 1 : 1 + len(kept)] = kept


def _drop_conflicts(
    start: np.ndarray, rack: np.ndarray, rack_limit: int, slots: np.ndarray, pinned: np.ndarray
) -> None:
    """Unplace current roles that now break a constraint: a crowded rack, or a node over capacity.

    Pinned primaries are never unplaced (`_pin` checked that they fit).
    """
    for p in range(start.shape[0]):
        per_rack: dict[int, int] = {}
        for k in range(start.shape[1]):
            node = start[p, k]
            if node < 0:
                continue
            r = int(rack[node])
            if per_rack.get(r, 0) >= rack_limit:
                start[p, k] = -1
            else:
                per_rack[r] = per_rack.get(r, 0) + 1
    counts = np.bincount(start[start >= 0], minlength=len(slots))
    # Replicas of the last partitions go first, primaries last.
    for k in range(start.shape[1] - 1, -1, -1):
        for p in range(start.shape[0] - 1, -1, -1):
            node = start[p, k]
            if node >= 0 and counts[node] > slots[node] and not (k == 0 and pinned[p] >= 0):
                counts[node] -= 1
                start[p, k] = -1
