"""Exhaustive search over every valid placement: the yardstick for the solver on small problems.

Every partition may take any group (a primary and a set of replicas on distinct nodes within the rack
limit); every combination of groups that fits the node capacities is priced, all at once with numpy.
The number of combinations is groups ** partitions, so keep problems tiny (about 10^6 combinations).
"""

from __future__ import annotations

import itertools

import numpy as np

from placement.problem import Problem


def exhaustive_optimum(problem: Problem, limit: int = 2_000_000) -> tuple[float, np.ndarray]:
    """The least cost of `problem` and an assignment reaching it; ValueError if the search is too big."""
    groups = valid_groups(problem)
    count = len(groups) ** problem.partitions
    if count > limit:
        raise ValueError(f"{count} combinations exceed the limit of {limit}")
    if not groups:
        raise ValueError("no valid group")
    G = np.array(groups, dtype=np.int64)  # (groups, copies), primary first
    per_group = group_costs(problem, G)
    member = np.zeros((len(G), problem.nodes), dtype=np.int64)
    np.put_along_axis(member, G, 1, axis=1)
    loads = np.concatenate([np.zeros((problem.nodes, 1)), problem.cumulative_slot_costs], axis=1)
    best, best_choice = np.inf, None
    combos = itertools.product(range(len(G)), repeat=problem.partitions)
    while True:
        chunk = np.array(list(itertools.islice(combos, 200_000)), dtype=np.int64)
        if len(chunk) == 0:
            break
        counts = member[chunk].sum(axis=1)
        fits = (counts <= problem.slots).all(axis=1)
        if not fits.any():
            continue
        chunk, counts = chunk[fits], counts[fits]
        width = loads.shape[1] - 1
        load = loads[np.arange(problem.nodes), np.minimum(counts, width)].sum(axis=1)
        total = per_group[np.arange(problem.partitions), chunk].sum(axis=1) + load
        i = int(np.argmin(total))
        if total[i] < best:
            best, best_choice = float(total[i]), chunk[i]
    if best_choice is None:
        raise ValueError("no placement fits")
    return best, G[best_choice]


def group_costs(problem: Problem, groups: np.ndarray) -> np.ndarray:
    """(partitions, groups): each partition's traffic, new copies and hand-over in each group (no load)."""
    out = np.zeros((problem.partitions, len(groups)))
    traffic = problem.hops[groups[:, :1], groups[:, 1:]].sum(axis=1)
    for p in range(problem.partitions):
        new_copies = (~problem.holder[p, groups]).sum(axis=1) * problem.size[p] * problem.known[p]
        out[p] = (problem.horizon * problem.increment[p] * traffic + problem.migration_weight * new_copies
                  + problem.primary_costs[p, groups[:, 0]])
    return out


def valid_groups(problem: Problem) -> list[tuple[int, ...]]:
    """Every group one partition may take (primary first): distinct usable nodes within the rack limit."""
    groups = []
    nodes = [n for n in range(problem.nodes) if problem.slots[n] > 0]
    for primary in nodes:
        for replicas in itertools.combinations([n for n in nodes if n != primary], problem.replicas):
            members = (primary, *replicas)
            if np.bincount(problem.rack[list(members)]).max() <= problem.rack_limit:
                groups.append(members)
    return groups
