"""Re-placement after a change: what moves, what stays, and what each move is worth."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from placement.build import build_problem
from placement.changes import Change, LoadShifted, NodeFailed, NodeJoined, NodeLeft, apply_change
from placement.costs import CostModel
from placement.demand import PartitionDemand, uniform_demands
from placement.groups import Placement, ReplicaGroup, Role
from placement.moves import Move, diff_moves, roles_on
from placement.plan import placement_cost, plan_replica_groups, replan
from placement.synthetic import capacity_for, random_demands, tree_topology
from placement.topology import Node, Topology


@pytest.fixture(scope="module")
def cluster() -> tuple[Topology, list[PartitionDemand], Placement]:
    # Room enough for the racks to absorb a lost node: otherwise whole groups may rightly move away.
    rng = np.random.default_rng(11)
    topology = tree_topology(2, 4, 3, capacity_for(240, 2, 24, slack=1.6), rng, max_load=0.4)
    demands = random_demands(240, rng)
    return topology, demands, plan_replica_groups(topology, demands, 2).placement


def cost_against(topology: Topology, demands, current: Placement, placement: Placement, model: CostModel) -> float:
    """Total cost of `placement` on `topology`, migration counted from `current`."""
    problem = build_problem(topology, demands, placement.replicas, model, current)
    index = topology.index
    X = np.array([[index[n] for n in placement[p].nodes] for p in problem.partition_ids])
    assert problem.violations(X) == []
    return problem.evaluate(X).total


def reverted(placement: Placement, move: Move) -> Placement | None:
    """`placement` with `move` undone, or None when undoing it alone breaks the group."""
    group = placement[move.partition]
    if move.role is Role.PRIMARY:
        nodes = [move.source if n == move.target else n for n in group.nodes]
        if move.source in group.replicas:  # a swap: the old primary had become a replica
            nodes = [move.target if n == move.source and i > 0 else n for i, n in enumerate(nodes)]
    else:
        nodes = [move.source if n == move.target else n for n in group.nodes]
    if None in nodes or len(set(nodes)) != len(nodes):
        return None
    groups = dict(placement.items())
    groups[move.partition] = ReplicaGroup(nodes[0], tuple(nodes[1:]))
    return Placement(groups)


def assert_every_optional_move_pays(topology, demands, current, plan, model, forced: set[str]) -> None:
    """Undoing any one move that was not forced must cost more than keeping it."""
    kept = cost_against(topology, demands, current, plan.placement, model)
    for move in plan.moves:
        if move.source in forced:
            continue
        undone = reverted(plan.placement, move)
        if undone is None:
            continue
        try:
            alternative = cost_against(topology, demands, current, undone, model)
        except AssertionError:  # undoing it alone breaks a capacity or rack limit
            continue
        assert alternative >= kept, f"{move} does not pay for itself"


def test_a_failed_node_moves_only_its_own_roles(cluster) -> None:
    topology, demands, current = cluster
    victim = max(current.role_counts(), key=current.role_counts().get)
    _, plan = replan(topology, demands, current, NodeFailed(victim))
    assert len(plan.moves) == roles_on(current, victim) > 0
    assert all(move.source == victim for move in plan.moves)
    for partition, group in plan.placement.items():
        old = current[partition]
        if victim not in old.nodes:
            assert group == old
        else:
            assert set(old.nodes) - {victim} <= set(group.nodes)
    by_id = {d.id: d for d in demands}
    for move in plan.moves:
        d = by_id[move.partition]
        assert move.bytes == d.size_bytes + (d.increment_bytes if move.role is Role.PRIMARY else 0)
        assert move.target not in current[move.partition].nodes
        assert move.sender in current[move.partition].nodes and move.sender != victim
    assert sum(move.bytes for move in plan.moves) == plan.cost.migration


def test_a_leaving_node_serves_its_own_state_while_its_roles_move(cluster) -> None:
    topology, demands, current = cluster
    leaving = topology.nodes[4].id
    after, plan = replan(topology, demands, current, NodeLeft(leaving))
    assert after[leaving].draining
    assert len(plan.moves) == roles_on(current, leaving)
    assert {move.sender for move in plan.moves} == {leaving}
    assert roles_on(plan.placement, leaving) == 0


def test_nothing_moves_without_a_change(cluster) -> None:
    topology, demands, current = cluster
    plan = plan_replica_groups(topology, demands, 2, current=current)
    assert plan.placement == current and plan.moves == ()
    assert plan.cost.migration == 0
    assert plan.cost == placement_cost(topology, demands, current)


def test_an_empty_node_takes_only_what_pays_for_its_move() -> None:
    rng = np.random.default_rng(5)
    topology = tree_topology(1, 3, 2, 40, rng, max_load=0.6)
    newcomer = Node("new", "r0", ("core", "pod0", "r0"), capacity=40)
    for size, expect_moves in ((10**12, False), (10**3, True)):
        demands = [dataclasses.replace(d, size_bytes=size) for d in random_demands(60, rng)]
        current = plan_replica_groups(topology, demands, 2).placement
        model = CostModel()
        after, plan = replan(topology, demands, current, NodeJoined(newcomer), cost_model=model)
        stay = cost_against(after, demands, current, current, model)
        assert bool(plan.moves) == expect_moves
        if expect_moves:
            assert plan.cost.total < stay
            assert all(move.target == "new" for move in plan.moves)
            assert_every_optional_move_pays(after, demands, current, plan, model, forced=set())
        else:
            assert plan.placement == current


def test_a_load_shift_moves_roles_off_a_hot_node_when_it_pays() -> None:
    rng = np.random.default_rng(9)
    topology = tree_topology(1, 3, 2, 40, rng)
    demands = uniform_demands(60, 10**4, 10**6)
    current = plan_replica_groups(topology, demands, 2).placement
    hot = topology.nodes[0].id
    after, plan = replan(topology, demands, current, LoadShifted(hot, 1.0), cost_model=CostModel())
    assert roles_on(plan.placement, hot) < roles_on(current, hot)
    assert_every_optional_move_pays(after, demands, current, plan, CostModel(), forced=set())


@pytest.mark.parametrize("change", ["fail", "join", "leave", "load"])
def test_moves_on_small_states_each_pay_for_themselves(change: str) -> None:
    rng = np.random.default_rng(21)
    topology = tree_topology(2, 2, 2, 30, rng, max_load=0.8)
    demands = random_demands(40, rng, size_bytes=2e6)
    current = plan_replica_groups(topology, demands, 2).placement
    victim = topology.nodes[3].id
    changes: dict[str, Change] = {
        "fail": NodeFailed(victim),
        "join": NodeJoined(Node("new", "r1", ("core", "pod0", "r1"), capacity=30)),
        "leave": NodeLeft(victim),
        "load": LoadShifted(victim, 0.0),
    }
    after, plan = replan(topology, demands, current, changes[change])
    forced = {victim} if change in ("fail", "leave") else set()
    assert_every_optional_move_pays(after, demands, current, plan, CostModel(), forced)
    assert plan.placement.replicas == 2
    assert sum(move.bytes for move in plan.moves) == pytest.approx(plan.cost.migration)


def test_more_and_fewer_replicas() -> None:
    topology = tree_topology(1, 4, 2, 20)
    demands = uniform_demands(10, 1000, 10)
    current = plan_replica_groups(topology, demands, 1).placement
    more = plan_replica_groups(topology, demands, 2, current=current)
    assert len(more.moves) == 10
    assert all(m.role is Role.REPLICA and m.source is None and m.bytes == 1000 for m in more.moves)
    assert all(set(current[p].nodes) < set(g.nodes) for p, g in more.placement.items())
    fewer = plan_replica_groups(topology, demands, 0, current=current)
    drops = [m for m in fewer.moves if m.target is None]
    assert len(drops) == 10 and all(m.bytes == 0 and m.participants == () for m in drops)
    assert all(g.primary in current[p].nodes for p, g in fewer.placement.items())  # no new copy
    assert sum(m.bytes for m in fewer.moves) == fewer.cost.migration


def test_move_kinds_bytes_and_senders() -> None:
    topology = Topology(tuple(Node(n, f"r{n}") for n in "abcde"))
    demands = [PartitionDemand("p", size_bytes=1000, increment_bytes=10)]
    before = Placement({"p": ReplicaGroup("a", ("b", "c"))})

    def moves(after: ReplicaGroup, on: Topology = topology) -> list[Move]:
        return diff_moves(before, Placement({"p": after}), demands, on)

    # a hand-over to a replica: one increment from the old primary, which stays as a replica
    assert moves(ReplicaGroup("b", ("a", "c"))) == [Move("p", Role.PRIMARY, "a", "b", 10, "a")]
    # a replica moves: the state, from the node it leaves
    assert moves(ReplicaGroup("a", ("d", "c"))) == [Move("p", Role.REPLICA, "b", "d", 1000, "b")]
    # the primary's node failed: a new node takes its copy and the primary role, fed by a survivor
    without_a = apply_change(topology, NodeFailed("a"))
    assert moves(ReplicaGroup("d", ("b", "c")), without_a) == [Move("p", Role.PRIMARY, "a", "d", 1010, "b")]
    # ... or a replica is promoted (the last increment from the checkpoint) and a new replica added
    assert moves(ReplicaGroup("b", ("c", "d")), without_a) == [
        Move("p", Role.PRIMARY, "a", "b", 10, None),
        Move("p", Role.REPLICA, "a", "d", 1000, "b"),
    ]
    # a dropped replica ships nothing and keeps nobody busy
    fewer = diff_moves(before, Placement({"p": ReplicaGroup("a", ("b",))}), demands, topology)
    assert fewer == [Move("p", Role.REPLICA, "c", None, 0, None)] and fewer[0].participants == ()
