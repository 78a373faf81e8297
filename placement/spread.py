"""A placement that is feasible by construction, whenever any is: the solver's fallback start.

The copies of all partitions are laid out in one sequence, rack after rack, and copy t goes to partition
t mod l, so a partition's copies are l apart. A rack's run is at most `rack_limit` * l long, so it gives
a partition at most `rack_limit` copies; inside the run copies go node after node, each node's stretch at
most l long, so no node gets a partition twice. Runs are as even as the racks' capacities allow, and
stretches as even as the nodes'. It ignores every cost; the solver improves on it.
"""

from __future__ import annotations

import numpy as np

from placement.build import InfeasiblePlacement
from placement.problem import Problem


def spread_assignment(problem: Problem) -> np.ndarray:
    """A complete assignment honouring the rack limit and capacities; `InfeasiblePlacement` if none exists."""
    partitions, copies = problem.partitions, problem.replicas + 1
    per_node = np.minimum(problem.slots, partitions)
    racks = np.unique(problem.rack)
    room = np.array(
        [min(int(per_node[problem.rack == r].sum()), problem.rack_limit * partitions) for r in racks],
        dtype=np.int64,
    )
    needed = copies * partitions
    if room.sum() < needed:
        raise InfeasiblePlacement(
            f"{partitions} partitions x {copies} copies need {needed} slots with at most "
            f"{problem.rack_limit} per rack, only {int(room.sum())} available",
            partitions=partitions, copies=copies, needed=needed, available=int(room.sum()),
        )
    flat = np.empty(needed, dtype=np.int64)  # position t is copy t // l of partition t % l
    position = 0
    for r, share in zip(racks, even_split(room, needed), strict=True):
        nodes = np.flatnonzero(problem.rack == r)
        flat[position : position + share] = np.repeat(nodes, even_split(per_node[nodes], int(share)))
        position += share
    return np.ascontiguousarray(flat.reshape(copies, partitions).T)


def even_split(room: np.ndarray, total: int) -> np.ndarray:
    """Integers at most `room` summing to `total`, as equal as the rooms allow (water filling)."""
    room = np.asarray(room, dtype=np.int64)
    if total > room.sum():
        raise ValueError(f"cannot split {total} into rooms totalling {int(room.sum())}")
    low, high = 0, int(room.max(initial=0))
    while low < high:  # smallest level whose capped sum reaches total
        mid = (low + high) // 2
        if np.minimum(room, mid).sum() >= total:
            high = mid
        else:
            low = mid + 1
    out = np.minimum(room, max(low - 1, 0))
    short = total - int(out.sum())
    extra = np.flatnonzero(room > out)[:short]
    out[extra] += 1
    return out
