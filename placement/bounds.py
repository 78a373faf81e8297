"""A lower bound on the cost of any placement, to certify how far a solution can be from optimal.

The cost is traffic + load + migration, so the sum of a lower bound on each part, each taken over
all placements separately, bounds the optimum from below:

- traffic: each partition pays at least its increment times the fewest hops from any primary node to
  `q` other nodes its replicas may use (the rack limit honoured);
- load: the roles' load costs are at least the (q+1) l cheapest node slots overall (each node's slot
  costs rise, so the cheapest slots of a node are its first);
- migration: each partition with a current group needs a new copy for every copy it lacks on nodes
  that may keep roles.

When traffic is not in tension with load (a topology with room for every group in its cheapest shape),
the bound is nearly tight, so `cost / lower_bound - 1` is a certified optimality gap.
"""

from __future__ import annotations

import numpy as np

from placement.problem import Problem, replica_choice_cost


def lower_bound(problem: Problem) -> float:
    """A value no placement of `problem` can beat."""
    return traffic_bound(problem) + load_bound(problem) + migration_bound(problem)


def traffic_bound(problem: Problem) -> float:
    """Least traffic any placement can have."""
    q = problem.replicas
    if q == 0 or problem.partitions == 0:
        return 0.0
    usable = problem.slots > 0
    hops = np.where(usable[None, :], problem.hops, np.inf)
    fewest = replica_choice_cost(hops, problem.rack, problem.rack_limit, q)[usable].min()
    return float(problem.horizon * problem.increment.sum() * fewest)


def load_bound(problem: Problem) -> float:
    """Least load cost of holding (q+1) l roles."""
    roles = problem.partitions * (problem.replicas + 1)
    costs = problem.slot_costs[np.isfinite(problem.slot_costs)]
    if roles == 0:
        return 0.0
    return float(np.partition(costs, roles - 1)[:roles].sum())


def migration_bound(problem: Problem) -> float:
    """Bytes of the copies that must be created whatever the placement."""
    keepable = problem.holder & (problem.slots > 0)[None, :]
    missing = np.maximum(problem.replicas + 1 - keepable.sum(axis=1), 0)
    return float(problem.migration_weight * (problem.size * missing * problem.known).sum())
