"""Optimal assignment of roles to node slots with `scipy.optimize.linear_sum_assignment`.

A node with room for f more roles is expanded into f slots; its j-th free slot costs the load of the
node's (used + j)-th role, which grows with j. A role's cost on a slot is its own cost on the node plus
the slot's. Expanding every node into every free slot makes the matrix needlessly wide, so each node
first offers only a few slots. That loses nothing when the optimum leaves at least one offered slot of
every truncated node empty: a further slot of that node costs no less than the empty one for every role,
so the LP dual of the truncated optimum (0 on empty columns) stays feasible on the columns left out.
Otherwise the offer of the saturated nodes is doubled and the assignment solved again.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment


class NoAssignment(Exception):
    """The roles cannot all be placed in the free slots without breaking a constraint."""


def assign_to_slots(role_costs: np.ndarray, slot_costs: np.ndarray, used: np.ndarray) -> np.ndarray:
    """The node for each role (row of `role_costs`) minimising role plus slot costs.

    `role_costs` is (roles, nodes) with inf where a role may not go; `slot_costs[n, j]` is the cost of
    node n's (j+1)-th role (inf past its capacity); `used[n]` roles already occupy node n's first slots.
    Raises `NoAssignment` when no finite assignment exists.
    """
    roles, nodes = role_costs.shape
    if roles == 0:
        return np.zeros(0, dtype=np.int64)
    capacity = np.isfinite(slot_costs).sum(axis=1)
    free = np.maximum(capacity - used, 0)
    if free.sum() < roles:
        raise NoAssignment(f"{roles} roles but only {int(free.sum())} free slots")
    favourite = np.bincount(np.argmin(role_costs, axis=1), minlength=nodes)
    spread = -(-roles // max(1, int((free > 0).sum())))
    offer = np.minimum(free, favourite + min(spread, 2) + 1)
    while True:
        if offer.sum() < roles:
            offer = _widen(offer, free, offer < free)
            continue
        column_node = np.repeat(np.arange(nodes), offer)
        column_slot = used[column_node] + _ranks_within(offer)
        cost = role_costs[:, column_node] + slot_costs[column_node, column_slot][None, :]
        try:
            rows, columns = linear_sum_assignment(cost)
        except ValueError as error:  # scipy: "cost matrix is infeasible"
            if (offer < free).any():
                offer = _widen(offer, free, offer < free)
                continue
            raise NoAssignment(str(error)) from error
        if not np.isfinite(cost[rows, columns]).all():
            raise NoAssignment("only an assignment through forbidden nodes exists")
        taken = np.bincount(column_node[columns], minlength=nodes)
        saturated = (taken == offer) & (offer < free)
        if not saturated.any():
            out = np.empty(roles, dtype=np.int64)
            out[rows] = column_node[columns]
            return out
        offer = _widen(offer, free, saturated)


def _ranks_within(offer: np.ndarray) -> np.ndarray:
    """0, 1, ..., offer[0]-1, 0, 1, ..., offer[1]-1, ... as one array."""
    total = int(offer.sum())
    starts = np.repeat(np.cumsum(offer) - offer, offer)
    return np.arange(total) - starts


def _widen(offer: np.ndarray, free: np.ndarray, which: np.ndarray) -> np.ndarray:
    out = offer.copy()
    out[which] = np.minimum(free[which], np.maximum(2 * offer[which], 1))
    return out
