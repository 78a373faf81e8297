"""The controller's side of failover (handover.failover), on membership fed by heartbeats: which replica holder
a lost executor's partitions are steered to, that a task partition's stores move together, that the lost
executor's node stays dead, and how `statestore status` shows it. No processes: the steering callback records
what it is asked."""

from __future__ import annotations

from test_node_harness import FakeClock

from handover import Failover, Steer
from statestore.cluster.membership import Membership
from statestore.controller.replica_groups import ReplicaGroups
from statestore.controller.status import build_status, format_status
from statestore.rpc import common_pb2, control_pb2

ROOT = "/data/q/checkpoint"
PLACE = control_pb2.SparkPlace(run_id="00000000-0000-0000-0000-000000000001", state_root=f"file:{ROOT}/state")


def store(store_id: str) -> common_pb2.StoreRef:
    operator, partition, name = store_id.split("/")
    suffix = "" if name == "default" else f"/{name}"
    return common_pb2.StoreRef(store_id=store_id, checkpoint_dir=f"{ROOT}/state/{operator}/{partition}{suffix}")


def beat(
    membership: Membership,
    node: str,
    primaries: dict[str, int] | None = None,
    replicas: dict[str, int] | None = None,
    executor: bool = True,
) -> None:
    """A heartbeat of `node` (serving executor `node` unless `executor` is false) with its primaries and
    replicas, store id -> version."""
    load = control_pb2.LoadReport(source="replica", version=3, from_version=3, millis=42)
    membership.heartbeat(
        control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(
                node_id=node,
                address=f"{node}:1",
                executor_id=node if executor else "",
                executor_host="10.0.0.1" if executor else "",
            ),
            primaries=[
                control_pb2.PrimaryReport(store=store(s), version=v, place=PLACE, last_load=load)
                for s, v in (primaries or {}).items()
            ],
            replicas_held=[common_pb2.VersionHeld(store=store(s), version=v) for s, v in (replicas or {}).items()],
        )
    )


def test_a_lost_executors_partitions_go_to_their_freshest_replica_holders() -> None:
    membership = Membership(dead_after=3.0, clock=FakeClock())
    beat(membership, "a", primaries={"0/0/default": 7, "0/1/default": 7})
    beat(membership, "b", primaries={"0/2/default": 7}, replicas={"0/0/default": 7, "0/1/default": 6})
    beat(membership, "c", replicas={"0/0/default": 6, "0/1/default": 7})
    beat(membership, "d", replicas={"0/0/default": 7, "0/1/default": 7}, executor=False)  # no executor known
    failover = Failover(membership)
    asked: list[Steer] = []
    decisions = failover.executor_lost("a", asked.append)
    assert asked == decisions
    assert {d.store.store_id: d.executor_id for d in decisions} == {"0/0/default": "b", "0/1/default": "c"}
    assert all(d.run_id == PLACE.run_id and d.state_root == PLACE.state_root for d in decisions)
    assert all(d.executor_host == "10.0.0.1" and d.lost_executor == "a" for d in decisions)
    assert failover.steered(decisions[0].store.store_id + "@" + decisions[0].store.checkpoint_dir).startswith(
        "executor b (node b, replica at version 7 of 7) after executor a was lost"
    )
    # The lost executor's node is dead for good: a last heartbeat from it changes nothing.
    beat(membership, "a", primaries={"0/0/default": 8})
    assert "a" not in membership.live_node_ids()
    assert failover.executor_lost("x", asked.append) == []  # an executor with no node: nothing to do


def test_a_node_being_drained_takes_a_lost_partition_only_when_no_other_holds_it() -> None:
    """Spark is decommissioning b's executor (it runs no new task): a's partitions go to c, fresher on b or not;
    one that only b holds still goes to b, its only warm copy."""
    membership = Membership(dead_after=3.0, clock=FakeClock())
    beat(membership, "a", primaries={"0/0/default": 7, "0/1/default": 7})
    beat(membership, "b", replicas={"0/0/default": 7, "0/1/default": 7})
    beat(membership, "c", replicas={"0/0/default": 6})
    decisions = Failover(membership).executor_lost("a", lambda _: None, draining=frozenset({"b"}))
    assert {d.store.store_id: d.executor_id for d in decisions} == {"0/0/default": "c", "0/1/default": "b"}


def test_a_restarted_query_is_steered_to_a_holder_not_being_drained_and_status_shows_why() -> None:
    membership = Membership(dead_after=3.0, clock=FakeClock())
    beat(membership, "a", primaries={"0/0/default": 7})
    beat(membership, "b", replicas={"0/0/default": 7})
    beat(membership, "c", replicas={"0/0/default": 6})
    failover = Failover(membership)
    decisions = failover.query_started("run-2", PLACE.state_root, lambda _: None, draining=frozenset({"b"}))
    assert [(d.executor_id, d.run_id) for d in decisions] == [("c", "run-2")]
    key = "0/0/default@" + store("0/0/default").checkpoint_dir
    assert failover.steered(key).startswith("executor c (node c, replica at version 6 of 7) as query run run-2 started")


def test_the_stores_of_one_task_partition_move_together() -> None:
    """A stream-stream join loads four stores per partition in one task: they go to one executor, the one
    holding replicas of all of them, even when another holds a fresher copy of one store."""
    sides = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]
    stores = [f"0/3/{name}" for name in sides]
    membership = Membership(dead_after=3.0, clock=FakeClock())
    beat(membership, "a", primaries=dict.fromkeys(stores, 5))
    beat(membership, "b", replicas=dict.fromkeys(stores, 4))
    beat(membership, "c", replicas={stores[0]: 5})
    decisions = Failover(membership).executor_lost("a", lambda _: None)
    assert sorted(d.store.store_id for d in decisions) == sorted(stores)
    assert {d.executor_id for d in decisions} == {"b"}


def test_placement_gives_the_stores_of_one_task_partition_one_replica_group() -> None:
    sides = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]
    membership = Membership(dead_after=3.0, clock=FakeClock())
    beat(membership, "a", primaries={f"0/{p}/{name}": 1 for p in (0, 1) for name in sides})
    for node in ("b", "c", "d"):
        beat(membership, node)
    chooser = ReplicaGroups(membership, q=1)
    for p in (0, 1):
        groups = {tuple(chooser.choose_replica_group(f"0/{p}/{name}@{store(f'0/{p}/{name}').checkpoint_dir}", "a"))
                  for name in sides}
        assert len(groups) == 1 and len(next(iter(groups))) == 1, groups


def test_status_shows_each_partitions_last_load_and_the_failover() -> None:
    membership = Membership(dead_after=3.0, clock=FakeClock())
    beat(membership, "a", primaries={"0/0/default": 3})
    beat(membership, "b", replicas={"0/0/default": 3})
    failover = Failover(membership)
    failover.executor_lost("a", lambda _: None)
    reply = build_status(membership, ReplicaGroups(membership, q=1), 1, failover)
    assert reply.partitions[0].last_load.source == "replica" and reply.partitions[0].steered_to
    shown = format_status(reply)
    assert "loaded from" in shown and "replica v3 42ms" in shown
    assert "FAILOVER\n0/0/default: steered to executor b" in shown
    assert "a@10.0.0.1" in shown and "dead" in shown


def test_a_partition_steered_to_an_executor_lost_before_it_ran_there_is_steered_again() -> None:
    """Executor a is lost and its partition steered to b, whose node holds a replica; b is lost too before Spark ran
    the partition there (its primary is still a's node). The partition goes to c, the other replica holder; it
    used to be left where it was, and loaded from the checkpoint location."""
    membership = Membership(dead_after=3.0, clock=FakeClock())
    beat(membership, "a", primaries={"0/0/default": 7})
    beat(membership, "b", replicas={"0/0/default": 7})
    beat(membership, "c", replicas={"0/0/default": 6})
    failover = Failover(membership)
    asked: list[Steer] = []
    assert [d.executor_id for d in failover.executor_lost("a", asked.append)] == ["b"]
    again = failover.executor_lost("b", asked.append)
    assert [(d.executor_id, d.version_held, d.lost_executor) for d in again] == [("c", 6, "b")]


def test_a_lost_partition_is_incoming_to_its_steered_node_until_a_live_node_is_its_primary() -> None:
    """Between the steer and the promotion, the steered node's heartbeat replies list the lost partitions as
    incoming (its executor opens copies ahead of their tasks); a second loss moves them to the node steered to
    next, and a primary's report ends the entry, wherever Spark ran the partition."""
    membership = Membership(dead_after=3.0, clock=FakeClock())
    beat(membership, "a", primaries={"0/0/default": 7, "0/1/default": 7})
    beat(membership, "b", replicas={"0/0/default": 7, "0/1/default": 6})
    beat(membership, "c", replicas={"0/0/default": 6, "0/1/default": 7})
    failover = Failover(membership)
    assert failover.incoming("b") == failover.incoming("c") == []
    failover.executor_lost("a", lambda _: None)
    assert [s.store_id for s in failover.incoming("b")] == ["0/0/default"]
    assert [s.store_id for s in failover.incoming("c")] == ["0/1/default"]
    # c promotes its partition: no longer incoming. b is lost before running its own: it goes to c.
    beat(membership, "c", primaries={"0/1/default": 8}, replicas={"0/0/default": 6})
    assert failover.incoming("c") == []
    failover.executor_lost("b", lambda _: None)
    assert failover.incoming("b") == []
    assert [s.store_id for s in failover.incoming("c")] == ["0/0/default"]
    beat(membership, "c", primaries={"0/0/default": 8, "0/1/default": 8})
    assert failover.incoming("c") == []
