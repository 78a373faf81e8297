"""Who replicates what. For now a ring; the placement package replaces `choose_replica_group`."""

from __future__ import annotations

from collections.abc import Sequence


def choose_replica_group(partition: str, primary: str, live_nodes: Sequence[str], q: int) -> list[str]:
    """The replica group of `partition`: the next `q` live nodes after its primary on a ring of node ids.

    The ring is the sorted live node ids; a primary that is not live is placed where it would sort.
    Fewer than `q` replicas when there are not enough other live nodes. `partition` is unused by the
    ring but part of the contract placement fulfils.
    """
    del partition
    ring = sorted(set(live_nodes) | {primary})
    start = ring.index(primary)
    others = [ring[(start + step) % len(ring)] for step in range(1, len(ring))]
    return [node for node in others if node in set(live_nodes)][: max(q, 0)]
