"""The placement solver: Hungarian assignments of roles by node slots, in stages, then exact local search.

Why decompose: one square matrix of every role by every node slot is ((q+1) l)^2 and, because the slots
of a node and the nodes of a rack are near copies of one another, `linear_sum_assignment` crawls on it
(measured: a single 1024 x 1280 stage already takes 1.5 s, 4096 x 5120 takes 110 s). So:

1. Stages. Roles are placed rank by rank, primaries first, then each replica rank; a stage is one
   `linear_sum_assignment` of its roles by node slots (`assignment.assign_to_slots`: a node with room
   for f roles is f slots of rising load cost, offered a few at a time with an optimality certificate).
   A stage is exact given the stages before it. Primaries are charged an estimate of the replica traffic
   they will cause, and each stage gets its own proportional share of every node's slots
   (`shares.slot_shares`), so primaries do not crowd into the idlest racks before the replicas that
   must follow them there.
2. Blocks. A fresh placement of more than `block_partitions` partitions is cut into blocks of partitions
   alike in increment, each given a proportional share of every node's slots (the cheapest slots dealt
   so that every block gets exactly as many as it has roles), and solved alone: stages are then
   128 x ~300 assignments, which take milliseconds.
3. Exact local search (`neighbourhoods`), each step exact for its neighbourhood and never raising the
   cost: move one copy of every partition at once (one assignment per chunk of partitions, the copy
   that moves varying per partition; small problems try every combination), hand the existing groups
   to the partitions that gain most from them, re-seat one partition's whole group at a time (on small
   problems also two partitions at a time), and let each partition make its cheapest copy primary.
   Rounds stop when one lowers nothing. After blocks, a polish across blocks moves single copies in
   small chunks (short chains of moves that cross blocks), then permutes and re-seats groups. A
   re-placement against a current placement is not split into blocks: migration costs anchor every
   role to its node, which keeps the assignments fast.
4. A second start. A fresh placement is also built one group at a time (the greedy baseline) and
   polished the same way when it starts cheaper; the cheaper result wins (`HowSolved.start`).

Optimality: not certified in general. The traffic between a primary and its replicas couples the
stages (a quadratic assignment), so the result is a local optimum of the neighbourhoods above. Measured:
it matches exhaustive search on every small instance tried (tests/test_placement_optimality.py and the
benchmark), and on the benchmark trees it is within 1e-7 of a lower bound no placement can beat
(`bounds.lower_bound`); splitting into blocks costs nothing measurable there (docs/placement.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from placement.assignment import NoAssignment, assign_to_slots
from placement.baselines import greedy_assignment
from placement.build import InfeasiblePlacement, build_problem
from placement.costs import CostBreakdown, CostModel
from placement.demand import PartitionDemand
from placement.groups import Placement
from placement.neighbourhoods import (
    chunks,
    copy_patterns,
    move_copies,
    permute_groups,
    reseat_pairs,
    reseat_partitions,
)
from placement.problem import Problem
from placement.shares import slot_shares
from placement.spread import spread_assignment
from placement.topology import Topology


@dataclass(frozen=True)
class SolverSettings:
    """Knobs of the decomposition; the defaults meet the bench targets."""

    block_partitions: int = 128  # a fresh placement of more partitions is split into blocks of this size
    chunk_roles: int = 256  # most roles re-placed by one assignment when a problem is not split
    max_rounds: int = 8  # improvement rounds of a problem solved whole
    patience: int = 1  # rounds in a row that lower nothing before stopping
    block_rounds: int = 1  # improvement rounds inside each block; the polish across blocks follows
    polish_moves: bool = True  # the polish also moves single copies (chains that cross blocks)
    polish_chunk: int = 32  # copies moved by one assignment in the polish: short chains across blocks
    greedy_start: bool = True  # also start a fresh placement from one group at a time (see solve_problem)


@dataclass(frozen=True)
class HowSolved:
    """How a solution was reached: in how many blocks, and from which start."""

    blocks: int
    start: str  # "hungarian": the staged assignments; "greedy": one group at a time, heaviest first


@dataclass(frozen=True)
class PlacementResult:
    """A placement, its cost, and how it was found."""

    placement: Placement
    cost: CostBreakdown
    copies_per_rack: int  # most copies of one partition on one rack (1: distinct racks)
    how: HowSolved


def solve_placement(
    topology: Topology,
    demands: Sequence[PartitionDemand],
    replicas: int,
    cost_model: CostModel | None = None,
    current: Placement | None = None,
    settings: SolverSettings | None = None,
    pinned_primaries: Mapping[str, str] | None = None,
) -> PlacementResult:
    """Place a primary and `replicas` replicas of every partition at low cost.

    With `current`, roles on nodes still present (and not draining) are kept unless moving them saves
    more than it costs (the migration part of the cost); roles on nodes gone or draining are re-placed.
    Primaries in `pinned_primaries` (partition to node) stay where they are; only the other roles are
    chosen. Raises `InfeasiblePlacement` when no placement meets the constraints.
    """
    problem = build_problem(topology, demands, replicas, cost_model or CostModel(), current, pinned_primaries)
    X, how = solve_problem(problem, settings or SolverSettings())
    return PlacementResult(problem.placement(X), problem.evaluate(X), problem.rack_limit, how)


def solve_problem(problem: Problem, settings: SolverSettings) -> tuple[np.ndarray, HowSolved]:
    """The assignment for `problem`, and how it was reached.

    A fresh placement is also built a second way, one partition at a time taking its cheapest group
    (heaviest increments first), and polished by the same local search when that start is cheaper:
    the staged assignments in blocks can end in a local optimum that needs several groups to move at
    once to leave, and this way the result is never worse than that construction.
    """
    fresh = bool((problem.start < 0).all())
    blocks = -(-problem.partitions // settings.block_partitions) if fresh else 1
    while True:
        try:
            X = _solve_in_blocks(problem, max(blocks, 1), settings)
            break
        except InfeasiblePlacement:
            if blocks <= 1:
                raise
            blocks = -(-blocks // 2)  # a share too thin for its block: merge blocks
    how = HowSolved(max(blocks, 1), "hungarian")
    _check_pins(problem, X)
    if fresh and settings.greedy_start:
        try:
            G = greedy_assignment(problem)
        except NoAssignment:
            return X, how
        if problem.evaluate(G).total < problem.evaluate(X).total:
            G = polish(problem, G, settings)
            if problem.evaluate(G).total < problem.evaluate(X).total:
                return G, replace(how, start="greedy")
    return X, how


def _check_pins(problem: Problem, X: np.ndarray) -> None:
    """Refuse a result that moved a pinned primary: only the fallback start can, when nothing else fits."""
    pinned = problem.pinned >= 0
    moved = pinned & (X[:, 0] != problem.pinned)
    if moved.any():
        names = ", ".join(problem.partition_ids[p] for p in np.flatnonzero(moved)[:5])
        raise InfeasiblePlacement(
            f"no placement keeps the pinned primaries where they are and fits the replicas around them "
            f"(partitions {names}; {int(moved.sum())} of {int(pinned.sum())} pinned primaries would move)",
            partitions=problem.partitions, copies=X.shape[1], needed=int(pinned.sum()),
            available=int(pinned.sum() - moved.sum()),
        )


def _solve_in_blocks(problem: Problem, blocks: int, settings: SolverSettings) -> np.ndarray:
    if blocks == 1:
        return _solve_whole(problem, settings)
    X = np.empty_like(problem.start)
    order = np.lexsort((np.asarray(problem.partition_ids), -problem.size, -problem.increment))
    members = [order[b::blocks] for b in range(blocks)]
    roles = np.array([len(rows) for rows in members]) * X.shape[1]
    in_block = replace(settings, max_rounds=settings.block_rounds)
    for rows, share in zip(members, slot_shares(problem.slot_costs, roles), strict=True):
        X[rows] = _solve_whole(problem.restrict(rows, share), in_block)
    return polish(problem, X, settings)


def polish(problem: Problem, X: np.ndarray, settings: SolverSettings) -> np.ndarray:
    """Trade what blocks could not: groups across blocks, then whole groups one partition at a time."""
    best = problem.evaluate(X).total
    for round_ in range(settings.max_rounds):
        if settings.polish_moves:
            for which in copy_patterns(problem.partitions, X.shape[1], round_):
                X = move_copies(problem, X, which, settings.polish_chunk)
        X = permute_groups(problem, X, settings.chunk_roles)
        X = reseat_partitions(problem, X)
        total = problem.evaluate(X).total
        if total >= best - 1e-9 * max(1.0, abs(best)):
            break
        best = total
    return X


def _solve_whole(problem: Problem, settings: SolverSettings) -> np.ndarray:
    try:
        X = place_missing(problem, problem.start.copy(), settings.chunk_roles)
    except NoAssignment:
        X = _fallback_start(problem)
    return improve(problem, X, settings)


def _fallback_start(problem: Problem) -> np.ndarray:
    """A complete start when the staged assignment paints itself into a corner.

    The spread layout ignores costs, so it would also ignore pinned primaries; with pins, one group at
    a time (which prices a primary off its pin as inf) is the fallback, and failing that the request is
    refused.
    """
    if not (problem.pinned >= 0).any():
        return spread_assignment(problem)  # raises InfeasiblePlacement if nothing fits
    try:
        return greedy_assignment(problem)
    except NoAssignment:
        raise InfeasiblePlacement(
            f"found no placement that keeps the {int((problem.pinned >= 0).sum())} pinned primaries where "
            f"they are and fits {problem.replicas} replicas of every partition around them",
            partitions=problem.partitions, copies=problem.replicas + 1,
            needed=problem.partitions * (problem.replicas + 1), available=int(problem.slots.sum()),
        ) from None


def place_missing(problem: Problem, X: np.ndarray, chunk_roles: int) -> np.ndarray:
    """Place every unplaced role, rank by rank, each rank (chunk) by one optimal assignment.

    When nothing is placed yet, each rank gets its own proportional share of every node's slots
    (`slot_shares`): placed alone, primaries would take the idlest nodes without counting the replicas
    that follow them into the same racks, and overload those racks.
    """
    copies = X.shape[1]
    shares = None
    if (X < 0).all() and copies > 1:
        shares = slot_shares(problem.slot_costs, np.full(copies, problem.partitions))
    for rank in range(copies):
        rows = np.flatnonzero(X[:, rank] < 0)
        for chunk in chunks(rows, chunk_roles):
            costs = problem.role_costs(X, chunk, np.full(len(chunk), rank), lookahead=True)
            if shares is None:
                X[chunk, rank] = assign_to_slots(costs, problem.slot_costs, problem.counts(X))
            else:
                used = np.bincount(X[X[:, rank] >= 0, rank], minlength=problem.nodes)
                X[chunk, rank] = assign_to_slots(costs, shares[rank], used)
    return X


def improve(problem: Problem, X: np.ndarray, settings: SolverSettings) -> np.ndarray:
    """Move one copy per partition at a time, optimally, until a round lowers nothing.

    Each step re-places one copy of every partition in a chunk by one assignment, the partition's
    other copies fixed and its primary re-picked among its copies; which copy moves varies per
    partition and per step, so copies of different ranks trade places.
    """
    best = problem.evaluate(X).total
    idle = 0
    for round_ in range(settings.max_rounds):
        for which in copy_patterns(problem.partitions, X.shape[1], round_):
            X = move_copies(problem, X, which, settings.chunk_roles)
        X = permute_groups(problem, X, settings.chunk_roles)
        X = reseat_partitions(problem, X)
        X = reseat_pairs(problem, X)
        total = problem.evaluate(X).total
        if total < best - 1e-9 * max(1.0, abs(best)):
            best, idle = total, 0
            continue
        idle += 1
        if idle >= settings.patience:
            break
    return X
