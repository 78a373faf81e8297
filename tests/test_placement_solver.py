"""The solver's constraints on random instances, its refusals, and its decomposition."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.baselines import greedy_assignment, round_robin_assignment
from placement.best_group import best_group, group_cost, improvable
from placement.build import InfeasiblePlacement, build_problem
from placement.costs import CostModel
from placement.demand import PartitionDemand, uniform_demands
from placement.plan import plan_replica_groups
from placement.shares import slot_shares
from placement.solver import SolverSettings, solve_placement
from placement.spread import spread_assignment
from placement.synthetic import capacity_for, random_demands, tree_topology
from placement.topology import Node, Topology


@st.composite
def instances(draw: st.DrawFn) -> tuple[Topology, list[PartitionDemand], int]:
    racks = draw(st.integers(1, 5))
    nodes = []
    for i in range(draw(st.integers(2, 12))):
        rack = draw(st.integers(0, racks - 1))
        nodes.append(
            Node(
                f"n{i}",
                f"r{rack}",
                ("core", f"pod{rack % 2}", f"r{rack}"),
                capacity=draw(st.integers(0, 12)),
                load=draw(st.floats(0, 1)),
                draining=draw(st.booleans()) and draw(st.booleans()),
            )
        )
    demands = [
        PartitionDemand(f"p{i}", draw(st.integers(0, 10**9)), draw(st.integers(0, 10**7)))
        for i in range(draw(st.integers(1, 25)))
    ]
    return Topology(tuple(nodes)), demands, draw(st.integers(0, 3))


def check_constraints(topology: Topology, demands: list[PartitionDemand], replicas: int, plan) -> None:
    placement = plan.placement
    assert set(placement) == {d.id for d in demands}
    usable_racks = {n.rack for n in topology.nodes if not n.draining and n.capacity > 0}
    for group in placement.values():
        assert len(group.replicas) == replicas
        assert len(set(group.nodes)) == replicas + 1, "copies on distinct nodes"
        per_rack = Counter(topology[n].rack for n in group.nodes)
        assert max(per_rack.values()) <= plan.copies_per_rack
        assert not any(topology[n].draining for n in group.nodes)
    # The rack limit is the least the racks allow: 1 whenever there are enough racks with room.
    assert plan.copies_per_rack >= -(-(replicas + 1) // max(1, len(usable_racks)))
    for node_id, count in placement.role_counts().items():
        assert count <= topology[node_id].capacity, f"{node_id} over capacity"
    assert plan.cost.total >= plan.lower_bound * (1 - 1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_placements_meet_every_constraint_or_are_refused(instance) -> None:
    topology, demands, replicas = instance
    copies = replicas + 1
    room = [min(n.capacity, len(demands)) for n in topology.nodes if not n.draining and n.capacity > 0]
    possible = len(room) >= copies and sum(room) >= copies * len(demands)
    if not possible:
        with pytest.raises(InfeasiblePlacement):
            plan_replica_groups(topology, demands, replicas)
        return
    plan = plan_replica_groups(topology, demands, replicas)
    check_constraints(topology, demands, replicas, plan)


def test_distinct_racks_when_there_are_enough() -> None:
    topology = tree_topology(pods=2, racks_per_pod=2, nodes_per_rack=3, capacity=10)
    plan = plan_replica_groups(topology, uniform_demands(20, 10**8, 10**6), 2)
    assert plan.copies_per_rack == 1
    for group in plan.placement.values():
        assert len({topology[n].rack for n in group.nodes}) == 3


def test_two_racks_still_both_hold_every_partition() -> None:
    topology = tree_topology(pods=1, racks_per_pod=2, nodes_per_rack=4, capacity=10)
    plan = plan_replica_groups(topology, uniform_demands(16, 10**8, 10**6), 2)
    assert plan.copies_per_rack == 2
    for group in plan.placement.values():
        assert len({topology[n].rack for n in group.nodes}) == 2


def test_racks_too_small_for_distinct_racks_relax_the_limit() -> None:
    nodes = [Node(f"a{i}", "big", capacity=10) for i in range(3)]
    nodes += [Node("b0", "small", capacity=10), Node("c0", "tiny", capacity=2)]
    # Distinct racks would need 6 copies in "tiny", which holds 2: at most 2 per rack instead.
    plan = plan_replica_groups(Topology(tuple(nodes)), uniform_demands(6, 10, 1), 2)
    assert plan.copies_per_rack == 2
    check_constraints(Topology(tuple(nodes)), uniform_demands(6, 10, 1), 2, plan)


def test_too_few_nodes_is_refused_with_the_numbers() -> None:
    topology = Topology((Node("a", "r1", capacity=9), Node("b", "r2", capacity=9)))
    expected = r"need 3 copies \(a primary and 2 replicas\) each on distinct nodes, but only 2 of 2 nodes"
    with pytest.raises(InfeasiblePlacement, match=expected) as refused:
        plan_replica_groups(topology, uniform_demands(4, 10, 1), 2)
    assert (refused.value.copies, refused.value.available) == (3, 2)


def test_draining_nodes_do_not_count() -> None:
    topology = Topology((Node("a", "r1", capacity=9), Node("b", "r2", capacity=9), Node("c", "r3", draining=True)))
    with pytest.raises(InfeasiblePlacement, match="only 2 of 3 nodes"):
        plan_replica_groups(topology, uniform_demands(1, 10, 1), 2)


def test_a_node_without_capacity_is_refused() -> None:
    topology = Topology((Node("a", "r1", capacity=9), Node("b", "r2")))
    with pytest.raises(ValueError, match="node 'b' has no capacity"):
        plan_replica_groups(topology, uniform_demands(2, 10, 1), 1)


def test_too_little_capacity_is_refused_with_the_numbers() -> None:
    topology = Topology(tuple(Node(f"n{i}", f"r{i}", capacity=5) for i in range(4)))
    with pytest.raises(InfeasiblePlacement, match=r"30 role slots, but the nodes offer only 20") as refused:
        plan_replica_groups(topology, uniform_demands(10, 10, 1), 2)
    assert (refused.value.needed, refused.value.available) == (30, 20)


def test_byte_capacity_is_respected() -> None:
    demands = [PartitionDemand(f"p{i}", 100 + i, 1) for i in range(6)]
    roomy = [Node(f"n{i}", f"r{i}", capacity=100, capacity_bytes=250) for i in range(6)]
    plan = plan_replica_groups(Topology(tuple(roomy)), demands, 1)
    held: Counter[str] = Counter()
    for partition, group in plan.placement.items():
        for n in group.nodes:
            held[n] += next(d.size_bytes for d in demands if d.id == partition)
    assert max(held.values()) <= 250
    tight = [Node(f"n{i}", f"r{i}", capacity=100, capacity_bytes=150) for i in range(6)]
    with pytest.raises(InfeasiblePlacement, match="need 12 role slots, but the nodes offer only 6"):
        plan_replica_groups(Topology(tuple(tight)), demands, 1)


def test_busy_nodes_get_fewer_roles() -> None:
    nodes = [Node(f"n{r}{i}", f"r{r}", capacity=30, load=0.9 if r == 0 else 0.0) for r in range(3) for i in range(2)]
    plan = plan_replica_groups(Topology(tuple(nodes)), uniform_demands(20, 10**8, 10**6), 1)
    counts = plan.placement.role_counts()
    assert max(counts.get(f"n0{i}", 0) for i in range(2)) < min(counts[f"n{r}{i}"] for r in (1, 2) for i in range(2))


def test_replicas_stay_in_their_primarys_pod() -> None:
    topology = tree_topology(pods=2, racks_per_pod=3, nodes_per_rack=2, capacity=20)
    plan = plan_replica_groups(topology, uniform_demands(30, 10**8, 10**6), 2)
    hops = topology.hops
    for group in plan.placement.values():
        primary = topology.index[group.primary]
        assert [hops[primary, topology.index[r]] for r in group.replicas] == [3, 3]


def test_blocks_meet_the_constraints_and_stay_near_solving_whole() -> None:
    rng = np.random.default_rng(7)
    topology = tree_topology(2, 3, 3, capacity_for(300, 2, 18), rng, max_load=0.5)
    demands = random_demands(300, rng)
    whole = solve_placement(topology, demands, 2, settings=SolverSettings(block_partitions=1000, greedy_start=False))
    split = solve_placement(topology, demands, 2, settings=SolverSettings(block_partitions=40, greedy_start=False))
    assert (whole.how.blocks, split.how.blocks) == (1, 8)
    problem = build_problem(topology, demands, 2, CostModel())
    assert problem.violations(problem_assignment(problem, split.placement)) == []
    assert split.cost.total <= whole.cost.total * (1 + 1e-4)


def test_never_above_the_baselines_on_a_tree() -> None:
    rng = np.random.default_rng(3)
    topology = tree_topology(2, 4, 4, capacity_for(600, 2, 32), rng, max_load=0.5)
    demands = random_demands(600, rng)
    problem = build_problem(topology, demands, 2, CostModel())
    ours = solve_placement(topology, demands, 2).cost.total
    assert ours <= problem.evaluate(greedy_assignment(problem)).total
    assert ours <= problem.evaluate(round_robin_assignment(problem)).total


def problem_assignment(problem, placement) -> np.ndarray:
    index = {node: n for n, node in enumerate(problem.node_ids)}
    return np.array([[index[n] for n in placement[p].nodes] for p in problem.partition_ids])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_the_feasible_start_is_feasible_whenever_anything_is(instance) -> None:
    topology, demands, replicas = instance
    try:
        problem = build_problem(topology, demands, replicas, CostModel())
    except InfeasiblePlacement:
        return
    X = spread_assignment(problem)
    assert problem.violations(X) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.integers(0, 2**32 - 1))
def test_the_reseat_screen_never_misses_a_partition_that_can_gain(instance, seed: int) -> None:
    topology, demands, replicas = instance
    try:
        problem = build_problem(topology, demands, replicas, CostModel())
    except InfeasiblePlacement:
        return
    rng = np.random.default_rng(seed)
    X = spread_assignment(problem)
    X = X[rng.permutation(len(X))]  # some arbitrary valid placement
    counts = problem.counts(X)
    named = set(improvable(problem, X, counts).tolist())
    for p in range(problem.partitions):
        others = counts.copy()
        others[X[p]] -= 1
        group = best_group(problem, p, others)
        now = group_cost(problem, p, X[p], others)
        if group is not None and group_cost(problem, p, group, others) < now - 1e-9 * max(1.0, abs(now)):
            assert p in named


def test_slot_shares_split_every_slot_and_the_cheap_ones_exactly() -> None:
    rng = np.random.default_rng(4)
    slot_costs = np.cumsum(rng.uniform(0, 1, (6, 20)), axis=1)
    slot_costs[2, 12:] = np.inf
    roles = np.array([11, 10, 10])
    shares = slot_shares(slot_costs, roles)
    everything = np.sort(slot_costs[np.isfinite(slot_costs)])
    dealt = np.sort(np.concatenate([s[np.isfinite(s)] for s in shares]))
    assert np.array_equal(everything, dealt)  # every slot once, at its own cost
    cheapest = everything[: roles.sum()]
    for share, count in zip(shares, roles, strict=True):
        assert all((np.diff(row[np.isfinite(row)]) >= 0).all() for row in share)  # rising per node
        assert np.isin(share[np.isfinite(share)], cheapest).sum() == count
