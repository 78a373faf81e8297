"""What each state store partition asks of the cluster: its state size and its increment per batch."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PartitionDemand:
    """One state store partition to place.

    `size_bytes` is the state a new replica must copy before it follows increments (the migration
    bytes of a new copy); `increment_bytes` is the expected increment the primary ships to each replica
    per micro-batch.
    """

    id: str
    size_bytes: int
    increment_bytes: int

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a partition needs a non-empty id")
        if self.size_bytes < 0 or self.increment_bytes < 0:
            raise ValueError(
                f"partition {self.id!r}: sizes must be >= 0, got size_bytes={self.size_bytes}, "
                f"increment_bytes={self.increment_bytes}"
            )

    def to_json(self) -> dict[str, Any]:
        """The demand as a JSON object."""
        return {"id": self.id, "size_bytes": self.size_bytes, "increment_bytes": self.increment_bytes}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> PartitionDemand:
        """A demand from its JSON object."""
        return cls(str(obj["id"]), int(obj["size_bytes"]), int(obj["increment_bytes"]))


def uniform_demands(count: int, size_bytes: int, increment_bytes: int, prefix: str = "p") -> list[PartitionDemand]:
    """`count` partitions of equal size named `{prefix}0`, `{prefix}1`, ..."""
    return [PartitionDemand(f"{prefix}{i}", size_bytes, increment_bytes) for i in range(count)]


def demands_from_json(obj: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[PartitionDemand]:
    """Demands from `{"partitions": [...]}` or a bare list; ids must be unique."""
    items = obj["partitions"] if isinstance(obj, Mapping) else obj
    demands = [PartitionDemand.from_json(item) for item in items]
    check_unique(demands)
    return demands


def load_demands(path: str | Path) -> list[PartitionDemand]:
    """Read a partitions JSON file."""
    return demands_from_json(json.loads(Path(path).read_text()))


def check_unique(demands: Iterable[PartitionDemand]) -> None:
    """Refuse two demands for the same partition id."""
    seen: set[str] = set()
    for demand in demands:
        if demand.id in seen:
            raise ValueError(f"duplicate partition id {demand.id!r}")
        seen.add(demand.id)
