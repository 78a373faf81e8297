"""Changes of the cluster that call for re-placement, as plain data, and their effect on the topology."""

from __future__ import annotations

from dataclasses import dataclass

from placement.topology import Node, Topology


@dataclass(frozen=True)
class NodeJoined:
    """A new node (or one back from the dead) can take roles."""

    node: Node


@dataclass(frozen=True)
class NodeLeft:
    """A node is leaving on purpose: it takes no roles but still serves its state until the moves are done."""

    node_id: str


@dataclass(frozen=True)
class NodeFailed:
    """A node is gone with its state: its roles are re-placed from the other holders."""

    node_id: str


@dataclass(frozen=True)
class LoadShifted:
    """A node's load from other work changed."""

    node_id: str
    load: float


Change = NodeJoined | NodeLeft | NodeFailed | LoadShifted


def apply_change(topology: Topology, change: Change) -> Topology:
    """The topology after `change`."""
    match change:
        case NodeJoined(node):
            if node.id in topology:
                raise ValueError(f"node {node.id!r} is already in the topology")
            return topology.with_node(node)
        case NodeLeft(node_id):
            return topology.updated(node_id, draining=True)
        case NodeFailed(node_id):
            return topology.without(node_id)
        case LoadShifted(node_id, load):
            return topology.updated(node_id, load=load)
    raise TypeError(f"not a change: {change!r}")
