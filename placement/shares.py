"""Shares of the node slots for sub-problems that are solved apart but must add up to a balanced load."""

from __future__ import annotations

import numpy as np


def slot_shares(slot_costs: np.ndarray, roles_per_block: np.ndarray) -> list[np.ndarray]:
    """Split every node's slots among blocks so that each block sees a scaled-down copy of the cluster.

    The cheapest slots overall (as many as there are roles: the slots the load-optimal spread of roles
    would use) are dealt so that block b gets exactly `roles_per_block[b]` of them, spread evenly along
    each node's run; the dearer slots are dealt round-robin. A block's slots on a node keep their global
    costs, in increasing order, so the blocks' load costs add up to the true one.
    """
    nodes, width = slot_costs.shape
    blocks = len(roles_per_block)
    finite = np.isfinite(slot_costs)
    roles = int(roles_per_block.sum())
    flat = np.where(finite, slot_costs, np.inf).ravel()
    cheap = np.zeros(nodes * width, dtype=bool)
    cheap[np.argsort(flat, kind="stable")[:roles]] = True
    cheap = cheap.reshape(nodes, width) & finite
    owner = np.full((nodes, width), -1, dtype=np.int64)
    # Cheap slots in node order, each block owning positions evenly spread along the sequence.
    ideal = np.concatenate(
        [(np.arange(count) + 0.5) / count for count in roles_per_block if count > 0]
    ) if roles else np.zeros(0)
    which = np.repeat(np.flatnonzero(roles_per_block > 0), roles_per_block[roles_per_block > 0])
    owner[cheap] = which[np.argsort(ideal, kind="stable")]
    dear = finite & ~cheap
    n_index, j_index = np.nonzero(dear)
    owner[n_index, j_index] = (j_index + n_index) % blocks
    shares = []
    for b in range(blocks):
        mine = owner == b
        share_width = max(int(mine.sum(axis=1).max(initial=0)), 1)
        share = np.full((nodes, share_width), np.inf)
        rank = np.cumsum(mine, axis=1) - 1
        n_index, j_index = np.nonzero(mine)
        share[n_index, rank[n_index, j_index]] = slot_costs[n_index, j_index]
        shares.append(share)
    return shares
