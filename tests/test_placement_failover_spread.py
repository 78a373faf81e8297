"""Spreading each node's partitions' replicas so that a node's loss leaves the survivors even
(`placement.failover_spread`): at no cost, with every constraint and every node's role count kept."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement import PartitionDemand, Placement, ReplicaGroup, plan_replica_groups
from placement.build import build_problem
from placement.costs import CostModel
from placement.failover_spread import spread_failover
from placement.solver import SolverSettings, solve_problem
from placement.topology import Node, Topology


def _after_loss(placement: Placement, dead: str) -> Counter[str]:
    """Tasks each survivor runs once `dead` is lost and its partitions fail over to their first replica."""
    runs: Counter[str] = Counter(g.primary for g in placement.values() if g.primary != dead)
    runs.update(g.replicas[0] for g in placement.values() if g.primary == dead)
    return runs


def _objective(X: np.ndarray, nodes: int) -> int:
    """Sum over lost node p and survivor r of (primaries on r + p's partitions with a replica on r) squared."""
    primaries = np.bincount(X[:, 0], minlength=nodes)
    total = 0
    for p in range(nodes):
        mine = X[X[:, 0] == p, 1:].ravel()
        spread = np.bincount(mine, minlength=nodes)
        total += sum(int(primaries[r] + spread[r]) ** 2 for r in range(nodes) if r != p)
    return total


def _spark_like(counts: dict[str, int]) -> tuple[Topology, list[PartitionDemand], dict[str, str]]:
    """Three one-core executors' nodes, with as many primaries pinned on each as Spark ran there."""
    pins = {}
    for node, count in counts.items():
        for _ in range(count):
            pins[f"0/{len(pins)}/default"] = node
    topology = Topology(tuple(Node(n, f"node:{n}", capacity=140) for n in counts))
    return topology, [PartitionDemand(p, 1_250_000, 20_000) for p in pins], pins


def test_the_busiest_executors_loss_leaves_the_survivors_even_at_the_same_cost() -> None:
    """The failover bench's 200 partitions (Spark ran 92 on one executor): before this pass, that executor's loss
    sent 104 and 96 tasks to the survivors (110 and 89 in the measured run); now within 2 of each other."""
    topology, demands, pins = _spark_like({"e0": 52, "e1": 92, "e2": 56})
    problem = build_problem(topology, demands, 1, CostModel(), None, pins)
    solved, _ = solve_problem(problem, SolverSettings())
    spread = spread_failover(problem, solved)
    assert problem.evaluate(spread).total <= problem.evaluate(solved).total
    assert not problem.violations(spread)
    assert (problem.counts(spread) == problem.counts(solved)).all()
    assert _objective(spread, problem.nodes) < _objective(solved, problem.nodes)
    survivors = _after_loss(plan_replica_groups(topology, demands, 1, pinned_primaries=pins).placement, "e1")
    assert abs(survivors["e0"] - survivors["e2"]) <= 2, survivors


def test_groups_that_exist_keep_their_replicas() -> None:
    """Moving an existing replica costs its state: the pass only swaps the replicas of new groups."""
    topology, demands, pins = _spark_like({"e0": 52, "e1": 92, "e2": 56})
    first = plan_replica_groups(
        topology, demands[:100], 1, pinned_primaries={d.id: pins[d.id] for d in demands[:100]}
    )
    current = Placement(dict(first.placement.items()))
    later = plan_replica_groups(topology, demands, 1, current=current, pinned_primaries=pins)
    for partition, group in current.items():
        assert later.placement[partition] == group, partition


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(min_value=3, max_value=7),
    partitions=st.integers(min_value=2, max_value=60),
    replicas=st.integers(min_value=1, max_value=2),
    racks=st.integers(min_value=1, max_value=3),
    seed=st.integers(min_value=0, max_value=1 << 16),
)
def test_the_pass_never_raises_the_cost_breaks_a_constraint_or_moves_a_primary(
    nodes: int, partitions: int, replicas: int, racks: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    if replicas >= nodes - 1:
        replicas = 1
    topology = Topology(
        tuple(Node(f"n{i}", f"r{i % racks}", capacity=partitions * (replicas + 1)) for i in range(nodes))
    )
    demands = [
        PartitionDemand(f"p{i}", int(rng.integers(1, 1 << 20)), int(rng.integers(1, 1 << 16)))
        for i in range(partitions)
    ]
    pins = {d.id: f"n{int(rng.integers(0, nodes))}" for d in demands if rng.random() < 0.7}
    current = None
    if rng.random() < 0.5:  # some partitions have groups already
        kept = {}
        for d in demands[: partitions // 2]:
            primary = pins.get(d.id, f"n{int(rng.integers(0, nodes))}")
            others = [f"n{i}" for i in range(nodes) if f"n{i}" != primary]
            kept[d.id] = ReplicaGroup(primary, tuple(rng.choice(others, size=replicas, replace=False).tolist()))
        current = Placement(kept)
    try:
        problem = build_problem(topology, demands, replicas, CostModel(), current, pins)
    except Exception:  # an infeasible random request: not this test's subject
        return
    solved, _ = solve_problem(problem, SolverSettings())
    spread = spread_failover(problem, solved)
    assert problem.evaluate(spread).total <= problem.evaluate(solved).total + 1e-6
    assert not problem.violations(spread)
    assert (spread[:, 0] == solved[:, 0]).all()
    assert (problem.counts(spread) == problem.counts(solved)).all()
    assert _objective(spread, problem.nodes) <= _objective(solved, problem.nodes)
    known = problem.known.astype(bool)
    assert (spread[known] == solved[known]).all()


def _failover_squares(placement: Placement) -> int:
    """The pass's objective over a whole placement: each node's loss, each survivor's tasks after it, squared."""
    nodes = {g.primary for g in placement.values()} | {r for g in placement.values() for r in g.replicas}
    return sum(n**2 for dead in nodes for node, n in _after_loss(placement, dead).items() if node != dead)


def test_a_repair_counts_the_groups_it_leaves_as_they_are() -> None:
    """The controller re-places only the groups a change touched (partitions appear over several heartbeats):
    the spread counts the groups placed before (`around`), which evens the whole placement out further than
    spreading the new groups alone."""
    counts = {"e0": 40, "e1": 90, "e2": 40, "e3": 30}
    pins = {}
    for node, count in counts.items():
        for _ in range(count):
            pins[f"0/{len(pins)}/default"] = node
    topology = Topology(tuple(Node(n, f"node:{n}", capacity=140) for n in counts))
    demands = sorted((PartitionDemand(p, 1_250_000, 20_000) for p in pins), key=lambda d: pins[d.id] == "e1")
    first, rest = demands[:60], demands[60:]  # the busiest executor's partitions come last
    early = plan_replica_groups(topology, first, 1, pinned_primaries={d.id: pins[d.id] for d in first})

    def whole(around: list[ReplicaGroup]) -> Placement:
        later = plan_replica_groups(topology, rest, 1, pinned_primaries={d.id: pins[d.id] for d in rest}, around=around)
        return Placement({**dict(early.placement.items()), **dict(later.placement.items())})

    counted, alone = whole(list(early.placement.values())), whole([])
    assert _failover_squares(counted) < _failover_squares(alone)
