"""Synthetic clusters and demands, for the benchmark, the command line's examples and the tests."""

from __future__ import annotations

import numpy as np

from placement.demand import PartitionDemand
from placement.topology import Node, Topology


def tree_topology(
    pods: int,
    racks_per_pod: int,
    nodes_per_rack: int,
    capacity: int,
    rng: np.random.Generator | None = None,
    max_load: float = 0.0,
) -> Topology:
    """A three-level tree: core, one switch per pod, one top-of-rack switch per rack.

    Nodes are `n0, n1, ...` in racks `r0, r1, ...` under pods `pod0, ...`; each node's load is drawn
    uniformly from [0, max_load] (0 without `rng`).
    """
    nodes = []
    for pod in range(pods):
        for r in range(racks_per_pod):
            rack = f"r{pod * racks_per_pod + r}"
            for _ in range(nodes_per_rack):
                load = float(rng.uniform(0, max_load)) if rng is not None and max_load > 0 else 0.0
                nodes.append(
                    Node(f"n{len(nodes)}", rack, ("core", f"pod{pod}", rack), capacity=capacity, load=load)
                )
    return Topology(tuple(nodes))


def random_demands(
    count: int,
    rng: np.random.Generator,
    size_bytes: float = 256e6,
    increment_bytes: float = 2e6,
    skew: float = 0.6,
) -> list[PartitionDemand]:
    """`count` partitions with log-normal sizes and increments around the given medians."""
    sizes = rng.lognormal(np.log(size_bytes), skew, count)
    increments = rng.lognormal(np.log(increment_bytes), skew, count)
    return [PartitionDemand(f"p{i}", int(s), int(w)) for i, (s, w) in enumerate(zip(sizes, increments, strict=True))]


def capacity_for(partitions: int, replicas: int, nodes: int, slack: float = 1.25) -> int:
    """Per-node capacity that leaves `slack` times the roles' total room."""
    return int(np.ceil((replicas + 1) * partitions / nodes * slack))
