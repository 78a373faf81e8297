"""Spreading each node's partitions' replicas over the other nodes, so that a node's loss leaves the survivors even.

The placement cost counts every node's roles, not where the partitions of one node have their replicas. Two
placements of equal cost can differ a lot when a node dies: each of its partitions fails over to its replica's
node, and if most of those replicas sit on one node, that node runs most of the lost partitions on top of its own.
Measured (`bench/failover_bench.py --partitions 200`, three one-core executors): the killed executor's 92
partitions failed over 58 to one survivor and 34 to the other, which then ran 110 and 89 of the post-kill batch's
200 tasks; the first one's tasks set the batch's length.

`spread_failover` runs after the solver and only swaps the replica nodes of two partitions (one's replica on a,
the other's on b, exchanged): every node keeps its number of roles, so the load cost stays the same, and a swap is
taken only when it raises neither the traffic nor the migration cost and lowers the sum, over every node p that
could be lost and every survivor r, of (P[r] + F[p, r]) squared: P[r] the primaries on r, F[p, r] how many
partitions with their primary on p have a replica on r, so P[r] + F[p, r] is what r runs after p's loss (with one
replica each; with more, an upper bound). The sum falls as each loss's survivors come out even.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from placement.groups import ReplicaGroup
from placement.problem import Problem

# Rounds of the pass (each tries one swap per primary node) and pairs of partitions tried per swap: it is a polish,
# bounded so that a fresh placement of 10,000 partitions over 50 nodes stays well under a second.
_ROUNDS = 64
_PAIRS_TRIED = 8
# The pass runs on clusters of at most this many nodes: there a node's loss moves a large share of the tasks onto
# each survivor (on 50 nodes each gets about 2% of them, and the pass cost seconds at 10,000 partitions).
_MOST_NODES = 16
# Up to this many nodes, three replicas may also move in a cycle (on three nodes no exchange of two can help:
# every other partition with a replica on the emptier node has its primary on the fuller one or on p itself).
_ROTATION_NODES = 8


def spread_failover(problem: Problem, X: np.ndarray, around: Iterable[ReplicaGroup] = ()) -> np.ndarray:
    """`X` with replica nodes swapped between partitions as the module docstring says (a new array). Only
    partitions without a current group take part: moving an existing replica costs its state in migration.
    `around`: groups placed already that this problem leaves as they are (a repair's other groups), counted in
    the primaries and replicas each node's loss moves."""
    if problem.replicas == 0 or problem.partitions < 2 or not 3 <= problem.nodes <= _MOST_NODES:
        return X
    X = X.copy()
    z = problem.nodes
    spread = [[0] * z for _ in range(z)]  # Python ints: the pass does many small reads
    primaries = np.bincount(X[:, 0], minlength=z).tolist()
    index = {node: n for n, node in enumerate(problem.node_ids)}
    for group in around:
        primary = index.get(group.primary)
        if primary is None:
            continue
        primaries[primary] += 1
        for replica in group.replicas:
            if replica in index:
                spread[primary][index[replica]] += 1
    holders: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)  # (p, r) -> [(partition, rank)]
    for i, row in enumerate(X.tolist()):
        for rank in range(1, len(row)):
            spread[row[0]][row[rank]] += 1
            if not problem.known[i]:
                holders[(row[0], row[rank])].append((i, rank))
    for _ in range(_ROUNDS):
        swapped = False
        for p in range(z):
            after_loss = [primaries[r] + spread[p][r] for r in range(z)]
            movable = [r for r in range(z) if r != p and holders.get((p, r))]
            if not movable:
                continue
            a = max(movable, key=lambda r: after_loss[r])
            b = min((r for r in range(z) if r != p), key=lambda r: after_loss[r])
            if after_loss[a] - after_loss[b] < 2:
                continue
            if _swap_one(problem, X, spread, primaries, holders, p, a, b) or (
                problem.nodes <= _ROTATION_NODES and _rotate_one(problem, X, spread, primaries, holders, p, a, b)
            ):
                swapped = True
        if not swapped:
            break
    return X


def _swap_one(
    problem: Problem,
    X: np.ndarray,
    spread: list[list[int]],
    primaries: list[int],
    holders: dict[tuple[int, int], list[tuple[int, int]]],
    p: int,
    a: int,
    b: int,
) -> bool:
    """Move one replica of a partition with its primary on `p` from node `a` to node `b`, and one replica of a
    partition with another primary q from `b` to `a`, if some such pair lowers the spread and no cost; returns
    whether it did."""
    for q in range(problem.nodes):
        if q in (p, a, b) or not holders.get((q, b)):
            continue
        if _squares_change(spread, primaries, ((p, a, b), (q, b, a))) >= 0:
            continue
        for i, rank_i in holders[(p, a)][:_PAIRS_TRIED]:
            for j, rank_j in holders[(q, b)][:_PAIRS_TRIED]:
                if not (_allowed(problem, X, i, rank_i, b) and _allowed(problem, X, j, rank_j, a)):
                    continue
                if _cost_change(problem, X, i, a, b) + _cost_change(problem, X, j, b, a) > 0:
                    continue
                X[i, rank_i], X[j, rank_j] = b, a
                holders[(p, a)].remove((i, rank_i))
                holders[(p, b)].append((i, rank_i))
                holders[(q, b)].remove((j, rank_j))
                holders[(q, a)].append((j, rank_j))
                spread[p][a] -= 1
                spread[p][b] += 1
                spread[q][b] -= 1
                spread[q][a] += 1
                return True
    return False


def _rotate_one(
    problem: Problem,
    X: np.ndarray,
    spread: list[list[int]],
    primaries: list[int],
    holders: dict[tuple[int, int], list[tuple[int, int]]],
    p: int,
    a: int,
    b: int,
) -> bool:
    """Move a replica of a partition with its primary on `p` from `a` to `b`, one of another primary c from `b` to
    some node x, and one of a primary d from x to `a` (every node keeps its count), if that lowers the spread and
    no cost; returns whether it did."""
    z = problem.nodes
    for c in range(z):
        if c in (p, b) or not holders.get((c, b)):
            continue
        for x in range(z):
            if x in (a, b, c):
                continue
            for d in range(z):
                if d in (a, x) or not holders.get((d, x)):
                    continue
                moves = ((p, a, b), (c, b, x), (d, x, a))
                if _squares_change(spread, primaries, moves) >= 0:
                    continue
                picks = _pick(problem, X, holders, moves)
                if picks is None:
                    continue
                for (primary, old, new), (i, rank) in zip(moves, picks, strict=True):
                    X[i, rank] = new
                    holders[(primary, old)].remove((i, rank))
                    holders[(primary, new)].append((i, rank))
                    spread[primary][old] -= 1
                    spread[primary][new] += 1
                return True
    return False


def _squares_change(spread: list[list[int]], primaries: list[int], moves: tuple[tuple[int, int, int], ...]) -> int:
    """How the sum of (P[r] + F[p, r]) squared changes when each (p, old, new) move takes one from F[p, old] and
    gives it to F[p, new]."""
    delta: dict[tuple[int, int], int] = defaultdict(int)
    for primary, old, new in moves:
        delta[(primary, old)] -= 1
        delta[(primary, new)] += 1
    total = 0
    for (primary, node), d in delta.items():
        value = primaries[node] + spread[primary][node]
        total += (value + d) ** 2 - value**2
    return total


def _pick(
    problem: Problem,
    X: np.ndarray,
    holders: dict[tuple[int, int], list[tuple[int, int]]],
    moves: tuple[tuple[int, int, int], ...],
) -> list[tuple[int, int]] | None:
    """One distinct (partition, rank) for each move that may make it, together costing nothing more; None if
    the first few candidates of each do not."""
    picks: list[tuple[int, int]] = []
    cost = 0.0
    for primary, old, new in moves:
        for i, rank in holders[(primary, old)][:_PAIRS_TRIED]:
            if all(i != j for j, _ in picks) and _allowed(problem, X, i, rank, new):
                picks.append((i, rank))
                cost += _cost_change(problem, X, i, old, new)
                break
        else:
            return None
    return picks if cost <= 0 else None


def _allowed(problem: Problem, X: np.ndarray, i: int, rank: int, node: int) -> bool:
    """Whether copy `rank` of partition `i` may move to `node`: no other copy there, the rack limit kept."""
    others = np.delete(X[i], rank)
    if node in others:
        return False
    return int((problem.rack[others] == problem.rack[node]).sum()) < problem.rack_limit


def _cost_change(problem: Problem, X: np.ndarray, i: int, old: int, new: int) -> float:
    """What moving a replica of partition `i` from node `old` to node `new` changes in traffic and migration."""
    primary = X[i, 0]
    traffic = problem.horizon * problem.increment[i] * (problem.hops[primary, new] - problem.hops[primary, old])
    migration = 0.0
    if problem.known[i]:
        migration = problem.migration_weight * problem.size[i] * (
            float(not problem.holder[i, new]) - float(not problem.holder[i, old])
        )
    return float(traffic + migration)
