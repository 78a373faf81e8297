"""The cluster as placement sees it: nodes, their racks, switch paths, capacity and load.

A node is one state node (one per executor). Its position in the network is the path of switches from
the core down to its top-of-rack switch; the network distance between two nodes is the number of
switches an increment crosses between them (switch hops):

- the same node: 0
- two nodes under the same top-of-rack switch: 1
- otherwise: up from one node to the deepest switch the two paths share, and down to the other, counting
  every switch once; paths that share no switch meet at an implicit core switch.

With the default path `(rack,)` two nodes in one rack are 1 hop apart and nodes in different racks 3.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Node:
    """A state node that can hold primaries and replicas of state store partitions.

    `capacity` is how many partition copies (primary or replica roles) the node may hold;
    `capacity_bytes` bounds the bytes of state it may hold. A node that takes roles needs at least one
    of them (placement refuses it otherwise). `load` is the share of the node already busy with other
    work, in [0, 1]: it makes every role placed there dearer, it does not take slots. A `draining` node
    is leaving: it takes no roles but still serves its state to the nodes that replace it.
    """

    id: str
    rack: str
    switches: tuple[str, ...] = ()
    capacity: int | None = None
    capacity_bytes: int | None = None
    load: float = 0.0
    draining: bool = False

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a node needs a non-empty id")
        if not self.rack:
            raise ValueError(f"node {self.id!r} needs a non-empty rack")
        if self.capacity is not None and self.capacity < 0:
            raise ValueError(f"node {self.id!r}: capacity must be >= 0, got {self.capacity}")
        if self.capacity_bytes is not None and self.capacity_bytes < 0:
            raise ValueError(f"node {self.id!r}: capacity_bytes must be >= 0, got {self.capacity_bytes}")
        if not 0.0 <= self.load <= 1.0:
            raise ValueError(f"node {self.id!r}: load must be in [0, 1], got {self.load}")
        object.__setattr__(self, "switches", tuple(self.switches) or (self.rack,))

    def to_json(self) -> dict[str, Any]:
        """The node as a JSON object (the format `Topology.from_json` reads)."""
        out: dict[str, Any] = {"id": self.id, "rack": self.rack, "switches": list(self.switches)}
        if self.capacity is not None:
            out["capacity"] = self.capacity
        out["load"] = self.load
        if self.capacity_bytes is not None:
            out["capacity_bytes"] = self.capacity_bytes
        if self.draining:
            out["draining"] = True
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Node:
        """A node from its JSON object; unknown keys are refused so that typos do not pass silently."""
        known = {"id", "rack", "switches", "capacity", "capacity_bytes", "load", "draining"}
        unknown = set(obj) - known
        if unknown:
            raise ValueError(f"node {obj.get('id')!r}: unknown keys {sorted(unknown)}")
        return cls(
            id=str(obj["id"]),
            rack=str(obj.get("rack", obj["id"])),
            switches=tuple(str(s) for s in obj.get("switches", ())),
            capacity=None if obj.get("capacity") is None else int(obj["capacity"]),
            capacity_bytes=None if obj.get("capacity_bytes") is None else int(obj["capacity_bytes"]),
            load=float(obj.get("load", 0.0)),
            draining=bool(obj.get("draining", False)),
        )


def switch_hops(a: Node, b: Node) -> int:
    """Switches an increment crosses from node `a` to node `b` (0 when they are the same node)."""
    if a.id == b.id:
        return 0
    shared = 0
    for x, y in zip(a.switches, b.switches, strict=False):
        if x != y:
            break
        shared += 1
    return (len(a.switches) - shared) + (len(b.switches) - shared) + 1


@dataclass(frozen=True)
class Topology:
    """An ordered set of nodes with unique ids; changes return a new topology."""

    nodes: tuple[Node, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))
        seen: set[str] = set()
        for node in self.nodes:
            if node.id in seen:
                raise ValueError(f"duplicate node id {node.id!r}")
            seen.add(node.id)

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.index

    def __getitem__(self, node_id: str) -> Node:
        return self.nodes[self.index[node_id]]

    @cached_property
    def index(self) -> dict[str, int]:
        """Node id to its position in `nodes`."""
        return {node.id: i for i, node in enumerate(self.nodes)}

    @cached_property
    def hops(self) -> np.ndarray:
        """Switch hops between every pair of nodes, as a (z, z) integer matrix."""
        z = len(self.nodes)
        out = np.zeros((z, z), dtype=np.int64)
        for i in range(z):
            for j in range(i + 1, z):
                out[i, j] = out[j, i] = switch_hops(self.nodes[i], self.nodes[j])
        return out

    @cached_property
    def racks(self) -> tuple[str, ...]:
        """Distinct racks, in order of first appearance."""
        return tuple(dict.fromkeys(node.rack for node in self.nodes))

    def with_node(self, node: Node) -> Topology:
        """This topology with `node` added, or replacing the node with the same id."""
        if node.id in self:
            return Topology(tuple(node if n.id == node.id else n for n in self.nodes))
        return Topology((*self.nodes, node))

    def without(self, node_id: str) -> Topology:
        """This topology without the node `node_id` (it failed or is gone)."""
        self._require(node_id)
        return Topology(tuple(n for n in self.nodes if n.id != node_id))

    def updated(self, node_id: str, **changes: Any) -> Topology:
        """This topology with fields of node `node_id` changed (e.g. `load=0.8`, `draining=True`)."""
        return self.with_node(replace(self._require(node_id), **changes))

    def _require(self, node_id: str) -> Node:
        if node_id not in self:
            raise KeyError(f"no node {node_id!r} in the topology")
        return self[node_id]

    def to_json(self) -> dict[str, Any]:
        """The topology as a JSON object: `{"nodes": [...]}`."""
        return {"nodes": [node.to_json() for node in self.nodes]}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> Topology:
        """A topology from `{"nodes": [...]}` or a bare list of node objects."""
        items = obj["nodes"] if isinstance(obj, Mapping) else obj
        return cls(tuple(Node.from_json(item) for item in items))

    @classmethod
    def load(cls, path: str | Path) -> Topology:
        """Read a topology JSON file."""
        return cls.from_json(json.loads(Path(path).read_text()))
