"""Moves: what changes between two placements, one role of one partition at a time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from placement.demand import PartitionDemand
from placement.groups import Placement, ReplicaGroup, Role
from placement.topology import Topology


@dataclass(frozen=True)
class Move:
    """A copy of `partition` leaves node `source` for node `target`, which takes `role` there.

    Two kinds. A *copy move* puts a new copy on `target` (a node that held none): `bytes` is the state
    size, plus one increment when the new copy becomes primary (the hand-over). `source` is the node
    whose copy it replaces (None when a replica is added); the node leaving the primary role, if any,
    stays in the group as a replica. A *hand-over* moves the primary role to a node that already holds
    a copy: `bytes` is one increment. A dropped copy has `target` None and ships nothing. `sender` is
    the live node that ships the bytes: the source when it is alive, else the nearest live holder;
    None when nothing is shipped or the bytes come from the checkpoint location.
    """

    partition: str
    role: Role
    source: str | None
    target: str | None
    bytes: int
    sender: str | None

    @property
    def participants(self) -> tuple[str, ...]:
        """The nodes busy with this move: the one that ships and the one that receives.

        A dropped copy has none: its node deletes it, in no transfer.
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

    Per partition: a hand-over if the primary moves to a node that held a copy, then one copy move per
    node that gains a copy, paired in group order with the nodes that lose one (a copy that merely
    changes role is no copy move). Partitions new in `after` start empty and need none. The bytes of
    all moves, times the migration weight, are the migration part of the cost.
    """
    demand = {d.id: d for d in demands}
    moves: list[Move] = []
    for partition, new in after.items():
        old = before.get(partition)
        if old is None:
            continue
        d = demand[partition]
        alive = [n for n in old.nodes if n in topology]
        primary_moves = new.primary != old.primary
        if primary_moves and new.primary in old.nodes:
            sender = old.primary if old.primary in topology else None
            moves.append(Move(partition, Role.PRIMARY, old.primary, new.primary, d.increment_bytes, sender))
        lost = [n for n in old.nodes if n not in new.nodes]
        gained = [n for n in new.nodes if n not in old.nodes]
        for i in range(max(len(lost), len(gained))):
            source = lost[i] if i < len(lost) else None
            target = gained[i] if i < len(gained) else None
            if target is None:
                moves.append(Move(partition, old.role_of(source) or Role.REPLICA, source, None, 0, None))
                continue
            role = new.role_of(target) or Role.REPLICA
            shipped = d.size_bytes + (d.increment_bytes if role is Role.PRIMARY else 0)
            if source is not None and source in topology:
                sender = source
            else:
                sender = _nearest(target, [n for n in alive if n != target], topology)
            moves.append(Move(partition, role, source, target, shipped, sender))
    return moves


def _nearest(target: str, candidates: list[str], topology: Topology) -> str | None:
    if not candidates or target not in topology:
        return None
    hops = topology.hops[topology.index[target]]
    return min(candidates, key=lambda n: (hops[topology.index[n]], n))


def roles_on(placement: Mapping[str, ReplicaGroup], node_id: str) -> int:
    """How many roles `node_id` holds in `placement`."""
    return sum(node_id in group.nodes for group in placement.values())
