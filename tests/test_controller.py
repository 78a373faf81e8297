"""The controller: ring replica groups, status with lag (and the `statestore status` table), and a dead
replica replaced in its group, with real node processes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from test_node_harness import (
    PROJECT_ROOT,
    Cluster,
    FakeClock,
    Primary,
    replica_digest,
    send_cont,
    send_stop,
    statestore_command,
    wait_until,
)

from statestore.cluster.membership import Membership
from statestore.controller.replica_groups import ReplicaGroups
from statestore.partition_key import partition_key
from statestore.rpc import common_pb2, control_pb2

STORE = "1/0/default"


def _beat(membership: Membership, node: str, primaries: list[str], rack: str = "") -> None:
    membership.heartbeat(
        control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(node_id=node, address=f"{node}:1", rack=rack),
            primaries=[control_pb2.PrimaryReport(store=common_pb2.StoreRef(store_id=p), version=1) for p in primaries],
        )
    )


def _key(store_id: str) -> str:
    """The partition key of a store id reported without a checkpoint location (as `_beat` reports them)."""
    return partition_key(common_pb2.StoreRef(store_id=store_id))


def _groups(chooser: ReplicaGroups, primaries: dict[str, str]) -> dict[str, list[str]]:
    return {p: chooser.choose_replica_group(_key(p), node) for p, node in primaries.items()}


def test_placement_keeps_primaries_and_replaces_only_a_dead_nodes_roles() -> None:
    clock = FakeClock()
    membership = Membership(dead_after=3.0, clock=clock)
    nodes = ["a", "b", "c", "d", "e"]
    primaries = {f"p{i}": nodes[i % 3] for i in range(12)}  # Spark runs the tasks on a, b and c only
    for node in nodes:
        _beat(membership, node, [p for p, n in primaries.items() if n == node])
    chooser = ReplicaGroups(membership, q=2)
    before = _groups(chooser, primaries)
    for p, replicas in before.items():
        assert len(replicas) == 2 and len(set(replicas)) == 2 and primaries[p] not in replicas
    assert chooser.current().placement is not None
    assert all(chooser.current().placement[_key(p)].primary == n for p, n in primaries.items())  # pinned
    assert _groups(chooser, primaries) == before and chooser.replans == 1  # cached while nothing changes
    clock.now = 5.0  # every node but d heartbeats: d is dead
    for node in ["a", "b", "c", "e"]:
        _beat(membership, node, [p for p, n in primaries.items() if n == node])
    after = _groups(chooser, primaries)
    assert chooser.replans == 2
    for p in primaries:
        assert len(after[p]) == 2 and len(set(after[p])) == 2 and primaries[p] not in after[p]
        assert "d" not in after[p]
        kept = [n for n in before[p] if n != "d"]
        assert set(kept) <= set(after[p]), (p, before[p], after[p])  # only d's role moved


def test_a_drain_repairs_only_the_drained_nodes_groups() -> None:
    """The repair pinned a partition still running on the drained node to that node, which its topology leaves
    out: the repair failed and every group was placed anew, in the heartbeat handler that saw the drain."""
    membership = Membership(dead_after=3.0, clock=FakeClock())
    primaries = {f"p{i}": "abc"[i // 3] for i in range(9)}
    for node in "abcd":
        _beat(membership, node, [p for p, n in primaries.items() if n == node])
    chooser = ReplicaGroups(membership, q=1)
    chooser.current()
    replans = chooser.replans
    chooser.drain("c")
    plan = chooser.current()
    assert chooser.repairs == 1 and chooser.replans == replans + 1, "a repair, not every group placed anew"
    assert chooser.last_replan_groups < 9
    assert all("c" not in plan.placement[_key(p)].nodes for p in primaries)


def test_a_new_replication_factor_keeps_the_copies_already_placed() -> None:
    """q=2 with two nodes places one replica per partition; when two nodes join, each partition gains a replica
    and keeps the one it has (a caught-up copy), where planning from nothing dropped some of them."""
    membership = Membership(dead_after=3.0, clock=FakeClock())
    primaries = {f"p{i}": "ab"[i % 2] for i in range(8)}
    for node in "ab":
        _beat(membership, node, [p for p, n in primaries.items() if n == node])
    chooser = ReplicaGroups(membership, q=2)
    before = _groups(chooser, primaries)
    assert all(before[p] == ["b" if n == "a" else "a"] for p, n in primaries.items())
    _beat(membership, "c", [])
    _beat(membership, "d", [])
    after = _groups(chooser, primaries)
    assert all(len(after[p]) == 2 and set(before[p]) < set(after[p]) for p in primaries), (before, after)


def test_a_target_pinned_to_a_node_left_out_places_that_partition_freely() -> None:
    """A decommission pins every partition that runs outside the executors going; one running on a node an
    operator drained earlier (Real-Time Mode runs tasks anywhere) made the placement infeasible, and the
    decommission failed."""
    membership = Membership(dead_after=3.0, clock=FakeClock())
    primaries = {"p0": "a", "p1": "a", "p2": "b", "p3": "b", "p4": "c"}
    for node in "abcd":
        _beat(membership, node, [p for p, n in primaries.items() if n == node])
    chooser = ReplicaGroups(membership, q=1)
    chooser.current()
    chooser.drain("c")
    pins = {_key(p): n for p, n in primaries.items() if n != "d"}
    placement, _running = chooser.target(pins, exclude=frozenset({"d"}))
    assert placement[_key("p4")].primary in ("a", "b")
    assert all(placement[_key(p)].primary == n for p, n in primaries.items() if n != "c")


def test_rereplication_waits_after_a_loss_then_places_on_the_node_that_joined_meanwhile() -> None:
    clock = FakeClock()
    membership = Membership(dead_after=3.0, clock=clock)
    primaries = {"p0": "a", "p1": "a", "p2": "b", "p3": "b"}
    for node in ["a", "b", "c"]:
        _beat(membership, node, [p for p, n in primaries.items() if n == node])
    chooser = ReplicaGroups(membership, q=1, rereplication_delay=10.0)
    before = _groups(chooser, primaries)
    lost = next(n for replicas in before.values() for n in replicas if n == "c")  # c holds some replica
    clock.now = 5.0  # c is dead; a and b go on
    for node in ["a", "b"]:
        _beat(membership, node, [p for p, n in primaries.items() if n == node])
    held = _groups(chooser, primaries)
    for p in primaries:  # the dead node's roles stay empty, nothing else changes
        assert held[p] == [n for n in before[p] if n != lost], (p, before[p], held[p])
    assert "re-replication after the loss of c waits 10s" in chooser.current().note
    assert chooser.replans == 1 and chooser.has_role(_key("p0"), lost) is False
    clock.now = 8.0  # a replacement joins during the wait: the wait goes on
    for node in ["a", "b", "d"]:
        _beat(membership, node, [p for p, n in primaries.items() if n == node])
    assert _groups(chooser, primaries) == held and chooser.replans == 1
    clock.now = 15.5  # the wait is over: the re-plan fills the empty roles, on d (the emptiest node)
    for node in ["a", "b", "d"]:
        _beat(membership, node, [p for p, n in primaries.items() if n == node])
    after = _groups(chooser, primaries)
    assert chooser.replans == 2 and chooser.current().note == ""
    for p in primaries:
        assert len(after[p]) == 1 and "c" not in after[p]
        if not held[p]:
            assert after[p] == ["d"], (p, after[p])


def test_placement_degrades_with_too_few_nodes_and_q_zero() -> None:
    membership = Membership(dead_after=3.0, clock=FakeClock())
    _beat(membership, "a", ["p0", "p1"])
    _beat(membership, "b", [])
    chooser = ReplicaGroups(membership, q=3)
    assert _groups(chooser, {"p0": "a", "p1": "a"}) == {"p0": ["b"], "p1": ["b"]}
    assert "only 2 live node(s): 1 replica(s) per partition instead of 3" in chooser.current().note
    assert ReplicaGroups(membership, q=0).choose_replica_group(_key("p0"), "a") == []
    lonely = Membership(dead_after=3.0, clock=FakeClock())
    _beat(lonely, "a", ["p0"])
    assert ReplicaGroups(lonely, q=1).choose_replica_group(_key("p0"), "a") == []


def test_nodes_dead_for_longer_than_forget_after_are_removed_and_a_lost_one_stays_refused() -> None:
    clock = FakeClock()
    membership = Membership(dead_after=3.0, clock=clock, forget_after=60.0)
    for node in ("a", "b", "gone"):
        _beat(membership, node, [f"p-{node}"])
    membership.lose("gone")  # Spark removed its executor
    for _ in range(20):  # a and b keep beating; gone is silent
        clock.now += 3.0
        _beat(membership, "a", ["p-a"])
        _beat(membership, "b", ["p-b"])
    assert [r.node_id for r in membership.nodes()] == ["a", "b", "gone"]  # dead 60 s: still shown
    clock.now += 4.0
    _beat(membership, "a", ["p-a"])
    _beat(membership, "b", ["p-b"])
    assert [r.node_id for r in membership.nodes()] == ["a", "b"]
    assert membership.node("gone") is None and membership.node_of_executor("gone") is None
    _beat(membership, "gone", [])  # a lost node that comes back is not taken again
    assert [r.node_id for r in membership.nodes()] == ["a", "b"]


def test_racks_are_spread_across() -> None:
    membership = Membership(dead_after=3.0, clock=FakeClock())
    _beat(membership, "a", ["p0", "p1", "p2", "p3"], rack="r1")
    _beat(membership, "a2", [], rack="r1")
    _beat(membership, "b", [], rack="r2")
    _beat(membership, "b2", [], rack="r2")
    chooser = ReplicaGroups(membership, q=1)
    for p in ["p0", "p1", "p2", "p3"]:
        assert chooser.choose_replica_group(_key(p), "a")[0] in {"b", "b2"}  # distinct racks


def _cluster(tmp_path: Path, names: tuple[str, ...], q: int, dead_after: float) -> Cluster:
    cluster = Cluster(tmp_path, q=q, dead_after=dead_after)
    try:
        cluster.start_controller()
        for name in names:
            cluster.start_node(name)
        cluster.wait_groups(len(names))
    except BaseException:
        print(cluster.logs())
        cluster.close()
        raise
    return cluster


def _replica_row(cluster: Cluster, node: str) -> tuple[int, int, int] | None:
    for partition in cluster.status().partitions:
        if partition.store.store_id == STORE:
            for replica in partition.replicas:
                if replica.node_id == node:
                    return replica.version_held, replica.lag_versions, replica.lag_bytes
    return None


def test_status_shows_lag_in_versions_and_bytes(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, ("node-a", "node-b"), q=1, dead_after=30.0)
    primary = Primary(tmp_path, STORE, cluster.addresses["node-a"])
    try:
        primary.commit_and_ship(3, sync=True)
        wait_until(lambda: _replica_row(cluster, "node-b") == (3, 0, 0), what="node-b caught up")
        send_stop(cluster.processes["node-b"])  # a stalled replica: alive for the controller, acking nothing
        primary.commit_and_ship(4)
        row = wait_until(
            lambda: (r := _replica_row(cluster, "node-b")) and r[1] == 4 and r[2] > 0 and r, what="lag of 4 versions"
        )
        assert row[0] == 3
        table = subprocess.run(
            statestore_command("status", "--controller", cluster.controller_address),
            capture_output=True,
            text=True,
            timeout=30,
            cwd=PROJECT_ROOT,
            check=True,
        ).stdout
        line = next(line for line in table.splitlines() if line.startswith(STORE))
        assert line.split()[:7] == [STORE, "node-a", "7", "node-b", "3", "4", str(row[2])]
        assert "node-a" in table and "alive" in table
        send_cont(cluster.processes["node-b"])
        wait_until(lambda: _replica_row(cluster, "node-b") == (7, 0, 0), what="lag back to 0")
    finally:
        send_cont(cluster.processes["node-b"])
        primary.close()
        cluster.close()


def test_dead_replica_is_replaced_and_the_new_one_catches_up(tmp_path: Path) -> None:
    """Placement picks the replica; killing it moves only its role, and status prints the plan's cost."""
    cluster = _cluster(tmp_path, ("node-a", "node-b", "node-c"), q=1, dead_after=1.5)
    primary = Primary(tmp_path, STORE, cluster.addresses["node-a"])
    try:
        primary.commit_and_ship(5, sync=True)
        (chosen,) = _replicas(cluster)
        assert chosen in {"node-b", "node-c"}
        other = ({"node-b", "node-c"} - {chosen}).pop()
        cost = cluster.status().placement
        assert cost.total > 0 and cost.total == cost.traffic + cost.load + cost.migration and cost.replicas == 1
        cluster.processes[chosen].kill9()
        wait_until(lambda: not {n.node.node_id: n.alive for n in cluster.status().nodes}[chosen], what="dead")
        wait_until(lambda: _replicas(cluster) == [other], what=f"{other} takes the dead node's replica role")
        primary.commit_and_ship(3)
        wait_until(lambda: _replica_row(cluster, other) == (8, 0, 0), what=f"{other} replica at 8")
        assert replica_digest(cluster.data_dir(other), STORE) == (8, primary.digest())
        table = subprocess.run(
            statestore_command("status", "--controller", cluster.controller_address),
            capture_output=True,
            text=True,
            timeout=30,
            cwd=PROJECT_ROOT,
            check=True,
        ).stdout
        assert "placement: cost " in table and "traffic" in table and "migration" in table
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        primary.close()
        cluster.close()


def test_a_replica_whose_increments_were_dropped_catches_up_on_an_idle_stream(tmp_path: Path) -> None:
    """Backpressure drops a stalled replica's backlog; when no commit follows, the primary's node sends the
    newest dropped increment again once the link is idle, and the replica pulls the rest."""
    cluster = Cluster(tmp_path, q=1, dead_after=30.0)
    try:
        cluster.start_controller()
        cluster.start_node("node-a", "--max-in-flight-mb", "0.001", "--backpressure-timeout", "0.2")
        cluster.start_node("node-b")
        cluster.wait_groups(2)
    except BaseException:
        print(cluster.logs())
        cluster.close()
        raise
    quiet = Primary(tmp_path, STORE, cluster.addresses["node-a"])
    busy = Primary(tmp_path, "0/1/default", cluster.addresses["node-a"])
    try:
        quiet.commit_and_ship(2, sync=True)
        busy.commit_and_ship(2, sync=True)
        send_stop(cluster.processes["node-b"])  # acks nothing: the backlog outgrows 1 KB and is dropped
        for _ in range(3):  # versions 3 to 5, too big to all fit the stream's window; then it commits nothing
            quiet.store.put(b"big", os.urandom(4 << 20))
            quiet.location.commit(quiet.store)
            quiet.ship(quiet.location.increment_path(quiet.store.version).read_bytes())
        busy.commit_and_ship(1)  # its ship drops the link's whole backlog: the quiet partition's newest too
        wait_until(lambda: "backpressure_drop" in (tmp_path / "node-a.log").read_text(), what="a dropped backlog")
        send_cont(cluster.processes["node-b"])
        wait_until(lambda: _replica_row(cluster, "node-b") == (5, 0, 0), 30, "the quiet replica at version 5")
        assert replica_digest(cluster.data_dir("node-b"), STORE) == (5, quiet.digest())
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        send_cont(cluster.processes["node-b"])
        quiet.close()
        busy.close()
        cluster.close()


def _replicas(cluster: Cluster) -> list[str]:
    for partition in cluster.status().partitions:
        if partition.store.store_id == STORE:
            return [r.node_id for r in partition.replicas]
    return []


def test_a_node_back_at_its_address_after_its_silence_counts_as_a_false_death(caplog) -> None:
    import logging

    clock = FakeClock()
    membership = Membership(dead_after=3.0, clock=clock)
    _beat(membership, "a", [])
    clock.now += 2.0  # late, still alive
    _beat(membership, "a", [])
    clock.now += 5.0  # dead meanwhile, back at the same address: the same process paused
    caplog.set_level(logging.INFO)
    _beat(membership, "a", [])
    assert membership.false_deaths == 1
    clock.now += 5.0  # back at another address: a restarted node, not a false death
    membership.heartbeat(control_pb2.HeartbeatRequest(node=control_pb2.NodeRef(node_id="a", address="a:2")))
    assert membership.false_deaths == 1
    events = [r.getMessage() for r in caplog.records if r.name == "statestore.cluster.membership"]
    assert any("node_back" in e for e in events) and any("node_restarted" in e for e in events), events


def test_an_idle_querys_partition_outlives_its_primarys_loss_for_forget_after() -> None:
    """A node whose reports do not change (its query is idle, say a trigger every few minutes) sends them once and
    then heartbeats "unchanged". Lost after more than `forget_after` of that, its partition must stay known for
    `forget_after` from its last heartbeat, so that failover can steer it to a replica: it used to be forgotten at
    once (the record dated from the last full report), and every replica of it retired."""
    clock = FakeClock()
    membership = Membership(dead_after=3.0, clock=clock, forget_after=60.0)
    full = control_pb2.HeartbeatRequest(
        node=control_pb2.NodeRef(node_id="a", address="a:1"),
        primaries=[control_pb2.PrimaryReport(store=common_pb2.StoreRef(store_id="p-a"), version=7)],
    )
    epoch = membership.heartbeat(full)
    assert epoch
    unchanged = control_pb2.HeartbeatRequest(node=full.node, reports_epoch=epoch)
    for _ in range(60):  # two minutes idle
        clock.now += 2.0
        assert membership.heartbeat(unchanged) == epoch
        _beat(membership, "b", [])
    for _ in range(3):  # a falls silent: dead after 3 s
        clock.now += 2.0
        _beat(membership, "b", [])
    assert not membership.is_alive(membership.node("a"))
    record = membership.partition(_key("p-a"))
    assert record is not None and not membership.is_forgotten(_key("p-a"))
    assert (record.primary, record.report.version) == ("a", 7)
    clock.now += 60.0  # forgotten once unclaimed for forget_after
    _beat(membership, "b", [])
    assert membership.partition(_key("p-a")) is None and membership.is_forgotten(_key("p-a"))


def test_what_the_controller_keeps_per_node_goes_with_nodes_the_membership_dropped() -> None:
    """Executors come and go for the life of an application (each a node id of its own): the groups last sent and
    the replicas last checked per node go once the membership drops a node (dead past forget_after)."""
    from statestore.controller.retired_replicas import RetiredReplicas
    from statestore.controller.sent_groups import SentGroups

    clock = FakeClock()
    membership = Membership(dead_after=3.0, clock=clock, forget_after=10.0)
    chooser = ReplicaGroups(membership, q=1)
    sent, retired = SentGroups(membership, chooser), RetiredReplicas(membership, chooser)
    for i in range(100):
        _beat(membership, f"gone-{i}", [f"p-{i}"])
        sent.answer(f"gone-{i}", 0)
        retired.of(f"gone-{i}")
    clock.now += 20.0  # every one of them dead past forget_after
    for node in ("a", "b"):
        _beat(membership, node, [])
        sent.answer(node, 0)
        retired.of(node)
    assert sorted(sent._sent) == ["a", "b"] and sorted(retired._checked) == ["a", "b"]
