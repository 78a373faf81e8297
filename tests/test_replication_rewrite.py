"""History rewrites with real node processes: the primary rolls back (Spark re-runs a batch) and commits
versions again with other bytes; replicas drop the abandoned history and end identical to the primary,
whether the rewrite is flagged by the primary or detected by the nodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from test_node_harness import Cluster, Primary, _digest_pairs, replica_digest, running_cluster, wait_until

from statestore.node.bootstrap import receive_snapshot
from statestore.rpc import common_pb2, replication_pb2, replication_pb2_grpc
from statestore.store import VersionedStore

_digest = _digest_pairs

REPLICAS = ("node-b", "node-c")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # q=2 over three nodes: node-a's partitions are replicated on node-b and node-c.
    root = tmp_path_factory.mktemp("rewrite-cluster")
    with running_cluster(root, ("node-a", *REPLICAS), q=2, dead_after=30.0) as cluster:
        yield cluster


def _commit(primary: Primary, seed: int, history: str) -> bytes:
    """Commit the next version, marked with the history it belongs to."""
    primary.store.put(b"history", f"{history}-{primary.store.version + 1}".encode())
    return primary.commit(seed)


def _pull(address: str, ref: common_pb2.StoreRef, first: int, last: int) -> list[bytes]:
    request = replication_pb2.PullRequest(store=ref, from_version=first, to_version=last)
    with grpc.insecure_channel(address) as channel:
        return [blob.data for blob in replication_pb2_grpc.ReplicationStub(channel).Pull(request, timeout=15)]


def _two_histories(primary: Primary, old: int, rolled_back_to: int, new: int) -> tuple[list[bytes], list[bytes]]:
    """Commit versions 1..`old` ("old"), roll back to `rolled_back_to` and commit `new` versions after it again
    ("new", other bytes); returns both histories' increments."""
    old_history = [_commit(primary, 0, "old") for _ in range(old)]
    primary.roll_back(rolled_back_to)
    return old_history, [_commit(primary, rolled_back_to + 1, "new") for _ in range(new)]


def _ship(
    cluster: Cluster, node: str, ref: common_pb2.StoreRef, items: list[tuple[int, bytes, bool]]
) -> list[replication_pb2.ShipAck]:
    """Ship (version, bytes, rewrites_history) increments of `ref` to `node` on one stream, as node-a's link
    would; returns the acks."""
    requests = [
        replication_pb2.ShipRequest(
            increment=common_pb2.IncrementBlob(
                store=ref, version=v, base_version=v - 1, data=data, rewrites_history=flag
            ),
            primary_address=cluster.addresses["node-a"],
        )
        for v, data, flag in items
    ]
    with grpc.insecure_channel(cluster.addresses[node]) as channel:
        return list(replication_pb2_grpc.ReplicationStub(channel).Ship(iter(requests), timeout=15))


def _rewrite_and_check(cluster: Cluster, tmp_path: Path, store_id: str, flag: bool) -> None:
    primary = Primary(tmp_path, store_id, cluster.addresses["node-a"])
    try:
        for _ in range(10):
            primary.ship(_commit(primary, 0, "old"), sync=True)
        for node in REPLICAS:
            wait_until(lambda node=node: cluster.held(node, store_id) == 10, what=f"{node} at old 10")
        old_digest = primary.digest()

        primary.roll_back(6)
        rewritten = [_commit(primary, 3, "new") for _ in range(3)]  # new 7..9, other bytes than old 7..9
        # The provider flags only the first commit after the rollback.
        result = primary.ship(rewritten[0], sync=True, rewrites_history=flag)
        assert result.version == 7 and result.synced
        # Acks for the abandoned versions 8..10 never count for the new history.
        assert all(r.acked_version <= 7 for r in result.replicas), result
        assert max(r.acked_version for r in result.replicas) == 7
        for data in rewritten[1:]:
            primary.ship(data)

        new_digest = primary.digest()
        assert new_digest != old_digest
        for node in REPLICAS:
            wait_until(lambda node=node: cluster.held(node, store_id) == 9, what=f"{node} at new 9")
            assert replica_digest(cluster.data_dir(node), store_id) == (9, new_digest), node
        assert primary.store.get(b"history") == b"new-9"

        # Pulls from the primary's node serve the new history only, and nothing past it.
        assert _pull(cluster.addresses["node-a"], primary.ref, 6, 10) == [
            primary.location.increment_path(v).read_bytes() for v in (6, 7, 8, 9)
        ]
        assert _pull(cluster.addresses["node-a"], primary.ref, 7, 9) == rewritten
        log = cluster.processes["node-a"].log()
        reason = "flagged" if flag else "version_not_after_last_shipped"
        assert f'"reason": "{reason}"' in log
        for node in REPLICAS:
            assert f'"store": "{store_id}"' in cluster.processes[node].log().split('"event": "history_rewound"')[1]
    finally:
        primary.close()


def test_flagged_rewrite_replaces_the_abandoned_history_on_replicas(cluster: Cluster, tmp_path: Path) -> None:
    _rewrite_and_check(cluster, tmp_path, "5/0/default", flag=True)


def test_unflagged_rewrite_is_detected_by_the_primarys_node(cluster: Cluster, tmp_path: Path) -> None:
    _rewrite_and_check(cluster, tmp_path, "5/1/default", flag=False)


def test_replica_detects_a_rewritten_version_by_its_bytes(cluster: Cluster, tmp_path: Path) -> None:
    # Acting as a primary's node that lost track (no flag, nothing to compare with): the replica itself
    # sees that increment 4 differs from the one it applied, and rebuilds from the checkpoint location.
    primary = Primary(tmp_path, "5/2/default", cluster.addresses["node-a"])
    try:
        old, new = _two_histories(primary, 5, 3, 2)  # new 4 and 5

        def request(version: int, data: bytes) -> replication_pb2.ShipRequest:
            blob = common_pb2.IncrementBlob(store=primary.ref, version=version, base_version=version - 1, data=data)
            return replication_pb2.ShipRequest(increment=blob)

        requests = [request(v, data) for v, data in enumerate(old, start=1)]
        requests += [request(4, new[0]), request(5, new[1]), request(4, new[0])]
        with grpc.insecure_channel(cluster.addresses["node-c"]) as channel:
            acks = list(replication_pb2_grpc.ReplicationStub(channel).Ship(iter(requests), timeout=15))
        assert [(a.status, a.held.version) for a in acks] == [
            *[(replication_pb2.ACK_APPLIED, v) for v in range(1, 6)],
            (replication_pb2.ACK_APPLIED, 4),
            (replication_pb2.ACK_APPLIED, 5),
            (replication_pb2.ACK_DUPLICATE, 5),
        ]
        assert replica_digest(cluster.data_dir("node-c"), primary.ref.store_id) == (5, primary.digest())
    finally:
        primary.close()


def test_a_rewrite_re_sent_after_the_version_that_followed_it_leaves_the_replica_where_it_is(
    cluster: Cluster, tmp_path: Path
) -> None:
    # The shipper retries refused increments each on its own, so a flagged rewrite can reach a replica after the
    # version that continued it (a CI run: a replica at the new 37 taken back to 35 by a late flagged 36, and a
    # version behind until its next catch-up). A replica can hold the rewritten version two ways: applied (the
    # checksum of its bytes tells), on node-b; or rebuilt from the checkpoint location when the next version's
    # lineage did not continue its own (the lineage tells), on node-c.
    primary = Primary(tmp_path, "5/5/default", cluster.addresses["node-a"])
    try:
        old, new = _two_histories(primary, 4, 3, 2)  # new 4 and 5

        def ship(node: str, items: list[tuple[int, bytes, bool]]) -> list[tuple[int, int]]:
            return [(a.status, a.held.version) for a in _ship(cluster, node, primary.ref, items)]

        history = [(v, old[v - 1], False) for v in range(1, 5)]
        assert ship("node-b", [*history, (4, new[0], True), (5, new[1], False), (4, new[0], True)])[-3:] == [
            (replication_pb2.ACK_APPLIED, 4),
            (replication_pb2.ACK_APPLIED, 5),
            (replication_pb2.ACK_DUPLICATE, 5),
        ]
        assert ship("node-c", [*history, (5, new[1], False), (4, new[0], True)])[-2:] == [
            (replication_pb2.ACK_APPLIED, 5),
            (replication_pb2.ACK_DUPLICATE, 5),
        ]
        rewound = cluster.processes["node-c"].log().split('"event": "history_rewound"')[-1].splitlines()[0]
        assert '"store": "5/5/default"' in rewound and '"reason": "lineage"' in rewound, rewound
        assert '"source": "checkpoint_location"' in rewound, rewound
        for node in REPLICAS:
            assert replica_digest(cluster.data_dir(node), primary.ref.store_id) == (5, primary.digest()), node
    finally:
        primary.close()


def test_replica_that_cannot_read_the_checkpoint_location_rebuilds_from_the_primarys_node(
    cluster: Cluster, tmp_path: Path
) -> None:
    primary = Primary(tmp_path, "5/3/default", cluster.addresses["node-a"])
    try:
        old, new = _two_histories(primary, 6, 4, 2)  # new 5 and 6
        unreadable = common_pb2.StoreRef(store_id=primary.ref.store_id, checkpoint_dir=str(tmp_path / "not-here"))

        def ship(node: str, items: list[tuple[int, bytes, bool]]) -> list[replication_pb2.ShipAck]:
            return _ship(cluster, node, unreadable, items)

        # node-a (standing for the primary's node) holds a replica at 4, which it serves as a snapshot.
        ship("node-a", [(v, old[v - 1], False) for v in range(1, 5)])
        ship("node-c", [(v, old[v - 1], False) for v in range(1, 7)])
        acks = ship("node-c", [(5, new[0], True), (6, new[1], False)])
        assert [(a.status, a.held.version) for a in acks] == [
            (replication_pb2.ACK_APPLIED, 5),
            (replication_pb2.ACK_APPLIED, 6),
        ]
        assert replica_digest(cluster.data_dir("node-c"), primary.ref.store_id) == (6, primary.digest())
        rewound = cluster.processes["node-c"].log().split('"event": "history_rewound"')[-1].splitlines()[0]
        assert '"source": "primary_snapshot"' in rewound and '"held": 6' in rewound
    finally:
        primary.close()


def test_a_replica_one_version_past_serves_the_version_before_and_rewinds_by_its_undo_record(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Spark re-runs batch 5 after its executor died: the replicas applied version 5 already. The re-run's
    # load of version 4 gets a copy of a replica taken back by its undo record (the replica itself stays at 5),
    # and the re-run's commit of 5 (other bytes) takes the replicas back the same way, without reading the
    # checkpoint location.
    primary = Primary(tmp_path, "5/4/default", cluster.addresses["node-a"])
    store_id = primary.ref.store_id
    try:
        for _ in range(5):
            primary.ship(_commit(primary, 0, "old"), sync=True)
        for node in REPLICAS:
            wait_until(lambda node=node: cluster.held(node, store_id) == 5, what=f"{node} at old 5")
        primary.roll_back(4)
        request = replication_pb2.BootstrapRequest(store=primary.ref, replica_only=True, at_most=4)
        with grpc.insecure_channel(cluster.addresses["node-b"]) as channel:
            chunks = replication_pb2_grpc.ReplicationStub(channel).Bootstrap(request, timeout=15)
            manifest = receive_snapshot(chunks, tmp_path / "copy", "node-b's replica")
        assert manifest.version == 4
        with VersionedStore.open(tmp_path / "copy", store_id) as copy:
            assert (copy.version, copy.lineage) == (4, primary.store.lineage)
            assert {cf: _digest(copy.items(cf)) for cf in copy.column_families()} == primary.digest()
        assert cluster.held("node-b", store_id) == 5

        # Two versions back is past the undo record: refused with the reason, nothing written.
        request = replication_pb2.BootstrapRequest(store=primary.ref, replica_only=True, at_most=3)
        with grpc.insecure_channel(cluster.addresses["node-b"]) as channel, pytest.raises(grpc.RpcError) as refused:
            list(replication_pb2_grpc.ReplicationStub(channel).Bootstrap(request, timeout=15))
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND and "past 3" in refused.value.details()

        primary.ship(_commit(primary, 3, "new"), sync=True, rewrites_history=True)
        for node in REPLICAS:
            wait_until(lambda node=node: cluster.held(node, store_id) == 5, what=f"{node} at new 5")
            wait_until(
                lambda node=node: replica_digest(cluster.data_dir(node), store_id) == (5, primary.digest()),
                what=f"{node} equal to the new history",
            )
            rewound = cluster.processes[node].log().split('"event": "history_rewound"')[-1].splitlines()[0]
            assert '"source": "undo_record"' in rewound and f'"store": "{store_id}"' in rewound, rewound
    finally:
        primary.close()


@pytest.mark.parametrize("flag", [False, True], ids=["unflagged", "flagged"])
def test_a_replica_whose_first_increment_of_the_kept_history_lies_past_a_gap_leaves_the_abandoned_one(
    cluster: Cluster, tmp_path: Path, flag: bool
) -> None:
    # The replica holds old 4, a version Spark abandoned (re-ran from 3); the first increment of the kept history
    # it receives is new 6 (new 4 and 5 were shipped before the primary knew its group). Its catch-up pulls new 5,
    # which does not continue old 4: the replica rebuilds on the kept history and applies 5 and 6. It used to
    # refuse that and every later increment, at old 4 for good.
    store_id = f"5/{7 + flag}/default"
    primary = Primary(tmp_path, store_id, cluster.addresses["node-a"])
    try:
        old, new = _two_histories(primary, 4, 3, 3)  # new 4, 5 and 6
        _ship(cluster, "node-c", primary.ref, [(v, old[v - 1], False) for v in range(1, 5)])
        acks = _ship(cluster, "node-c", primary.ref, [(6, new[2], flag)])
        assert [(a.status, a.held.version) for a in acks] == [(replication_pb2.ACK_APPLIED, 6)], acks[0].detail
        assert replica_digest(cluster.data_dir("node-c"), store_id) == (6, primary.digest())
        rewound = cluster.processes["node-c"].log().split('"event": "history_rewound"')[-1].splitlines()[0]
        assert f'"store": "{store_id}"' in rewound and '"reason": "lineage"' in rewound, rewound
    finally:
        primary.close()


def test_a_buffered_increment_of_an_abandoned_history_is_dropped_when_the_gap_below_it_fills_from_the_kept_one(
    cluster: Cluster, tmp_path: Path
) -> None:
    # The replica holds 6 and buffers old 8 (old 7 lost on the way); its catch-up reads 7 from the checkpoint
    # location, where Spark's re-run wrote new 7. Old 8 does not continue it: dropped (its bytes no longer counted
    # against the reorder buffer), not a failed ack; new 8 then applies.
    primary = Primary(tmp_path, "5/9/default", cluster.addresses["node-a"])
    try:
        old, new = _two_histories(primary, 8, 6, 2)  # new 7 and 8
        _ship(cluster, "node-c", primary.ref, [(v, old[v - 1], False) for v in range(1, 7)])
        acks = _ship(cluster, "node-c", primary.ref, [(8, old[7], False), (8, new[1], False)])
        assert [(a.status, a.held.version) for a in acks] == [
            (replication_pb2.ACK_BUFFERED, 7),
            (replication_pb2.ACK_APPLIED, 8),
        ], [a.detail for a in acks]
        assert replica_digest(cluster.data_dir("node-c"), primary.ref.store_id) == (8, primary.digest())
        dropped = cluster.processes["node-c"].log().split('"event": "buffered_increments_dropped"')[-1].splitlines()[0]
        assert '"store": "5/9/default"' in dropped and '"from_version": 8' in dropped, dropped
    finally:
        primary.close()
