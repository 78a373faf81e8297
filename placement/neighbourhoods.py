"""Neighbourhoods of a placement that one exact step can search: each step never raises the cost.

- `move_copies`: one copy of every partition moves, all at once, by one assignment of copies by node
  slots; the partition's other copies stay and its best copy becomes primary.
- `permute_groups`: the existing groups are handed to the partitions that gain most from them.
- `reseat_partitions`: one partition at a time takes its cheapest whole group.
- `reseat_pairs`: two partitions at a time take their cheapest two groups (small problems only).
- `choose_primaries`: each partition makes primary the copy that costs least as primary.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy.optimize import linear_sum_assignment

from placement.assignment import assign_to_slots
from placement.best_group import best_group, group_cost, improvable
from placement.exhaustive import group_costs, valid_groups
from placement.problem import Problem

EVERY_PATTERN_UP_TO = 81


def move_copies(
    problem: Problem, X: np.ndarray, which: np.ndarray, chunk_roles: int, stay_bonus: float = 0.0
) -> np.ndarray:
    """Re-place copy `which[p]` (a column of X) of every partition p, a chunk of partitions at a time.

    Each chunk is one assignment, exact given everything outside the chunk's moving copies. A positive
    `stay_bonus` (a cost unit far below any gain that matters) breaks ties in favour of not moving,
    which makes the assignment fast when few copies should move.
    """
    for chunk in chunks(np.arange(problem.partitions), chunk_roles):
        columns = which[chunk]
        counts = problem.counts(X) - np.bincount(X[chunk, columns], minlength=problem.nodes)
        costs = problem.copy_costs(X, chunk, columns)
        if stay_bonus:
            costs[np.arange(len(chunk)), X[chunk, columns]] -= stay_bonus
        X[chunk, columns] = assign_to_slots(costs, problem.slot_costs, counts)
        choose_primaries(problem, X, chunk)
    return X


def choose_primaries(problem: Problem, X: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Make primary, in each partition of `rows` (default all), the copy with least traffic plus hand-over.

    Load and new copies do not depend on which copy leads, so this is exact per partition.
    """
    rows = np.arange(problem.partitions) if rows is None else rows
    if X.shape[1] < 2 or len(rows) == 0:
        return X
    group = X[rows]
    increment = problem.increment[rows][:, None]
    traffic = problem.horizon * increment * problem.hops[group[:, :, None], group[:, None, :]].sum(axis=2)
    cost = traffic + problem.primary_costs[rows[:, None], group]
    best = np.argmin(cost, axis=1)
    i = np.arange(len(rows))
    lead = cost[:, 0]
    # A lead off its pinned node costs inf: any finite copy is better (inf minus a tolerance would be nan).
    tolerance = np.where(np.isfinite(lead), 1e-9 * np.maximum(1.0, np.abs(lead)), 0.0)
    better = cost[i, best] < lead - tolerance
    p, lead = rows[better], best[better]
    X[p, 0], X[p, lead] = X[p, lead], X[p, 0]
    return X


def permute_groups(problem: Problem, X: np.ndarray, chunk_roles: int) -> np.ndarray:
    """Hand the existing groups to the partitions that gain most from them (load does not change).

    A partition's cost in a group is its traffic (best primary among the group), hand-over and new
    copies. Without migration terms that is increment times the group's traffic shape, so the best
    permutation pairs the heaviest partitions with the tightest groups (rearrangement inequality); with
    them (or with pinned primaries, which only groups holding the pinned node may take), one
    assignment of partitions by groups per chunk.
    """
    if problem.partitions < 2:
        return X
    if not problem.known.any() and not (problem.pinned >= 0).any():
        shape = problem.hops[X[:, :, None], X[:, None, :]].sum(axis=2).min(axis=1)
        heaviest = np.argsort(-problem.increment, kind="stable")
        tightest = np.argsort(shape, kind="stable")
        out = np.empty_like(X)
        out[heaviest] = X[tightest]
        return choose_primaries(problem, out)
    for chunk in chunks(np.arange(problem.partitions), chunk_roles):
        groups = X[chunk]
        holds = problem.holder[chunk[:, None, None], groups[None, :, :]]  # [partition, group, copy]
        increment = problem.increment[chunk][:, None, None]
        traffic = problem.horizon * increment * problem.hops[groups[:, :, None], groups[:, None, :]].sum(axis=2)
        handover = problem.primary_costs[chunk[:, None, None], groups[None, :, :]]
        lead = (traffic + handover).min(axis=2)
        new_copies = (~holds).sum(axis=2) * (problem.size * problem.known)[chunk][:, None]
        _, pick = linear_sum_assignment(lead + problem.migration_weight * new_copies)
        X[chunk] = groups[pick]
        choose_primaries(problem, X, chunk)
    return X


def reseat_partitions(problem: Problem, X: np.ndarray, max_passes: int = 8) -> np.ndarray:
    """Give partitions their cheapest whole group with the others fixed, while one is strictly cheaper.

    This reaches what single-copy steps cannot: moving a group to other racks at once. Each pass first
    screens every partition against one snapshot of the load (`improvable`), then re-seats the
    candidates one by one against the live load; it stops when the screen finds none, which makes the
    result a local optimum for moving any one group.
    """
    counts = problem.counts(X)
    for _ in range(max_passes):
        candidates = improvable(problem, X, counts)
        if len(candidates) == 0:
            break
        for p in candidates:
            current = X[p].copy()
            counts[current] -= 1
            group = best_group(problem, int(p), counts)
            if group is not None:
                now = group_cost(problem, int(p), current, counts)
                if group_cost(problem, int(p), group, counts) < now - 1e-9 * max(1.0, abs(now)):
                    X[p] = group
            counts[X[p]] += 1
    return X


def copy_patterns(partitions: int, copies: int, round_: int) -> list[np.ndarray]:
    """Which copy (column) of each partition each step of a round moves.

    First every column alone, then `copies` mixed steps where partition p moves column
    (shift + h(p)) mod copies, h differing per round, so that over the rounds any two
    partitions meet with any two columns: the replica of one may then take the primary's node of another.
    h is drawn from a generator seeded by the round number, so results are reproducible. A small
    problem gets every combination of columns instead, which searches its neighbourhood completely.
    """
    if copies**partitions <= EVERY_PATTERN_UP_TO:
        return [np.array(pattern) for pattern in itertools.product(range(copies), repeat=partitions)]
    same = [np.full(partitions, column) for column in range(copies)]
    h = np.random.default_rng(round_).integers(0, copies, size=partitions)
    return same + [(shift + h) % copies for shift in range(copies)]


def reseat_pairs(problem: Problem, X: np.ndarray, budget: float = 2e6) -> np.ndarray:
    """Give each pair of partitions in turn the cheapest pair of groups, the others fixed.

    Exact over the pair (every two groups are tried), so it finds what no one-partition step can: a
    partition giving up a node another needs. Only for small problems: the work is groups^2 per pair,
    and the pass is skipped when that exceeds `budget` in all.
    """
    n, z = problem.partitions, problem.nodes
    at_most = z * math.comb(z - 1, problem.replicas)  # groups, before the rack limit
    if n < 2 or at_most**2 * z * n * (n - 1) / 2 > budget:
        return X
    groups = np.array(valid_groups(problem), dtype=np.int64)
    own = group_costs(problem, groups)
    member = np.zeros((len(groups), problem.nodes), dtype=np.int64)
    np.put_along_axis(member, groups, 1, axis=1)
    loads = np.concatenate([np.zeros((problem.nodes, 1)), problem.cumulative_slot_costs], axis=1)
    width = loads.shape[1] - 1
    index = {(g[0], *sorted(g[1:])): i for i, g in enumerate(groups.tolist())}

    def group_of(p: int) -> int:
        row = X[p].tolist()
        return index[(row[0], *sorted(row[1:]))]

    nodes = np.arange(problem.nodes)
    for p, r in itertools.combinations(range(n), 2):
        base = problem.counts(X) - member[group_of(p)] - member[group_of(r)]
        counts = base[None, None, :] + member[:, None, :] + member[None, :, :]
        fits = (counts <= problem.slots).all(axis=2)
        load = loads[nodes, np.minimum(counts, width)].sum(axis=2)
        total = np.where(fits, own[p][:, None] + own[r][None, :] + load, np.inf)
        now = total[group_of(p), group_of(r)]
        a, b = np.unravel_index(int(np.argmin(total)), total.shape)
        with np.errstate(invalid="ignore"):  # inf - inf: no feasible improvement, nothing moves
            improves = total[a, b] < now - 1e-9 * max(1.0, abs(now))
        if improves:
            X[p], X[r] = groups[a], groups[b]
    return X


def chunks(rows: np.ndarray, size: int) -> list[np.ndarray]:
    """`rows` dealt into as few chunks of at most `size` as possible, round-robin (so chunks are alike)."""
    if len(rows) == 0:
        return []
    count = -(-len(rows) // max(size, 1))
    return [rows[i::count] for i in range(count)]
