"""A partition whose task Spark runs on another executor: both nodes claim it for a while; the controller
keeps the one that committed most recently, demotes the other, and the replica group follows the new
primary. And partitions are keyed by store id and checkpoint location, so two queries' identical store ids
never meet on a node or in the controller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
from test_node_harness import (
    Cluster,
    FakeClock,
    Primary,
    replica_digest,
    replica_dir,
    running_cluster,
    send_cont,
    send_stop,
    wait_until,
)

from statestore.cluster.membership import Membership
from statestore.controller.service import ControlService
from statestore.node.increment_log import IncrementLog
from statestore.node.settings import NodeSettings
from statestore.node.shipper import Shipper
from statestore.partition_key import partition_key, query_root
from statestore.rpc import common_pb2, control_pb2, replication_pb2, replication_pb2_grpc

STORE = "0/3/default"


def _claim(membership: Membership, node: str, store: common_pb2.StoreRef, version: int, ago: float) -> None:
    report = control_pb2.PrimaryReport(store=store, version=version, seconds_since_commit=ago)
    membership.heartbeat(
        control_pb2.HeartbeatRequest(node=control_pb2.NodeRef(node_id=node, address=f"{node}:1"), primaries=[report])
    )


def _primary_of(membership: Membership, store: common_pb2.StoreRef) -> tuple[str, int]:
    (record,) = [p for p in membership.partitions() if p.key == partition_key(store)]
    return record.primary, record.report.version


def test_the_most_recent_committer_is_primary_even_at_a_lower_version() -> None:
    clock = FakeClock(100.0)
    membership = Membership(dead_after=3.0, clock=clock)
    store = common_pb2.StoreRef(store_id=STORE, checkpoint_dir="/ckpt/q1/state/0/3")
    _claim(membership, "a", store, 10, ago=0.0)
    assert _primary_of(membership, store) == ("a", 10) and membership.demoted("a") == []
    # The query restarts and re-runs batch 9 on b's executor (a rewrite: a lower version than a's claim);
    # a's node still reports the version it shipped last, committed 5 s ago.
    clock.now += 5
    _claim(membership, "b", store, 9, ago=0.2)
    _claim(membership, "a", store, 10, ago=5.0)
    assert _primary_of(membership, store) == ("b", 9)
    assert [(h.store.store_id, h.version) for h in membership.demoted("a")] == [(STORE, 10)]
    assert membership.demoted("b") == []
    # a demoted itself (reports nothing); b's node restarts and has not committed yet: b stays primary.
    _claim(membership, "a", common_pb2.StoreRef(store_id="other"), 1, ago=0.0)
    membership.heartbeat(control_pb2.HeartbeatRequest(node=control_pb2.NodeRef(node_id="b", address="b:1")))
    assert _primary_of(membership, store) == ("b", 9)
    # The partition moves back to a: its fresh commit wins.
    clock.now += 1
    _claim(membership, "a", store, 11, ago=0.1)
    assert _primary_of(membership, store) == ("a", 11)


def test_claims_at_the_same_moment_go_to_the_higher_version() -> None:
    membership = Membership(dead_after=3.0, clock=FakeClock(100.0))
    store = common_pb2.StoreRef(store_id=STORE, checkpoint_dir="/ckpt/q1/state/0/3")
    _claim(membership, "b", store, 7, ago=1.0)
    _claim(membership, "a", store, 8, ago=1.0)
    assert _primary_of(membership, store) == ("a", 8)
    assert [(h.store.store_id, h.version) for h in membership.demoted("b")] == [(STORE, 7)]


def test_one_store_id_in_two_checkpoint_locations_is_two_partitions() -> None:
    membership = Membership(dead_after=3.0, clock=FakeClock(100.0))
    first = common_pb2.StoreRef(store_id=STORE, checkpoint_dir="/ckpt/q1/state/0/3")
    second = common_pb2.StoreRef(store_id=STORE, checkpoint_dir="/ckpt/q2/state/0/3")
    _claim(membership, "a", first, 4, ago=0.0)
    _claim(membership, "b", second, 9, ago=0.0)
    assert _primary_of(membership, first) == ("a", 4) and _primary_of(membership, second) == ("b", 9)
    assert membership.demoted("a") == [] and membership.demoted("b") == []
    assert query_root(first.checkpoint_dir) == "/ckpt/q1"
    assert query_root("/ckpt/q2/state/1/7/left-keyToNumValues") == "/ckpt/q2"


def test_a_partition_nobody_claims_is_forgotten_after_forget_after() -> None:
    clock = FakeClock(100.0)
    membership = Membership(dead_after=3.0, clock=clock, forget_after=60.0)
    store = common_pb2.StoreRef(store_id=STORE, checkpoint_dir="/ckpt/q1/state/0/3")
    _claim(membership, "a", store, 4, ago=0.0)
    membership.heartbeat(control_pb2.HeartbeatRequest(node=control_pb2.NodeRef(node_id="a", address="a:1")))
    clock.now += 59
    assert [p.primary for p in membership.partitions()] == ["a"]  # a restarting primary's node keeps it
    clock.now += 2
    assert membership.partitions() == []


def _cluster(tmp_path: Path, q: int, dead_after: float = 30.0, forget_after: float = 60.0) -> Any:
    """A controller and nodes node-a, node-b, node-c (a context manager)."""
    return running_cluster(tmp_path, ("node-a", "node-b", "node-c"), q, dead_after, forget_after)


def _partition(cluster: Cluster, ref: common_pb2.StoreRef) -> control_pb2.PartitionStatus | None:
    for partition in cluster.status().partitions:
        if partition_key(partition.store) == partition_key(ref):
            return partition
    return None


def _group_at(cluster: Cluster, ref: common_pb2.StoreRef, primary: str, version: int) -> dict[str, int] | None:
    """{replica: version held} once `primary` is the partition's primary at `version` and every replica is
    there too; else None."""
    partition = _partition(cluster, ref)
    if partition is None or partition.primary_node != primary or partition.primary_version != version:
        return None
    held = {r.node_id: r.version_held for r in partition.replicas}
    return held if held and all(v == version for v in held.values()) else None


def test_a_moved_partition_demotes_the_old_primary_and_its_replicas_follow_the_new_one(tmp_path: Path) -> None:
    with _cluster(tmp_path, q=2) as cluster:
        primary = Primary(tmp_path, STORE, cluster.addresses["node-a"])
        try:
            primary.commit_and_ship(4, sync=True)
            assert wait_until(lambda: _group_at(cluster, primary.ref, "node-a", 4), 20, "a's group at 4") == {
                "node-b": 4,
                "node-c": 4,
            }
            # Spark now runs the task on b's executor: b's node ships, a's still reports version 4.
            primary.move_to(cluster.addresses["node-b"])
            primary.commit_and_ship(3)
            group = wait_until(lambda: _group_at(cluster, primary.ref, "node-b", 7), 30, "b primary, replicas at 7")
            assert set(group) == {"node-a", "node-c"}
            wait_until(lambda: '"event": "demoted"' in cluster.processes["node-a"].log(), 10, "node-a demoted")
            assert _dropped(cluster, "node-b", "became the partition's primary")  # its replica is superseded
            primary.commit_and_ship(2)
            group = wait_until(lambda: _group_at(cluster, primary.ref, "node-b", 9), 30, "replicas at 9")
            for node in group:
                assert replica_digest(cluster.data_dir(node), STORE) == (9, primary.digest()), node
            # Only one node claims the partition now: node-a no longer reports it.
            claims = {n.node.node_id: n.primaries for n in cluster.status().nodes}
            assert claims == {"node-a": 0, "node-b": 1, "node-c": 0}
            # Placement's demand comes from the nodes' reports: node-b's mean of the increments it shipped (it
            # shipped versions 5..9 only), and the largest replica on disk (measured every 5 s).
            shipped = [primary.location.increment_path(v).stat().st_size for v in range(5, 10)]
            partition = _partition(cluster, primary.ref)
            assert partition is not None and partition.increment_bytes == sum(shipped) // len(shipped)
            replica_sizes = [
                sum(
                    f.stat().st_size
                    for f in (replica_dir(cluster.data_dir(node), STORE) / "db").iterdir()
                    if f.is_file()
                )
                for node in group
            ]
            wait_until(
                lambda: 0 < _partition(cluster, primary.ref).state_bytes <= 2 * max(replica_sizes), 15, "state size"
            )
        finally:
            primary.close()


def test_two_queries_with_the_same_store_id_keep_separate_replicas(tmp_path: Path) -> None:
    with _cluster(tmp_path, q=1) as cluster:
        first = Primary(tmp_path / "query1", STORE, cluster.addresses["node-a"])
        second = Primary(tmp_path / "query2", STORE, cluster.addresses["node-a"])
        try:
            first.commit_and_ship(3, sync=True)
            second.commit_and_ship(5, sync=True)
            first.commit_and_ship(2, sync=True)
            one = wait_until(lambda: _group_at(cluster, first.ref, "node-a", 5), 20, "first query's replica at 5")
            two = wait_until(lambda: _group_at(cluster, second.ref, "node-a", 5), 20, "second query's replica at 5")
            assert len(cluster.status().partitions) == 2
            for primary, group in ((first, one), (second, two)):
                (node,) = group
                digest = replica_digest(cluster.data_dir(node), STORE, primary.ref.checkpoint_dir)
                assert digest == (5, primary.digest())
            assert first.digest() != second.digest()
        finally:
            first.close()
            second.close()


def _dropped(cluster: Cluster, node: str, reason: str) -> bool:
    return any(
        '"event": "replica_dropped"' in line and reason in line for line in cluster.processes[node].log().splitlines()
    )


def test_a_replica_left_outside_its_group_is_deleted_not_reused(tmp_path: Path) -> None:
    """A replica node silent past dead-after loses its role; when it comes back, its replica (which missed
    increments, and could have missed a rewrite of history) is deleted rather than kept for later."""
    with _cluster(tmp_path, q=1, dead_after=1.5) as cluster:
        primary = Primary(tmp_path, STORE, cluster.addresses["node-a"])
        try:
            primary.commit_and_ship(3, sync=True)
            (stalled,) = wait_until(lambda: _group_at(cluster, primary.ref, "node-a", 3), 20, "a replica at 3")
            other = ({"node-b", "node-c"} - {stalled}).pop()
            send_stop(cluster.processes[stalled])
            wait_until(
                lambda: _group_at(cluster, primary.ref, "node-a", 3) == {other: 3}, 30, f"{other} takes the role"
            )
            primary.commit_and_ship(2)
            send_cont(cluster.processes[stalled])
            wait_until(lambda: _dropped(cluster, stalled, "retired by the controller"), 20, f"{stalled} drops it")
            wait_until(
                lambda: not list((cluster.data_dir(stalled) / "replicas").iterdir()), 10, "its directory deleted"
            )
            assert wait_until(lambda: _group_at(cluster, primary.ref, "node-a", 5), 20, "replica at 5") == {other: 5}
            assert replica_digest(cluster.data_dir(other), STORE) == (5, primary.digest())
        finally:
            send_cont(cluster.processes[stalled])
            primary.close()


def test_a_released_partition_is_forgotten_and_its_replicas_deleted(tmp_path: Path) -> None:
    """The query stops: the provider releases its stores, nobody claims them, and after forget-after the
    controller forgets them and every node deletes its replicas of them."""
    with _cluster(tmp_path, q=2, forget_after=2.0) as cluster:
        primary = Primary(tmp_path, STORE, cluster.addresses["node-a"])
        try:
            primary.commit_and_ship(3, sync=True)
            group = wait_until(lambda: _group_at(cluster, primary.ref, "node-a", 3), 20, "replicas at 3")
            assert set(group) == {"node-b", "node-c"}
            assert primary.release() is True
            assert primary.release() is False  # nothing left to release
            wait_until(lambda: _partition(cluster, primary.ref) is None, 20, "the partition forgotten")
            for node in group:
                wait_until(lambda n=node: _dropped(cluster, n, "retired by the controller"), 20, f"{node} drops it")
                wait_until(
                    lambda n=node: not list((cluster.data_dir(n) / "replicas").iterdir()),
                    10,
                    f"{node}'s replica deleted",
                )
        finally:
            primary.close()


def test_a_dead_primarys_partition_is_forgotten_and_a_fresh_controller_forgets_nothing() -> None:
    clock = FakeClock(100.0)
    membership = Membership(dead_after=3.0, clock=clock, forget_after=60.0)
    store = common_pb2.StoreRef(store_id=STORE, checkpoint_dir="/ckpt/q1/state/0/3")
    _claim(membership, "a", store, 4, ago=0.0)
    clock.now += 30  # a's executor is gone: its claim stops counting once it is dead
    assert [p.primary for p in membership.partitions()] == ["a"]
    assert membership.state_bytes(partition_key(store)) == 0
    clock.now += 31
    assert membership.partitions() == [] and membership.is_forgotten(partition_key(store))
    # A controller that never saw the partition (it restarted) does not call it forgotten.
    assert not Membership(dead_after=3.0, clock=clock).is_forgotten(partition_key(store))


def _held_request(node: str, store: common_pb2.StoreRef) -> control_pb2.HeartbeatRequest:
    return control_pb2.HeartbeatRequest(
        node=control_pb2.NodeRef(node_id=node, address=f"{node}:1"),
        replicas_held=[common_pb2.VersionHeld(store=store, version=5, size_bytes=1000)],
    )


class _NoContext:
    """The servicer context a direct call of the service gets: no metadata in, trailing metadata kept."""

    trailing: tuple = ()

    def abort(self, code: object, details: str) -> None:
        raise AssertionError(f"aborted: {details}")

    def invocation_metadata(self) -> tuple:
        return ()

    def set_trailing_metadata(self, metadata: tuple) -> None:
        self.trailing = metadata


def test_a_restarted_controller_retires_no_replica_of_a_partition_it_has_not_seen() -> None:
    service = ControlService(
        Membership(dead_after=3.0, clock=FakeClock(100.0)), replication_factor=1, heartbeat_interval=0.5
    )
    store = common_pb2.StoreRef(store_id=STORE, checkpoint_dir="/ckpt/q1/state/0/3")
    reply = service.Heartbeat(_held_request("b", store), _NoContext())
    assert list(reply.retired_replicas) == []


def _primary_reporting_a_replica_of_its_own_partition() -> tuple[Membership, common_pb2.StoreRef, Any]:
    """Node b heartbeats as the primary of a partition it also holds a replica of; returns the controller's reply."""
    membership = Membership(dead_after=3.0, clock=FakeClock(100.0))
    service = ControlService(membership, replication_factor=1, heartbeat_interval=0.5)
    store = common_pb2.StoreRef(store_id=STORE, checkpoint_dir="/ckpt/q1/state/0/3")
    request = _held_request("b", store)
    request.primaries.append(control_pb2.PrimaryReport(store=store, version=6))
    return membership, store, service.Heartbeat(request, _NoContext())


def test_a_node_retires_its_replica_of_a_partition_it_is_primary_of() -> None:
    _, _, reply = _primary_reporting_a_replica_of_its_own_partition()
    assert [s.store_id for s in reply.retired_replicas] == [STORE]


def test_a_retired_replica_stops_counting_as_held_when_the_node_is_told_not_at_its_next_heartbeat() -> None:
    """The controller must not warm a hand-over up, nor fail over, on a copy it just told its node to delete: a CI
    run moved a partition to a node 18 ms after retiring that node's replica, counted it warm, and the moved task
    loaded from the checkpoint location."""
    membership, store, reply = _primary_reporting_a_replica_of_its_own_partition()
    assert [s.store_id for s in reply.retired_replicas] == [STORE]
    record = membership.node("b")
    assert record is not None and partition_key(store) not in record.replicas_held
    assert membership.holders(partition_key(store)) == []
    # A node that kept it (the reply was lost) reports it again, and it counts again until it is retired again.
    membership.heartbeat(_held_request("b", store))
    assert [r.node_id for r, _ in membership.holders(partition_key(store))] == ["b"]


def test_a_primarys_node_refuses_shipments_of_its_own_partition_and_never_serves_them(tmp_path: Path) -> None:
    """A former primary still shipping (not demoted yet) to the node that took the partition over: the new
    primary's node must not rebuild a replica from that stream (it may carry the abandoned history)."""
    with _cluster(tmp_path, q=1) as cluster:
        old = Primary(tmp_path / "old", STORE, cluster.addresses["node-a"])
        try:
            new_ref = common_pb2.StoreRef(store_id=STORE, checkpoint_dir=old.ref.checkpoint_dir)
            data = [old.commit(i) for i in range(3)]
            with grpc.insecure_channel(cluster.addresses["node-b"]) as channel:
                stub = replication_pb2_grpc.PrimaryStub(channel)
                stub.Ship(replication_pb2.ShipCommand(increment=common_pb2.IncrementBlob(store=new_ref, data=data[0])))
                acks = list(
                    replication_pb2_grpc.ReplicationStub(channel).Ship(
                        iter(
                            [
                                replication_pb2.ShipRequest(
                                    increment=common_pb2.IncrementBlob(
                                        store=new_ref, version=v, base_version=v - 1, data=data[v - 1]
                                    )
                                )
                                for v in (1, 2)
                            ]
                        ),
                        timeout=10,
                    )
                )
            assert [a.status for a in acks] == [replication_pb2.ACK_FAILED] * 2
            assert "is the primary of" in acks[0].detail
            assert not list((cluster.data_dir("node-b") / "replicas").iterdir())
        finally:
            old.close()


def test_a_demotion_that_crossed_a_newer_commit_is_ignored_and_late_old_commits_are(tmp_path: Path) -> None:
    primary = Primary(tmp_path, STORE, "unused:0")
    try:
        data = [primary.commit(i) for i in range(4)]
        shipper = Shipper(
            NodeSettings(listen="127.0.0.1:0", data_dir=tmp_path / "node"), IncrementLog(1 << 20), lambda _wait: None
        )
        ref = primary.ref
        shipper.ship(ref, data[0])
        shipper.ship(ref, data[1])
        assert shipper.demote([common_pb2.VersionHeld(store=ref, version=1)]) == 0  # it committed 2 since
        assert shipper.is_primary(ref)
        assert shipper.demote([common_pb2.VersionHeld(store=ref, version=2)]) == 1
        assert not shipper.is_primary(ref) and shipper.reports() == []
        late = shipper.ship(ref, data[1])  # version 2 handed over late by the local channel
        assert "not the primary" in late.detail and not shipper.is_primary(ref)
        shipper.ship(ref, data[2])  # a new commit here: primary again
        assert shipper.is_primary(ref) and [r.version for r in shipper.reports()] == [3]
        assert shipper.release(ref) is True and shipper.release(ref) is False
        shipper.close()
    finally:
        primary.close()
