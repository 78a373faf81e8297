"""Replica groups and placements: where each partition's primary and replicas live."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any


class Role(str, Enum):
    """The role a node plays for one partition."""

    def __str__(self) -> str:  # as enum.StrEnum (Python 3.11+) prints: the value
        return self.value

    PRIMARY = "primary"
    REPLICA = "replica"


@dataclass(frozen=True)
class ReplicaGroup:
    """The nodes holding one partition: the primary (serves the task) and its replicas (follow increments)."""

    primary: str
    replicas: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicas", tuple(self.replicas))
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"a replica group needs distinct nodes, got {self.nodes}")

    @property
    def nodes(self) -> tuple[str, ...]:
        """Primary first, then the replicas."""
        return (self.primary, *self.replicas)

    def role_of(self, node_id: str) -> Role | None:
        """The role `node_id` plays in this group, or None."""
        if node_id == self.primary:
            return Role.PRIMARY
        return Role.REPLICA if node_id in self.replicas else None


class Placement(Mapping[str, ReplicaGroup]):
    """An immutable map from partition id to its replica group; every group has the same number of replicas."""

    def __init__(self, groups: Mapping[str, ReplicaGroup]) -> None:
        self._groups = dict(groups)
        sizes = {len(group.replicas) for group in self._groups.values()}
        if len(sizes) > 1:
            raise ValueError(f"replica groups of different sizes in one placement: {sorted(sizes)}")
        self.replicas = sizes.pop() if sizes else 0

    def __getitem__(self, partition: str) -> ReplicaGroup:
        return self._groups[partition]

    def __iter__(self) -> Iterator[str]:
        return iter(self._groups)

    def __len__(self) -> int:
        return len(self._groups)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Placement) and self._groups == other._groups

    def __hash__(self) -> int:
        return hash(frozenset(self._groups.items()))

    def __repr__(self) -> str:
        return f"Placement({len(self)} partitions, replicas={self.replicas})"

    def roles_on(self, node_id: str) -> list[tuple[str, Role]]:
        """Every (partition, role) held by `node_id`, in partition order."""
        out = []
        for partition, group in self._groups.items():
            role = group.role_of(node_id)
            if role is not None:
                out.append((partition, role))
        return out

    def role_counts(self) -> dict[str, int]:
        """Number of roles (primaries and replicas) per node that holds any."""
        counts: dict[str, int] = {}
        for group in self._groups.values():
            for node in group.nodes:
                counts[node] = counts.get(node, 0) + 1
        return counts

    def to_json(self) -> dict[str, Any]:
        """`{"replicas": q, "groups": {partition: {"primary": node, "replicas": [nodes]}}}`."""
        return {
            "replicas": self.replicas,
            "groups": {
                partition: {"primary": group.primary, "replicas": list(group.replicas)}
                for partition, group in self._groups.items()
            },
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Placement:
        """A placement from the object `to_json` writes."""
        return cls(
            {
                str(partition): ReplicaGroup(str(g["primary"]), tuple(str(r) for r in g.get("replicas", ())))
                for partition, g in obj["groups"].items()
            }
        )

    @classmethod
    def load(cls, path: str | Path) -> Placement:
        """Read a placement JSON file."""
        return cls.from_json(json.loads(Path(path).read_text()))
