"""The cheapest replica group for one partition while every other partition stays where it is.

Exact for that one partition: for each candidate primary node a, the replicas' costs are independent of
one another (traffic runs primary to replica only), and a rack limit is a partition matroid, so the
best replicas are each rack's cheapest allowed nodes, then the q cheapest of those. With distinct racks
(`rack_limit` 1), nodes that look alike from every other rack (a rack, in a tree) are handled as one
class, so a choice costs O(z + classes^2) rather than O(z^2).
"""

from __future__ import annotations

import numpy as np

from placement.problem import Problem, replica_choice_cost


def best_group(problem: Problem, p: int, counts: np.ndarray) -> np.ndarray | None:
    """Nodes (primary first) of the cheapest group for partition `p`, or None if none fits.

    `counts` are the roles per node held by the other partitions; they set the load cost of one more role.
    """
    nodes = np.arange(problem.nodes)
    width = problem.slot_costs.shape[1]
    own = np.full(problem.nodes, np.inf)
    room = counts < width
    own[room] = problem.slot_costs[nodes[room], counts[room]]
    holder = problem.holder[p]
    increment = problem.increment[p]
    if problem.known[p]:
        own += problem.migration_weight * problem.size[p] * ~holder
    as_primary = own + problem.primary_costs[p]
    q = problem.replicas
    if q == 0:
        a = int(np.argmin(as_primary))
        return np.array([a]) if np.isfinite(as_primary[a]) else None
    if problem.rack_limit > 1:
        return _best_group_by_node(problem, own, as_primary, increment)
    node_class, class_hops, class_rack = problem.position_classes
    classes = len(class_rack)
    cheapest_in_class = np.full(classes, np.inf)
    np.minimum.at(cheapest_in_class, node_class, own)
    # [primary's class, replica's class]: cheapest replica of that class for a primary of that class.
    as_replica = cheapest_in_class[None, :] + problem.horizon * increment * class_hops
    as_replica[class_rack[:, None] == class_rack[None, :]] = np.inf
    per_rack = np.full((classes, int(class_rack.max()) + 1), np.inf)
    np.minimum.at(per_rack.T, class_rack, as_replica.T)
    if (np.isfinite(per_rack).sum(axis=1) < q).all():
        return None
    replicas_cost = np.partition(per_rack, q - 1, axis=1)[:, :q].sum(axis=1)
    total = as_primary + replicas_cost[node_class]
    a = int(np.argmin(total))
    if not np.isfinite(total[a]):
        return None
    racks = np.argsort(per_rack[node_class[a]], kind="stable")[:q]
    chosen = []
    for d in racks:
        in_rack = np.flatnonzero(class_rack == d)
        c = in_rack[np.argmin(as_replica[node_class[a], in_rack])]
        members = np.flatnonzero(node_class == c)
        chosen.append(members[np.argmin(own[members])])
    return np.array([a, *chosen])


def _best_group_by_node(
    problem: Problem, own: np.ndarray, as_primary: np.ndarray, increment: float
) -> np.ndarray | None:
    as_replica = own[None, :] + problem.horizon * increment * problem.hops
    total = as_primary + replica_choice_cost(as_replica, problem.rack, problem.rack_limit, problem.replicas)
    a = int(np.argmin(total))
    if not np.isfinite(total[a]):
        return None
    row = as_replica[a].copy()
    row[a] = np.inf
    chosen: list[int] = []
    per_rack = {int(problem.rack[a]): 1}
    for b in np.argsort(row, kind="stable"):
        r = int(problem.rack[b])
        if per_rack.get(r, 0) < problem.rack_limit:
            chosen.append(int(b))
            per_rack[r] = per_rack.get(r, 0) + 1
            if len(chosen) == problem.replicas:
                break
    return np.array([a, *chosen])


def group_cost(problem: Problem, p: int, group: np.ndarray, counts: np.ndarray) -> float:
    """Cost of partition `p` in `group` (primary first) given the other partitions' role counts."""
    width = problem.slot_costs.shape[1]
    if (counts[group] >= width).any():
        return float("inf")
    load = problem.slot_costs[group, counts[group]].sum()
    new_copies = problem.size[p] * (~problem.holder[p, group]).sum() if problem.known[p] else 0.0
    traffic = problem.horizon * problem.increment[p] * problem.hops[group[0], group[1:]].sum()
    return float(traffic + load + problem.migration_weight * new_copies + problem.primary_costs[p, group[0]])


def improvable(problem: Problem, X: np.ndarray, counts: np.ndarray, tolerance: float = 1e-9) -> np.ndarray:
    """Partitions for which `best_group` would find a strictly cheaper group, all judged at `counts`.

    The same computation as `best_group`, for many partitions at once against one snapshot of the
    counts, so that a pass re-seats only the partitions that can gain. With distinct racks it is exact;
    otherwise it compares against a lower bound (replica load and replica hops minimised apart), so it
    may name a partition that cannot gain but never misses one that can.
    """
    node_class, class_hops, class_rack = problem.position_classes
    classes, racks = len(class_rack), int(class_rack.max()) + 1
    by_class = problem.rack_limit == 1
    q = problem.replicas
    width = problem.slot_costs.shape[1]
    nodes = np.arange(problem.nodes)
    marginal = np.full(problem.nodes, np.inf)
    room = counts < width
    marginal[room] = problem.slot_costs[nodes[room], counts[room]]
    out = []
    step = max(1, (1 << 21) // (classes * classes if by_class else problem.nodes))
    if not by_class and q > 0:
        usable = np.where(problem.slots[None, :] > 0, problem.hops, np.inf)
        nearest = replica_choice_cost(usable, problem.rack, problem.rack_limit, q)  # fewest hops to replicas
    for start in range(0, problem.partitions, step):
        rows = np.arange(start, min(start + step, problem.partitions))
        group = X[rows]
        r = np.arange(len(rows))[:, None]
        own_slot = problem.slot_costs[group, counts[group] - 1]  # the slots they hold now
        moving = problem.migration_weight * (problem.size * problem.known)[rows][:, None]
        holder = problem.holder[rows]
        own = marginal[None, :] + moving * ~holder
        own[r, group] = own_slot + (moving * ~holder[r, group])
        increment = problem.increment[rows]
        handover = problem.primary_costs[rows]
        current = (own[r, group].sum(axis=1) + handover[r[:, 0], group[:, 0]]
                   + problem.horizon * increment * problem.hops[group[:, :1], group[:, 1:]].sum(axis=1))
        if q == 0:
            best = (own + handover).min(axis=1)
        elif not by_class:
            cheapest = np.sort(np.partition(own, min(q, problem.nodes - 1), axis=1)[:, : q + 1], axis=1)
            others = cheapest[:, :q].sum(axis=1)[:, None]
            among = own <= cheapest[:, q - 1 : q]  # node a is one of the q cheapest: use the next instead
            others = np.where(among, others - own + cheapest[:, q : q + 1], others)
            bound = own + handover + others + problem.horizon * increment[:, None] * nearest[None, :]
            best = bound.min(axis=1)
        else:
            cheapest = np.full((len(rows), classes), np.inf)
            np.minimum.at(cheapest.T, node_class, own.T)
            as_replica = cheapest[:, None, :] + problem.horizon * increment[:, None, None] * class_hops[None]
            as_replica[:, class_rack[:, None] == class_rack[None, :]] = np.inf
            per_rack = np.full((len(rows), classes, racks), np.inf)
            np.minimum.at(np.moveaxis(per_rack, 2, 0), class_rack, np.moveaxis(as_replica, 2, 0))
            replicas_cost = np.partition(per_rack, q - 1, axis=2)[:, :, :q].sum(axis=2)
            best = (own + handover + replicas_cost[:, node_class]).min(axis=1)
        gain = current - best
        out.append(rows[gain > tolerance * np.maximum(1.0, np.abs(current))])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
