"""Membership: which nodes are registered, which are alive, and what each last reported."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from statestore.rpc import common_pb2, control_pb2


@dataclass
class NodeRecord:
    """A registered node and its last heartbeat."""

    node_id: str
    address: str
    last_seen: float
    rack: str = ""  # empty: the node is its own rack
    primaries: dict[str, control_pb2.PrimaryReport] = field(default_factory=dict)
    replicas_held: dict[str, int] = field(default_factory=dict)


@dataclass
class PartitionRecord:
    """A partition as its primary's node last reported it."""

    store: common_pb2.StoreRef
    primary: str
    report: control_pb2.PrimaryReport


class Membership:
    """Registered nodes and their reports; a node silent for `dead_after` seconds is dead."""

    def __init__(self, dead_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.dead_after = dead_after
        self._clock = clock
        self._nodes: dict[str, NodeRecord] = {}
        self._partitions: dict[str, PartitionRecord] = {}
        self._lock = threading.Lock()

    def register(self, node: control_pb2.NodeRef) -> None:
        """A node joins or rejoins."""
        with self._lock:
            record = self._nodes.get(node.node_id)
            if record is None:
                self._nodes[node.node_id] = NodeRecord(node.node_id, node.address, self._clock(), node.rack)
            else:
                record.address = node.address
                record.rack = node.rack
                record.last_seen = self._clock()

    def heartbeat(self, request: control_pb2.HeartbeatRequest) -> None:
        """Record a node's heartbeat (registering it if it is unknown, e.g. after a controller restart)."""
        self.register(request.node)
        with self._lock:
            record = self._nodes[request.node.node_id]
            record.primaries = {p.store.store_id: p for p in request.primaries}
            record.replicas_held = {h.store.store_id: h.version for h in request.replicas_held}
            for report in request.primaries:
                self._partitions[report.store.store_id] = PartitionRecord(report.store, request.node.node_id, report)

    def is_alive(self, record: NodeRecord) -> bool:
        """Whether the node heartbeated within `dead_after`."""
        return self._clock() - record.last_seen <= self.dead_after

    def nodes(self) -> list[NodeRecord]:
        """Every registered node, by id."""
        with self._lock:
            return sorted(self._nodes.values(), key=lambda r: r.node_id)

    def live_node_ids(self) -> list[str]:
        """Ids of the live nodes, sorted."""
        return [r.node_id for r in self.nodes() if self.is_alive(r)]

    def node(self, node_id: str) -> NodeRecord | None:
        """The record of `node_id`."""
        with self._lock:
            return self._nodes.get(node_id)

    def partitions(self) -> list[PartitionRecord]:
        """Every partition a primary reported, by store id."""
        with self._lock:
            return sorted(self._partitions.values(), key=lambda p: p.store.store_id)

    def seconds_since(self, record: NodeRecord) -> float:
        """Seconds since the node's last heartbeat."""
        return self._clock() - record.last_seen
