"""Replica groups with real node processes and real gRPC on loopback: replicas follow the primary
version by version and end with identical content."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_node_harness import Cluster, Primary, replica_digest, running_cluster, wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(tmp_path, ("node-a", "node-b", "node-c"), q=2) as cluster:
        yield cluster


def test_replicas_hold_the_primary_version_and_identical_content(cluster: Cluster, tmp_path: Path) -> None:
    primary = Primary(tmp_path, "0/1/default", cluster.addresses["node-a"])
    try:
        for result in primary.commit_and_ship(10, sync=True):
            acked = {r.node_id: r.acked_version for r in result.replicas}
            assert set(acked) == {"node-b", "node-c"}
            assert result.synced and max(acked.values()) == result.version
        primary.commit_and_ship(20)
        last = primary.store.version
        for node in ("node-b", "node-c"):
            wait_until(lambda node=node: cluster.held(node, "0/1/default") == last, what=f"{node} at {last}")
            assert replica_digest(cluster.data_dir(node), "0/1/default") == (last, primary.digest())
    finally:
        primary.close()
