"""A placement that is feasible by construction, whenever any is: the solver's fallback start.

The copies of all partitions are laid out in one sequence, domain after domain, each domain taking at
most one copy per partition; copy t goes to partition t mod l. A domain's run is at most l long, so it
never meets a partition twice, and every partition gets one copy from each of q+1 consecutive runs. Runs
are as even as the domains' capacities allow, and inside a domain copies go to its nodes as evenly as
their capacities allow. It ignores every cost; the solver improves on it.
"""

from __future__ import annotations

import numpy as np

from placement.problem import InfeasiblePlacement, Problem


def spread_assignment(problem: Problem) -> np.ndarray:
    """A complete assignment honouring domains and capacities; `InfeasiblePlacement` if none exists."""
    partitions, copies = problem.partitions, problem.replicas + 1
    slots = np.minimum(problem.slots, partitions)
    domains = np.unique(problem.domain)
    room = np.array([min(int(slots[problem.domain == d].sum()), partitions) for d in domains], dtype=np.int64)
    needed = copies * partitions
    if room.sum() < needed or len(domains) < copies:
        raise InfeasiblePlacement(
            f"{partitions} partitions x {copies} copies need {needed} slots in distinct {problem.domain_kind}s, "
            f"only {int(room.sum())} available",
            partitions=partitions, copies=copies, needed=needed, available=int(room.sum()),
        )
    quota = even_split(room, needed)
    flat = np.empty(needed, dtype=np.int64)  # position t is rank t // partitions of partition t % partitions
    position = 0
    for d, share in zip(domains, quota, strict=True):
        nodes = np.flatnonzero(problem.domain == d)
        per_node = even_split(slots[nodes], int(share))
        flat[position : position + share] = np.repeat(nodes, per_node)
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
