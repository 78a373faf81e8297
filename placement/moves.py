"""Moves: what changes between two placements, one role of one partition at a time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from placement.demand import PartitionDemand
from placement.groups import Placement, ReplicaGroup, Role
from placement.topology import Topology


@dataclass(frozen=True)
class Move:
    """Role `role` of `partition` leaves node `source` for node `target`, shipping `bytes` to it.

    `source` is None when the role is new (more replicas), `target` None when it is dropped (fewer).
    `bytes` is the state size for a node that holds no copy yet, one increment when the primary moves to
    a node that already holds a replica (a hand-over), 0 when the target already holds the state.
    `sender` is the live node that ships those bytes: the source when it is alive, else the nearest
    live holder; None when nothing is shipped or it comes from the checkpoint location.
    """

    partition: str
    role: Role
    source: str | None
    target: str | None
    bytes: int
    sender: str | None

    @property
    def participants(self) -> tuple[str, ...]:
        """The nodes busy with this move: the one that ships and the one that takes the role.

        A dropped role has none: its node deletes the copy, in no transfer.
        """
        return tuple(n for n in (self.sender, self.target) if n is not None)

    def to_json(self) -> dict[str, object]:
        """The move as a JSON object."""
        return {
            "partition": self.partition,
            "role": str(self.role),
            "source": self.source,
            "target": self.target,
            "bytes": self.bytes,
            "sender": self.sender,
        }


def diff_moves(
    before: Placement,
    after: Placement,
    demands: Sequence[PartitionDemand],
    topology: Topology,
) -> list[Move]:
    """The moves that turn `before` into `after`, on `topology` (the nodes alive after the change).

    Partitions new in `after` start empty and need no move; a replica that merely changes rank is not a
    move. Replicas that leave a node are paired, in group order, with replicas that arrive.
    """
    demand = {d.id: d for d in demands}
    moves: list[Move] = []
    for partition, new in after.items():
        old = before.get(partition)
        if old is None:
            continue
        d = demand[partition]
        alive_holders = [n for n in old.nodes if n in topology]
        if new.primary != old.primary:
            moves.append(_move(d, Role.PRIMARY, old.primary, new.primary, alive_holders, topology))
        leaving = [n for n in old.replicas if n not in new.replicas]
        arriving = [n for n in new.replicas if n not in old.replicas]
        for i in range(max(len(leaving), len(arriving))):
            source = leaving[i] if i < len(leaving) else None
            target = arriving[i] if i < len(arriving) else None
            moves.append(_move(d, Role.REPLICA, source, target, alive_holders, topology))
    return moves


def _move(
    demand: PartitionDemand,
    role: Role,
    source: str | None,
    target: str | None,
    alive_holders: list[str],
    topology: Topology,
) -> Move:
    if target is None:
        return Move(demand.id, role, source, None, 0, None)
    if target not in alive_holders:
        shipped = demand.size_bytes  # a new copy
    elif role is Role.PRIMARY:
        shipped = demand.increment_bytes  # a hand-over to a node holding a replica
    else:
        shipped = 0  # the target keeps the copy it holds
    sender: str | None = None
    if shipped and source is not None and source in topology:
        sender = source
    elif shipped == demand.size_bytes and shipped:
        sender = _nearest(target, [n for n in alive_holders if n != target], topology)
    return Move(demand.id, role, source, target, shipped, sender)


def _nearest(target: str, candidates: list[str], topology: Topology) -> str | None:
    if not candidates or target not in topology:
        return None
    hops = topology.hops[topology.index[target]]
    return min(candidates, key=lambda n: (hops[topology.index[n]], n))


def roles_on(placement: Mapping[str, ReplicaGroup], node_id: str) -> int:
    """How many roles `node_id` holds in `placement`."""
    return sum(node_id in group.nodes for group in placement.values())
