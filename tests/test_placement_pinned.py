"""Pinned primaries: placement chooses only the replicas of partitions whose primary is decided elsewhere.

Spark runs a partition's task where it likes, so the controller pins each primary to that node. Checked
here: pinned primaries never move (fresh, after a failure, with partial pins); replicas still meet the
distinct-node, rack and capacity constraints; the solver matches an exhaustive search restricted to
placements that keep the pins (cost recomputed from the formula of placement/costs.py, a pinned primary
costing no hand-over); and pins that cannot be honoured are refused with a clear error.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from placement import (
    CostModel,
    InfeasiblePlacement,
    Node,
    NodeFailed,
    PartitionDemand,
    Placement,
    Topology,
    plan_replica_groups,
    replan,
)


def tree(nodes: int, racks: int, capacity: int = 64) -> Topology:
    return Topology(
        tuple(
            Node(f"n{i}", f"r{i % racks}", ("core", f"pod{i % racks % 2}", f"r{i % racks}"), capacity=capacity)
            for i in range(nodes)
        )
    )


def demands_of(count: int, rng: np.random.Generator) -> list[PartitionDemand]:
    return [
        PartitionDemand(f"p{i}", int(rng.integers(1, 100)) * 1000, int(rng.integers(1, 100)) * 10)
        for i in range(count)
    ]


def check_constraints(topology: Topology, placement: Placement, replicas: int, copies_per_rack: int) -> None:
    racks = {n.id: n.rack for n in topology.nodes}
    counts: dict[str, int] = {}
    for group in placement.values():
        nodes = group.nodes
        assert len(nodes) == replicas + 1
        assert len(set(nodes)) == len(nodes), f"two copies on one node: {group}"
        per_rack = [racks[n] for n in nodes]
        assert max(per_rack.count(r) for r in per_rack) <= copies_per_rack
        for n in nodes:
            counts[n] = counts.get(n, 0) + 1
    for node in topology.nodes:
        assert counts.get(node.id, 0) <= node.capacity


@pytest.mark.parametrize("seed", range(8))
def test_pinned_primaries_never_move_and_replicas_meet_the_constraints(seed: int) -> None:
    rng = np.random.default_rng(seed)
    topology = tree(int(rng.integers(4, 12)), int(rng.integers(1, 4)))
    demands = demands_of(int(rng.integers(5, 60)), rng)
    q = int(rng.integers(0, 3))
    ids = [n.id for n in topology.nodes]
    # Pin most partitions, skewed towards a few nodes as Spark's locality may do.
    pins = {d.id: ids[int(rng.integers(0, 3))] for d in demands if rng.random() < 0.8}
    plan = plan_replica_groups(topology, demands, q, pinned_primaries=pins)
    for partition, node in pins.items():
        assert plan.placement[partition].primary == node
    check_constraints(topology, plan.placement, q, plan.copies_per_rack)


@pytest.mark.parametrize("seed", range(150))
def test_pins_that_disagree_with_the_plan_in_force_are_kept(seed: int) -> None:
    """Spark ran tasks elsewhere than the plan in force says (a move, a failover, a node that joined): the
    re-plan keeps every pin. Regression: a group handed to a pinned partition whose lead copy was off the
    pin kept that lead, because an infinite cost minus a tolerance compared as not better."""
    rng = np.random.default_rng(seed)
    nodes = int(rng.integers(2, 5))
    q = int(rng.integers(0, min(2, nodes - 1) + 1))
    demands = demands_of(int(rng.integers(2, 9)), rng)
    ids = [f"n{i}" for i in range(nodes)]
    # The controller's capacity: the even share of all copies plus one spare slot.
    capacity = -(-(q + 1) * len(demands) // nodes) + 1
    held = ids[: int(rng.integers(q + 1, nodes + 1))]  # a node that joined holds nothing yet
    groups = {}
    for d in demands:
        copies = [str(n) for n in rng.permutation(held)[: q + 1]]
        groups[d.id] = {"primary": copies[0], "replicas": copies[1:]}
    current = Placement.from_json({"replicas": q, "groups": groups})
    pins = {d.id: ids[int(rng.integers(0, nodes))] for d in demands if rng.random() < 0.9}
    per_node = {n: list(pins.values()).count(n) for n in ids}
    topology = Topology(
        tuple(Node(n, n, capacity=max(capacity, per_node[n] + -(-q * len(demands) // nodes) + 1)) for n in ids)
    )
    plan = plan_replica_groups(topology, demands, q, current=current, pinned_primaries=pins)
    for partition, node in pins.items():
        assert plan.placement[partition].primary == node, (partition, plan.placement[partition])
    check_constraints(topology, plan.placement, q, plan.copies_per_rack)


def test_a_failure_moves_only_the_failed_nodes_roles_and_keeps_pins() -> None:
    rng = np.random.default_rng(7)
    topology = tree(8, 4)
    demands = demands_of(40, rng)
    pins = {d.id: f"n{i % 8}" for i, d in enumerate(demands)}
    current = plan_replica_groups(topology, demands, 2, pinned_primaries=pins).placement
    # The failed node's primaries are re-pinned where Spark re-runs their tasks: here n7, in n3's rack, so
    # that the rack limit (distinct racks) leaves the groups' other copies valid.
    survivors = {p: (n if n != "n3" else "n7") for p, n in pins.items()}
    after, plan = replan(topology, demands, current, NodeFailed("n3"), pinned_primaries=survivors)
    for partition, node in survivors.items():
        assert plan.placement[partition].primary == node
    check_constraints(after, plan.placement, 2, plan.copies_per_rack)
    for partition, group in current.items():
        new = plan.placement[partition]
        if "n3" not in group.nodes:
            assert set(new.nodes) == set(group.nodes), partition  # untouched groups keep every copy
        else:
            assert set(group.nodes) - {"n3"} <= set(new.nodes), partition  # only n3's copy is replaced


def test_a_replica_on_the_pinned_node_becomes_the_primary() -> None:
    topology = tree(4, 4)
    demands = [PartitionDemand("p0", 10_000_000, 100)]  # large state: re-creating a copy never pays
    current = Placement.from_json({"replicas": 1, "groups": {"p0": {"primary": "n0", "replicas": ["n1"]}}})
    plan = plan_replica_groups(topology, demands, 1, current=current, pinned_primaries={"p0": "n1"})
    assert plan.placement["p0"].primary == "n1"
    assert plan.placement["p0"].replicas == ("n0",)  # the old primary holds the state: no copy moves
    assert plan.cost.migration == 0


def _brute_force(
    topology: Topology,
    demands: list[PartitionDemand],
    replicas: int,
    model: CostModel,
    current: Placement | None,
    pins: dict[str, str],
) -> float:
    """Least cost over every valid placement keeping the pins (the formula of placement/costs.py)."""
    ids = [n.id for n in topology.nodes]
    z, copies = len(ids), replicas + 1
    hops = topology.hops
    rack = [n.rack for n in topology.nodes]
    room: dict[str, int] = {}
    for n in topology.nodes:
        room[n.rack] = room.get(n.rack, 0) + min(n.capacity, len(demands))
    if len(topology) < copies or sum(room.values()) < copies * len(demands):
        raise ValueError("too few nodes or too little room")
    limit = math.ceil(copies / max(1, sum(1 for r in room.values() if r > 0)))
    while sum(min(r, limit * len(demands)) for r in room.values()) < copies * len(demands):
        limit += 1
    groups = [
        (primary, *rest)
        for primary in range(z)
        for rest in itertools.combinations([n for n in range(z) if n != primary], replicas)
        if max(sum(rack[m] == r for m in (primary, *rest)) for r in set(rack)) <= limit
    ]
    unit = float(np.mean([d.increment_bytes for d in demands]))
    per_group = np.full((len(demands), len(groups)), np.inf)
    for p, d in enumerate(demands):
        old = current.get(d.id) if current is not None else None
        holders = {ids.index(n) for n in old.nodes if n in ids} if old else set()
        for g, members in enumerate(groups):
            if d.id in pins and ids[members[0]] != pins[d.id]:
                continue
            cost = model.horizon_batches * d.increment_bytes * sum(hops[members[0], r] for r in members[1:])
            if old is not None:
                moved = d.size_bytes * sum(m not in holders for m in members)
                if d.id not in pins and ids[members[0]] != old.primary:
                    moved += d.increment_bytes
                cost += model.migration_weight * moved
            per_group[p, g] = cost
    per_role = model.horizon_batches * model.load_weight * unit
    load_of = np.zeros((z, len(demands) + 1))
    for n, node in enumerate(topology.nodes):
        steps = [per_role * (node.load + j / node.capacity) for j in range(1, len(demands) + 1)]
        load_of[n, 1:] = np.cumsum(steps)
    member = np.zeros((len(groups), z), dtype=np.int64)
    for g, members in enumerate(groups):
        member[g, list(members)] = 1
    choice = np.array(list(itertools.product(range(len(groups)), repeat=len(demands))))
    counts = member[choice].sum(axis=1)
    fits = (counts <= np.array([n.capacity for n in topology.nodes])).all(axis=1)
    total = per_group[np.arange(len(demands)), choice].sum(axis=1) + load_of[np.arange(z), counts].sum(axis=1)
    best = float(total[fits].min(initial=np.inf))
    if not np.isfinite(best):
        raise ValueError("no placement keeps the pins")
    return best


def _small_instance(rng: np.random.Generator) -> tuple[Topology, list[PartitionDemand], int, dict[str, str]]:
    while True:
        z, racks = int(rng.integers(3, 6)), int(rng.integers(1, 4))
        topology = Topology(
            tuple(
                Node(
                    f"n{i}",
                    f"r{(r := int(rng.integers(racks)))}",
                    ("core", f"pod{r % 2}", f"r{r}"),
                    capacity=int(rng.integers(1, 4)),
                    load=float(rng.choice([0.0, 0.3, 0.7])),
                )
                for i in range(z)
            )
        )
        demands = demands_of(int(rng.integers(2, 4)), rng)
        q = int(rng.integers(0, 3))
        pins = {d.id: f"n{int(rng.integers(z))}" for d in demands if rng.random() < 0.7}
        try:
            _brute_force(topology, demands, q, CostModel(), None, pins)
        except ValueError:  # no feasible placement keeps these pins: draw again
            continue
        return topology, demands, q, pins


@pytest.mark.parametrize("seed", range(24))
def test_pinned_placement_is_optimal_against_exhaustive_search(seed: int) -> None:
    rng = np.random.default_rng(500 + seed)
    topology, demands, q, pins = _small_instance(rng)
    model = CostModel(horizon_batches=float(rng.choice([1.0, 10.0, 100.0])))
    current = None
    if seed % 2:  # a re-placement: the groups in force were chosen without pins, on a node that then fails
        current = plan_replica_groups(topology, demands, q, cost_model=model).placement
    plan = plan_replica_groups(topology, demands, q, current=current, cost_model=model, pinned_primaries=pins)
    for partition, node in pins.items():
        assert plan.placement[partition].primary == node
    assert plan.cost.total == pytest.approx(_brute_force(topology, demands, q, model, current, pins), rel=1e-9)


def test_pins_on_a_missing_or_draining_node_are_refused() -> None:
    topology = tree(4, 2)
    demands = [PartitionDemand("p0", 1000, 100)]
    with pytest.raises(InfeasiblePlacement, match="pinned to node gone, which is not in the topology"):
        plan_replica_groups(topology, demands, 1, pinned_primaries={"p0": "gone"})
    draining = Topology(
        tuple(Node(n.id, n.rack, n.switches, capacity=4, draining=n.id == "n0") for n in topology.nodes)
    )
    with pytest.raises(InfeasiblePlacement, match="takes no roles"):
        plan_replica_groups(draining, demands, 1, pinned_primaries={"p0": "n0"})


def test_more_pins_than_a_node_holds_are_refused() -> None:
    topology = tree(4, 4, capacity=2)
    demands = [PartitionDemand(f"p{i}", 1000, 100) for i in range(3)]
    with pytest.raises(InfeasiblePlacement, match="3 primaries are pinned to node n0, which can hold only 2"):
        plan_replica_groups(topology, demands, 1, pinned_primaries={d.id: "n0" for d in demands})


def test_pins_that_leave_no_room_for_replicas_are_refused() -> None:
    # n0 and n1 have room for 2 roles each, n2 for 1: four pinned primaries fill n0 and n1, and the
    # four replicas (each off its primary's node) find only n2's single slot.
    topology = Topology((Node("n0", "r", capacity=2), Node("n1", "r", capacity=2), Node("n2", "r", capacity=4)))
    demands = [PartitionDemand(f"p{i}", 1000, 100) for i in range(4)]
    pins = {"p0": "n0", "p1": "n0", "p2": "n1", "p3": "n1"}
    plan = plan_replica_groups(topology, demands, 1, pinned_primaries=pins)  # n2 takes all 4 replicas
    assert all(plan.placement[p].replicas == ("n2",) for p in pins)
    tight = Topology((Node("n0", "r", capacity=2), Node("n1", "r", capacity=2), Node("n2", "r", capacity=3)))
    with pytest.raises(InfeasiblePlacement):
        plan_replica_groups(tight, demands, 1, pinned_primaries=pins)


def test_pins_for_unknown_partitions_are_refused() -> None:
    with pytest.raises(ValueError, match="without a demand: nope"):
        plan_replica_groups(tree(3, 3), [PartitionDemand("p0", 1, 1)], 1, pinned_primaries={"nope": "n0"})
