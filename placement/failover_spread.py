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
from dataclasses import dataclass

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
    state = _Spread.of(problem, X.copy(), around)
    z = problem.nodes
    for _ in range(_ROUNDS):
        swapped = False
        for p in range(z):
            after_loss = [state.primaries[r] + state.spread[p][r] for r in range(z)]
            movable = [r for r in range(z) if r != p and state.holders.get((p, r))]
            if not movable:
                continue
            a = max(movable, key=lambda r: after_loss[r])
            b = min((r for r in range(z) if r != p), key=lambda r: after_loss[r])
            if after_loss[a] - after_loss[b] >= 2 and state.even_out(p, a, b):
                swapped = True
        if not swapped:
            break
    return state.X


Move = tuple[int, int, int]  # (primary node, replica node it leaves, replica node it goes to)


@dataclass
class _Spread:
    """The assignment being evened out, with F (`spread[p][r]`), the primaries per node, and per (p, r) the
    movable copies: (partition, rank) of new groups with their primary on p and that copy on r."""

    problem: Problem
    X: np.ndarray
    spread: list[list[int]]  # Python ints: the pass does many small reads
    primaries: list[int]
    holders: dict[tuple[int, int], list[tuple[int, int]]]

    @classmethod
    def of(cls, problem: Problem, X: np.ndarray, around: Iterable[ReplicaGroup]) -> _Spread:
        z = problem.nodes
        spread = [[0] * z for _ in range(z)]
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
        holders: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
        for i, row in enumerate(X.tolist()):
            for rank in range(1, len(row)):
                spread[row[0]][row[rank]] += 1
                if not problem.known[i]:
                    holders[(row[0], row[rank])].append((i, rank))
        return cls(problem, X, spread, primaries, holders)

    def even_out(self, p: int, a: int, b: int) -> bool:
        """Move a replica of a partition with its primary on `p` from node `a` to node `b`, with one replica of
        another primary q moving from `b` to `a` (an exchange) or, on up to `_ROTATION_NODES` nodes, one of a
        primary c from `b` to a node x and one of a primary d from x to `a` (a rotation: on three nodes no
        exchange can help, every other partition with a replica on `b` having its primary on `a` or `p`). Every
        node keeps its count. Returns whether some such cycle lowered the spread at no cost."""
        z = self.problem.nodes
        for q in range(z):
            if q not in (p, a, b) and self.holders.get((q, b)) and self._cycle(((p, a, b), (q, b, a))):
                return True
        if z > _ROTATION_NODES:
            return False
        for c in range(z):
            if c in (p, b) or not self.holders.get((c, b)):
                continue
            for x in range(z):
                if x in (a, b, c):
                    continue
                for d in range(z):
                    if d not in (a, x) and self.holders.get((d, x)) and self._cycle(((p, a, b), (c, b, x), (d, x, a))):
                        return True
        return False

    def _cycle(self, moves: tuple[Move, ...]) -> bool:
        """Make `moves` if they lower the sum of squares and some copies may make them at no cost."""
        if self._squares_change(moves) >= 0:
            return False
        picks = self._pick(moves)
        if picks is None:
            return False
        for (primary, old, new), (i, rank) in zip(moves, picks, strict=True):
            self.X[i, rank] = new
            self.holders[(primary, old)].remove((i, rank))
            self.holders[(primary, new)].append((i, rank))
            self.spread[primary][old] -= 1
            self.spread[primary][new] += 1
        return True

    def _squares_change(self, moves: tuple[Move, ...]) -> int:
        """How the sum of (P[r] + F[p, r]) squared changes when each move takes one from F[p, old] and gives it
        to F[p, new]."""
        delta: dict[tuple[int, int], int] = defaultdict(int)
        for primary, old, new in moves:
            delta[(primary, old)] -= 1
            delta[(primary, new)] += 1
        total = 0
        for (primary, node), d in delta.items():
            value = self.primaries[node] + self.spread[primary][node]
            total += (value + d) ** 2 - value**2
        return total

    def _pick(self, moves: tuple[Move, ...]) -> list[tuple[int, int]] | None:
        """One distinct (partition, rank) for each move that may make it, together costing nothing more; None if
        the first few candidates of each do not."""
        picks: list[tuple[int, int]] = []
        cost = 0.0
        for primary, old, new in moves:
            for i, rank in self.holders[(primary, old)][:_PAIRS_TRIED]:
                if all(i != j for j, _ in picks) and _allowed(self.problem, self.X, i, rank, new):
                    picks.append((i, rank))
                    cost += _cost_change(self.problem, self.X, i, old, new)
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
