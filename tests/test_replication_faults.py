"""Fault injection with real processes: kill -9 of a replica node mid-stream (restarted with its
directory and with an empty one), increments corrupted in transit, duplicated and reordered."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from test_node_harness import Cluster, Primary, replica_digest, running_cluster, wait_until

from statestore.rpc import common_pb2, replication_pb2, replication_pb2_grpc

STORE = "3/0/default"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    # q=1: node-a's partitions are replicated on node-b (the next node on the ring).
    with running_cluster(tmp_path, ("node-a", "node-b"), q=1, dead_after=10.0) as cluster:
        yield cluster


def _caught_up(cluster: Cluster, primary: Primary, node: str = "node-b") -> None:
    last = primary.store.version
    wait_until(lambda: cluster.held(node, STORE) == last, what=f"{node} at version {last}")
    assert replica_digest(cluster.data_dir(node), STORE) == (last, primary.digest())


def test_replica_killed_mid_stream_catches_up_with_its_directory(cluster: Cluster, tmp_path: Path) -> None:
    primary = Primary(tmp_path, STORE, cluster.addresses["node-a"])
    try:
        primary.commit_and_ship(15, sync=True)
        primary.commit_and_ship(5)  # in flight when the replica dies
        cluster.processes["node-b"].kill9()
        primary.commit_and_ship(10)  # shipped to a dead replica: retried with backoff
        cluster.start_node("node-b")
        primary.commit_and_ship(5)
        _caught_up(cluster, primary)
    finally:
        primary.close()


def test_replica_restarted_empty_bootstraps_from_a_snapshot(cluster: Cluster, tmp_path: Path) -> None:
    primary = Primary(tmp_path, STORE, cluster.addresses["node-a"])
    try:
        primary.commit_and_ship(30, sync=True)
        primary.location.write_snapshot(primary.store)  # snapshot of version 30 in the checkpoint location
        primary.commit_and_ship(5)
        cluster.processes["node-b"].kill9()
        shutil.rmtree(cluster.data_dir("node-b"))
        cluster.start_node("node-b")
        primary.commit_and_ship(5)
        _caught_up(cluster, primary)
        log = cluster.processes["node-b"].log()
        assert '"event": "bootstrap_done"' in log
        assert '"version": 30' in log.split('"event": "bootstrap_done"')[1].splitlines()[0]
    finally:
        primary.close()


def _ship_directly(address: str, requests: list[replication_pb2.ShipRequest]) -> list[replication_pb2.ShipAck]:
    """Act as a primary's node: one Ship stream to the replica node at `address`."""
    with grpc.insecure_channel(address) as channel:
        return list(replication_pb2_grpc.ReplicationStub(channel).Ship(iter(requests), timeout=15))


def test_corrupted_duplicated_and_reordered_increments(cluster: Cluster, tmp_path: Path) -> None:
    primary = Primary(tmp_path, "9/9/default", cluster.addresses["node-a"])
    try:
        blobs = [primary.commit(i) for i in range(6)]  # versions 1..6, durable in the checkpoint location
        # Without a checkpoint dir or primary to pull from, the replica can only buffer out-of-order ones.
        bare = common_pb2.StoreRef(store_id=primary.ref.store_id)

        def request(version: int, data: bytes | None = None, store: common_pb2.StoreRef = bare) -> object:
            return replication_pb2.ShipRequest(
                increment=common_pb2.IncrementBlob(
                    store=store, version=version, base_version=version - 1, data=data or blobs[version - 1]
                )
            )

        acks = _ship_directly(
            cluster.addresses["node-b"], [request(1), request(3), request(2), request(2), request(1), request(3)]
        )
        assert [(a.status, a.held.version) for a in acks] == [
            (replication_pb2.ACK_APPLIED, 1),
            (replication_pb2.ACK_BUFFERED, 1),
            (replication_pb2.ACK_APPLIED, 3),
            (replication_pb2.ACK_DUPLICATE, 3),
            (replication_pb2.ACK_DUPLICATE, 3),
            (replication_pb2.ACK_DUPLICATE, 3),
        ]
        damaged = bytearray(blobs[3])
        damaged[len(damaged) // 2] ^= 0xFF
        # The same store id with its checkpoint location is another partition (docs/node.md), one whose
        # replica can fetch what it lacks. Increment 4 corrupted in transit: rejected, and versions 1..4
        # fetched from the checkpoint location instead.
        full = primary.ref
        acks = _ship_directly(cluster.addresses["node-b"], [request(4, bytes(damaged), full), request(5, store=full)])
        assert acks[0].status == replication_pb2.ACK_REJECTED_CORRUPT
        assert "checksum" in acks[0].detail
        assert acks[0].held.version == 4
        assert (acks[1].status, acks[1].held.version) == (replication_pb2.ACK_APPLIED, 5)
        acks = _ship_directly(cluster.addresses["node-b"], [request(6, store=full), request(6, store=full)])
        assert [a.held.version for a in acks] == [6, 6]
        assert primary.store.version == 6
        node_b = cluster.data_dir("node-b")
        assert replica_digest(node_b, full.store_id, full.checkpoint_dir) == (6, primary.digest())
        assert replica_digest(node_b, full.store_id, "")[0] == 3  # the bare partition was left alone
    finally:
        primary.close()
