"""The placement data model: topology and distances, demands, placements, changes, JSON forms."""

from __future__ import annotations

import json

import pytest

from placement.changes import LoadShifted, NodeFailed, NodeJoined, NodeLeft, apply_change
from placement.demand import PartitionDemand, demands_from_json
from placement.groups import Placement, ReplicaGroup, Role
from placement.topology import Node, Topology, switch_hops


def node(node_id: str, rack: str, *switches: str, **fields: object) -> Node:
    return Node(node_id, rack, tuple(switches), **fields)  # type: ignore[arg-type]


def test_switch_hops_count_the_switches_on_the_path() -> None:
    a = node("a", "r1", "core", "pod1", "r1")
    b = node("b", "r1", "core", "pod1", "r1")
    c = node("c", "r2", "core", "pod1", "r2")
    d = node("d", "r3", "core", "pod2", "r3")
    assert switch_hops(a, a) == 0
    assert switch_hops(a, b) == 1  # the top-of-rack switch
    assert switch_hops(a, c) == 3  # tor, pod switch, tor
    assert switch_hops(a, d) == 5  # tor, pod, core, pod, tor
    assert switch_hops(d, a) == 5


def test_default_switch_path_is_the_rack_and_racks_meet_at_an_implicit_core() -> None:
    a, b, c = Node("a", "r1"), Node("b", "r1"), Node("c", "r2")
    assert a.switches == ("r1",)
    assert switch_hops(a, b) == 1
    assert switch_hops(a, c) == 3


def test_topology_hops_matrix_is_symmetric_and_matches_pairwise_hops() -> None:
    nodes = (node("a", "r1", "p", "r1"), node("b", "r2", "p", "r2"), node("c", "r3", "q", "r3"))
    topology = Topology(nodes)
    assert (topology.hops == topology.hops.T).all()
    for i, x in enumerate(nodes):
        for j, y in enumerate(nodes):
            assert topology.hops[i, j] == switch_hops(x, y)
    assert topology.racks == ("r1", "r2", "r3")


def test_topology_json_round_trip_and_refusals() -> None:
    topology = Topology(
        (
            node("a", "r1", "core", "r1", capacity=4, load=0.25),
            node("b", "r2", capacity=2, capacity_bytes=10_000, draining=True),
        )
    )
    text = json.dumps(topology.to_json())
    assert Topology.from_json(json.loads(text)) == topology
    with pytest.raises(ValueError, match="duplicate node id"):
        Topology((Node("a", "r1"), Node("a", "r2")))
    with pytest.raises(ValueError, match="unknown keys"):
        Topology.from_json({"nodes": [{"id": "a", "rack": "r", "capasity": 3}]})
    with pytest.raises(ValueError, match="load must be in"):
        Node("a", "r", load=1.5)
    with pytest.raises(ValueError, match="capacity must be"):
        Node("a", "r", capacity=-1)


def test_topology_changes_return_new_topologies() -> None:
    topology = Topology((Node("a", "r1"), Node("b", "r2")))
    joined = apply_change(topology, NodeJoined(Node("c", "r3")))
    assert [n.id for n in joined.nodes] == ["a", "b", "c"]
    assert [n.id for n in apply_change(topology, NodeFailed("a")).nodes] == ["b"]
    assert apply_change(topology, NodeLeft("a"))["a"].draining
    assert apply_change(topology, LoadShifted("b", 0.75))["b"].load == 0.75
    assert [n.id for n in topology.nodes] == ["a", "b"]  # unchanged
    with pytest.raises(KeyError, match="no node 'x'"):
        apply_change(topology, NodeFailed("x"))
    with pytest.raises(ValueError, match="already in the topology"):
        apply_change(topology, NodeJoined(Node("a", "r9")))


def test_demands_json_and_validation() -> None:
    demands = demands_from_json({"partitions": [{"id": "p0", "size_bytes": 10, "increment_bytes": 2}]})
    assert demands == [PartitionDemand("p0", 10, 2)]
    with pytest.raises(ValueError, match="duplicate partition id"):
        demands_from_json([{"id": "p", "size_bytes": 1, "increment_bytes": 1}] * 2)
    with pytest.raises(ValueError, match="sizes must be >= 0"):
        PartitionDemand("p", -1, 0)


def test_placement_roles_and_json_round_trip() -> None:
    placement = Placement({"p0": ReplicaGroup("a", ("b", "c")), "p1": ReplicaGroup("b", ("a", "d"))})
    assert placement.replicas == 2
    assert placement.roles_on("a") == [("p0", Role.PRIMARY), ("p1", Role.REPLICA)]
    assert placement.role_counts() == {"a": 2, "b": 2, "c": 1, "d": 1}
    assert Placement.from_json(json.loads(json.dumps(placement.to_json()))) == placement
    with pytest.raises(ValueError, match="distinct nodes"):
        ReplicaGroup("a", ("a",))
    with pytest.raises(ValueError, match="different sizes"):
        Placement({"p0": ReplicaGroup("a", ("b",)), "p1": ReplicaGroup("a", ())})
