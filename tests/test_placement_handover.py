"""Hand-over plans: batches without a node twice, covering every move; and the matching beneath them."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.changes import NodeFailed
from placement.groups import Role
from placement.handover import Strategy, plan_handover
from placement.matching import maximum_matching
from placement.moves import Move
from placement.plan import plan_replica_groups, replan
from placement.synthetic import capacity_for, random_demands, tree_topology

NODES = [f"n{i}" for i in range(7)]


@st.composite
def move_lists(draw: st.DrawFn) -> list[Move]:
    moves = []
    for i in range(draw(st.integers(0, 25))):
        target = draw(st.sampled_from([*NODES, None]))
        sender = draw(st.sampled_from([*NODES, None]))
        if sender == target:
            sender = None
        moves.append(Move(f"p{i}", Role.REPLICA, draw(st.sampled_from(NODES)), target, draw(st.integers(0, 9)), sender))
    return moves


def check_plan(moves: list[Move], batches) -> None:
    planned = [move for batch in batches for move in batch]
    assert Counter(map(id, planned)) == Counter(map(id, moves)), "every move exactly once"
    for batch in batches:
        busy = [node for move in batch for node in move.participants]
        assert len(busy) == len(set(busy)), f"a node twice in {batch}"


@settings(max_examples=80, deadline=None)
@given(move_lists())
def test_batched_plans_never_use_a_node_twice_and_cover_all_moves(moves: list[Move]) -> None:
    plan = plan_handover(moves, Strategy.BATCHED)
    check_plan(moves, plan.batches)
    assert len(plan.batches) >= (plan.lower_bound if moves else 0)


@settings(max_examples=30, deadline=None)
@given(move_lists())
def test_fluid_and_all_at_once_plans(moves: list[Move]) -> None:
    fluid = plan_handover(moves, "fluid")
    assert [batch for batch in fluid.batches] == [(move,) for move in moves]
    everything = plan_handover(moves, "all-at-once")
    assert everything.batches == ((tuple(moves),) if moves else ())


def test_a_batch_is_as_large_as_a_matching_allows() -> None:
    # Five senders each feed their own receiver: one batch. A node feeding three: three batches.
    star = [Move(f"p{i}", Role.REPLICA, None, f"t{i}", 1, "hub") for i in range(3)]
    spread = [Move(f"q{i}", Role.REPLICA, None, f"r{i}", 1, f"s{i}") for i in range(5)]
    plan = plan_handover(star + spread, Strategy.BATCHED)
    check_plan(star + spread, plan.batches)
    assert len(plan.batches) == plan.lower_bound == 3
    assert len(plan.batches[0]) == 6  # one hub move and all five others


def test_failure_plan_is_as_short_as_the_busiest_node_allows() -> None:
    rng = np.random.default_rng(2)
    topology = tree_topology(2, 3, 4, capacity_for(200, 2, 24, slack=1.5), rng, max_load=0.3)
    demands = random_demands(200, rng)
    current = plan_replica_groups(topology, demands, 2).placement
    _, plan = replan(topology, demands, current, NodeFailed("n5"))
    check_plan(list(plan.moves), plan.handover.batches)
    assert len(plan.handover.batches) >= plan.handover.lower_bound


def brute_force_matching_size(vertices: int, edges: list[tuple[int, int]]) -> int:
    for size in range(len(edges), 0, -1):
        for chosen in itertools.combinations(edges, size):
            ends = [v for edge in chosen for v in edge]
            if len(ends) == len(set(ends)):
                return size
    return 0


@pytest.mark.parametrize("seed", range(40))
def test_maximum_matching_against_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    vertices = int(rng.integers(2, 9))
    pairs = [(u, v) for u in range(vertices) for v in range(u + 1, vertices)]
    edges = [pair for pair in pairs if rng.random() < 0.35][:12]
    matching = maximum_matching(vertices, edges)
    ends = [v for edge in matching for v in edge]
    assert len(ends) == len(set(ends))
    assert all((min(e), max(e)) in edges for e in matching)
    assert len(matching) == brute_force_matching_size(vertices, edges)


def test_matching_through_a_blossom() -> None:
    # A 5-cycle 0-1-2-3-4 with a tail 4-5: the maximum matching of 3 edges must go around the odd cycle.
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (4, 5)]
    matching = maximum_matching(6, edges)
    assert len(matching) == 3


def test_batches_are_ordered_so_that_no_node_runs_more_tasks_than_before_or_after() -> None:
    # a: 3 primaries, b: 3, c: 2. In plan order a->b first would leave b with 4 tasks for a micro-batch.
    moves = [
        Move("p1", Role.PRIMARY, "a", "b", 10, "a"),
        Move("p2", Role.PRIMARY, "b", "c", 10, "b"),
    ]
    plain = plan_handover(moves, "fluid")
    assert [m.partition for m in plain.moves] == ["p1", "p2"]
    balanced = plan_handover(moves, "fluid", {"a": 3, "b": 3, "c": 2})
    assert [m.partition for m in balanced.moves] == ["p2", "p1"]
    count = {"a": 3, "b": 3, "c": 2}
    for batch in balanced.batches:
        for move in batch:
            count[move.source] -= 1
            count[move.target] += 1
        assert max(count.values()) <= 3, count
    batched = plan_handover(moves, "batched", {"a": 3, "b": 3, "c": 2})
    assert sorted(m.partition for m in batched.moves) == ["p1", "p2"]
    assert all(len({n for m in b for n in m.participants}) == 2 * len(b) for b in batched.batches)


def test_a_move_whose_sender_is_its_target_is_batched_not_looped_over() -> None:
    """A node that ships to itself (the live holder nearest a dead source is the target) is one busy node: the
    batched plan used to spin forever on it (a self-loop no matching takes), holding the controller's lock."""
    moves = [
        Move("p1", Role.PRIMARY, "dead", "a", 10, "a"),
        Move("p2", Role.REPLICA, "a", "b", 5, "a"),
    ]
    plan = plan_handover(moves, Strategy.BATCHED)
    assert sorted(m.partition for batch in plan.batches for m in batch) == ["p1", "p2"]
    assert len(plan.batches) == 2  # both keep node a busy: one batch each
