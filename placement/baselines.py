"""Two placements to measure the solver against, judged by the same cost model.

- greedy: partitions by decreasing increment, each given its cheapest group given those placed before
  (myopic, as a controller that places partitions as they appear would). The solver also uses it as a
  second start for its local search, so its result is never worse than this one;
- round robin: partition i starts at node i of a rack-interleaved node list and takes the next nodes
  with room that the rack limit allows (cost-blind, like Kafka's default replica assignment).
"""

from __future__ import annotations

import numpy as np

from placement.assignment import NoAssignment
from placement.best_group import best_group
from placement.problem import Problem


def greedy_assignment(problem: Problem) -> np.ndarray:
    """The greedy baseline; `NoAssignment` when it paints itself into a corner."""
    X = np.full((problem.partitions, problem.replicas + 1), -1, dtype=np.int64)
    counts = np.zeros(problem.nodes, dtype=np.int64)
    for p in np.lexsort((-problem.size, -problem.increment)):
        group = best_group(problem, int(p), counts)
        if group is None:
            raise NoAssignment(f"greedy found no room for partition {problem.partition_ids[p]}")
        X[p] = group
        counts[group] += 1
    return X


def round_robin_assignment(problem: Problem) -> np.ndarray:
    """The round-robin baseline; `NoAssignment` when the walk finds no room."""
    copies = problem.replicas + 1
    order = _rack_interleaved(problem.rack)
    z = len(order)
    slots = problem.slots
    counts = np.zeros(problem.nodes, dtype=np.int64)
    X = np.empty((problem.partitions, copies), dtype=np.int64)
    for p in range(problem.partitions):
        chosen: list[int] = []
        per_rack: dict[int, int] = {}
        for step in range(z):
            n = int(order[(p + step) % z])
            r = int(problem.rack[n])
            if counts[n] < slots[n] and per_rack.get(r, 0) < problem.rack_limit:
                chosen.append(n)
                per_rack[r] = per_rack.get(r, 0) + 1
                if len(chosen) == copies:
                    break
        if len(chosen) < copies:
            raise NoAssignment(f"round robin found no room for partition {problem.partition_ids[p]}")
        X[p] = chosen
        counts[chosen] += 1
    return X


def _rack_interleaved(rack: np.ndarray) -> np.ndarray:
    """Nodes ordered first node of each rack, second node of each rack, ..."""
    rank_in_rack = np.zeros(len(rack), dtype=np.int64)
    seen: dict[int, int] = {}
    for n, r in enumerate(rack.tolist()):
        rank_in_rack[n] = seen.get(r, 0)
        seen[r] = rank_in_rack[n] + 1
    return np.lexsort((rack, rank_in_rack))
