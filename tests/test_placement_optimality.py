"""The solver against exhaustive search, with the cost recomputed from first principles.

Every valid placement of a small instance is enumerated (every primary, every set of replicas on
distinct nodes within the rack limit, for every partition, under node capacities) and priced by the
formula of placement/costs.py written out again here; the solver must find the minimum, for fresh
placements and for re-placements after a change.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from placement.assignment import NoAssignment, assign_to_slots
from placement.changes import LoadShifted, NodeFailed, NodeJoined, NodeLeft, apply_change
from placement.costs import CostModel
from placement.demand import PartitionDemand
from placement.groups import Placement
from placement.plan import plan_replica_groups
from placement.topology import Node, Topology


def feasible(topology: Topology, partitions: int, copies: int) -> bool:
    """The counting rule: q+1 nodes that take roles, and room for q+1 copies per partition."""
    room = [min(n.capacity, partitions) for n in topology.nodes if not n.draining and n.capacity > 0]
    return len(room) >= copies and sum(room) >= copies * partitions


def random_instance(rng: np.random.Generator) -> tuple[Topology, list[PartitionDemand], int]:
    """A small instance with at least one valid placement."""
    while True:
        topology, demands, replicas = _draw(rng)
        if feasible(topology, len(demands), replicas + 1):
            return topology, demands, replicas


def _draw(rng: np.random.Generator) -> tuple[Topology, list[PartitionDemand], int]:
    z = int(rng.integers(3, 6))
    racks = int(rng.integers(1, 4))
    nodes = []
    for i in range(z):
        rack = int(rng.integers(racks))
        nodes.append(
            Node(
                f"n{i}",
                f"r{rack}",
                ("core", f"pod{rack % 2}", f"r{rack}"),
                capacity=int(rng.integers(1, 4)),
                load=float(rng.choice([0.0, 0.3, 0.7])),
            )
        )
    partitions = int(rng.integers(2, 4))
    demands = [
        PartitionDemand(f"p{i}", int(rng.integers(1, 100)) * 1000, int(rng.integers(1, 100)) * 10)
        for i in range(partitions)
    ]
    return Topology(tuple(nodes)), demands, int(rng.integers(0, 3))


def rack_limit(topology: Topology, demands: list[PartitionDemand], copies: int) -> int:
    """The documented rule: fewest copies per rack that the racks' room allows."""
    room: dict[str, int] = {}
    for n in topology.nodes:
        if not n.draining:
            room[n.rack] = room.get(n.rack, 0) + min(n.capacity, len(demands))
    limit = math.ceil(copies / max(1, sum(1 for r in room.values() if r > 0)))
    while sum(min(r, limit * len(demands)) for r in room.values()) < copies * len(demands):
        limit += 1
    return limit


def brute_force(
    topology: Topology,
    demands: list[PartitionDemand],
    replicas: int,
    model: CostModel,
    current: Placement | None,
) -> float:
    """Least cost over every valid placement, by exhaustive enumeration."""
    ids = [n.id for n in topology.nodes]
    z, copies = len(ids), replicas + 1
    hops = topology.hops
    limit = rack_limit(topology, demands, copies)
    rack = [n.rack for n in topology.nodes]
    groups = []
    for primary in range(z):
        for rest in itertools.combinations([n for n in range(z) if n != primary], replicas):
            members = (primary, *rest)
            if max(sum(rack[m] == r for m in members) for r in set(rack)) <= limit:
                groups.append(members)
    unit = float(np.mean([d.increment_bytes for d in demands]))
    per_group = np.zeros((len(demands), len(groups)))
    for p, d in enumerate(demands):
        old = current.get(d.id) if current is not None else None
        holders = {ids.index(n) for n in old.nodes if n in ids} if old else set()
        for g, members in enumerate(groups):
            cost = model.horizon_batches * d.increment_bytes * sum(hops[members[0], r] for r in members[1:])
            if old is not None:
                moved = d.size_bytes * sum(m not in holders for m in members)
                if ids[members[0]] != old.primary:  # a hand-over: the new primary needs the last increment
                    moved += d.increment_bytes
                cost += model.migration_weight * moved
            per_group[p, g] = cost
    slots = np.array([0 if n.draining else n.capacity for n in topology.nodes])
    per_role = model.horizon_batches * model.load_weight * unit
    load_of = np.zeros((z, len(demands) + 1))  # load_of[n, k]: load cost of k roles on node n
    for n, node in enumerate(topology.nodes):
        steps = [per_role * (node.load + j / max(node.capacity, 1)) for j in range(1, len(demands) + 1)]
        load_of[n, 1:] = np.cumsum(steps)
    member = np.zeros((len(groups), z), dtype=np.int64)
    for g, members in enumerate(groups):
        member[g, list(members)] = 1
    choice = np.array(list(itertools.product(range(len(groups)), repeat=len(demands))))
    counts = member[choice].sum(axis=1)
    feasible = (counts <= slots).all(axis=1)
    total = per_group[np.arange(len(demands)), choice].sum(axis=1) + load_of[np.arange(z), counts].sum(axis=1)
    return float(total[feasible].min())


def some_change(rng: np.random.Generator, topology: Topology):
    victim = topology.nodes[int(rng.integers(len(topology)))].id
    kind = int(rng.integers(4))
    if kind == 0:
        return NodeFailed(victim)
    if kind == 1:
        return NodeLeft(victim)
    if kind == 2:
        return LoadShifted(victim, float(rng.uniform(0, 1)))
    return NodeJoined(Node("fresh", "r0", ("core", "pod0", "r0"), capacity=3))


@pytest.mark.parametrize("seed", range(30))
def test_fresh_placement_is_optimal(seed: int) -> None:
    rng = np.random.default_rng(seed)
    topology, demands, replicas = random_instance(rng)
    model = CostModel(horizon_batches=float(rng.choice([1.0, 10.0, 100.0])))
    plan = plan_replica_groups(topology, demands, replicas, cost_model=model)
    assert plan.copies_per_rack == rack_limit(topology, demands, replicas + 1)
    optimum = brute_force(topology, demands, replicas, model, None)
    assert plan.cost.total == pytest.approx(optimum, rel=1e-9)
    assert plan.lower_bound <= optimum * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(30))
def test_replacement_after_a_change_is_optimal(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    topology, demands, replicas = random_instance(rng)
    current = plan_replica_groups(topology, demands, replicas).placement
    after = apply_change(topology, some_change(rng, topology))
    while not feasible(after, len(demands), replicas + 1):
        after = apply_change(topology, some_change(rng, topology))
    model = CostModel(horizon_batches=float(rng.choice([1.0, 10.0, 100.0])))
    plan = plan_replica_groups(after, demands, replicas, current=current, cost_model=model)
    optimum = brute_force(after, demands, replicas, model, current)
    assert plan.cost.total == pytest.approx(optimum, rel=1e-9)
    assert plan.lower_bound <= optimum * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(20))
def test_truncated_slot_offers_give_the_full_expansion_optimum(seed: int) -> None:
    rng = np.random.default_rng(seed)
    roles, nodes, width = int(rng.integers(1, 30)), int(rng.integers(2, 8)), 12
    role_costs = rng.uniform(0, 10, (roles, nodes))
    role_costs[rng.random((roles, nodes)) < 0.2] = np.inf
    slot_costs = np.cumsum(rng.uniform(0, 3, (nodes, width)), axis=1)
    capacity = rng.integers(0, width + 1, nodes)
    capacity[0] = width  # room for every role
    slot_costs[np.arange(width)[None, :] >= capacity[:, None]] = np.inf
    used = np.minimum(rng.integers(0, 3, nodes), capacity)
    roles = min(roles, int((capacity - used).sum()))
    role_costs = role_costs[:roles]
    # The full expansion: every free slot of every node as a column.
    columns = [(n, j) for n in range(nodes) for j in range(used[n], capacity[n])]
    full = np.array([[role_costs[r, n] + slot_costs[n, j] for n, j in columns] for r in range(roles)])
    try:
        rows, picked = linear_sum_assignment(full)
    except ValueError:  # no finite assignment: the truncated offers must refuse as well
        with pytest.raises(NoAssignment):
            assign_to_slots(role_costs, slot_costs, used)
        return
    best = full[rows, picked].sum()
    nodes_of = assign_to_slots(role_costs, slot_costs, used)
    counts = np.bincount(nodes_of, minlength=nodes)
    assert (used + counts <= capacity).all()
    load = sum(slot_costs[n, used[n] : used[n] + counts[n]].sum() for n in range(nodes))
    assert role_costs[np.arange(roles), nodes_of].sum() + load == pytest.approx(best)
