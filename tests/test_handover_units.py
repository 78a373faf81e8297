"""Planned hand-over's pieces without Spark or processes: `balance_primaries` (role swaps inside groups),
`order_moves` (strategy batches), the names `Operations` resolves and the commands it refuses, what `hold`,
`release`, `adopt` and `drain` do to the replica groups in force, and the `statestore move|drain|rebalance`
command line against a controller started in-process. Membership is fed real heartbeat protos."""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_node_harness import FakeClock

from handover.failover import Failover
from handover.handover import HandOver, HandOverProtocol, HandOverSettings, SparkLevers, Step
from handover.migration import Migration, order_moves
from placement import Placement, ReplicaGroup, Strategy
from placement.primaries import balance_primaries
from statestore.cluster.membership import Membership
from statestore.controller.operations import OperationError, Operations, PartitionMoveRequest
from statestore.controller.replica_groups import ReplicaGroups
from statestore.controller.server import Controller
from statestore.controller.status import format_status
from statestore.partition_key import partition_key, task_partition_key
from statestore.rpc import common_pb2, control_pb2

ROOT = "/data/q/checkpoint"
OTHER_ROOT = "/data/other/checkpoint"


# ------------------------------------------------------------------------------------------ balance_primaries


def primary_counts(placement: Placement) -> Counter:
    nodes = {node for group in placement.values() for node in group.nodes}
    count = Counter(dict.fromkeys(nodes, 0))
    count.update(group.primary for group in placement.values())
    return count


def spread(placement: Placement) -> int:
    count = primary_counts(placement)
    return max(count.values()) - min(count.values()) if count else 0


def node_sets(placement: Placement) -> dict[str, frozenset[str]]:
    return {task: frozenset(group.nodes) for task, group in placement.items()}


def skewed(partitions: int, nodes: list[str]) -> Placement:
    """Every primary on nodes[0]; replicas round-robin over the others."""
    others = nodes[1:]
    return Placement(
        {
            f"p{i:02d}": ReplicaGroup(nodes[0], (others[i % len(others)], others[(i + 1) % len(others)]))
            for i in range(partitions)
        }
    )


def test_a_skewed_placement_gets_balanced_primaries_by_role_swaps() -> None:
    before = skewed(12, ["a", "b", "c", "d"])
    assert spread(before) == 12
    after = balance_primaries(before)
    assert spread(after) <= 1, primary_counts(after)
    assert node_sets(after) == node_sets(before)  # only roles swap: no copy moves
    assert all(len(group.replicas) == 2 for group in after.values())
    assert balance_primaries(before) == after  # deterministic
    assert balance_primaries(after) == after  # balanced stays as it is


def test_fixed_partitions_keep_their_primary() -> None:
    before = skewed(8, ["a", "b", "c"])
    fixed = frozenset({"p00", "p01", "p02"})
    after = balance_primaries(before, fixed)
    assert all(after[p].primary == "a" for p in fixed)
    assert node_sets(after) == node_sets(before)
    # The five free partitions even the rest out: a keeps its three fixed ones, b and c take the others.
    assert primary_counts(after) == Counter({"a": 3, "b": 3, "c": 2}) or primary_counts(after) == Counter(
        {"a": 3, "b": 2, "c": 3}
    )


def test_balance_stops_where_no_swap_can_help() -> None:
    """Node c holds no copy of any partition whose primary is on a: it cannot take a primary from a by a swap."""
    before = Placement(
        {
            "p0": ReplicaGroup("a", ("b",)),
            "p1": ReplicaGroup("a", ("b",)),
            "p2": ReplicaGroup("a", ("b",)),
            "p3": ReplicaGroup("a", ("b",)),
            "p4": ReplicaGroup("c", ("d",)),
        }
    )
    after = balance_primaries(before)
    assert primary_counts(after)["a"] == 2 and primary_counts(after)["b"] == 2
    assert node_sets(after) == node_sets(before)


@st.composite
def placements(draw: st.DrawFn) -> Placement:
    nodes = [f"n{i}" for i in range(draw(st.integers(2, 6)))]
    replicas = draw(st.integers(0, min(2, len(nodes) - 1)))
    groups = {}
    for i in range(draw(st.integers(0, 15))):
        members = draw(st.permutations(nodes))[: replicas + 1]
        groups[f"p{i:02d}"] = ReplicaGroup(members[0], tuple(members[1:]))
    return Placement(groups)


@settings(max_examples=150, deadline=None)
@given(placement=placements(), data=st.data())
def test_balancing_keeps_every_group_and_never_widens_the_spread(placement: Placement, data: st.DataObject) -> None:
    fixed = frozenset(data.draw(st.sets(st.sampled_from(sorted(placement)))) if placement else set())
    after = balance_primaries(placement, fixed)
    assert node_sets(after) == node_sets(placement)
    assert all(after[p].primary == placement[p].primary for p in fixed)
    assert spread(after) <= spread(placement)
    assert balance_primaries(placement, fixed) == after
    # No swap is left that would narrow the gap: no free partition whose primary has two more than a member.
    count = primary_counts(after)
    for task, group in after.items():
        if task not in fixed:
            assert all(count[r] + 1 >= count[group.primary] for r in group.replicas), (task, group, count)


def _naive_balance(placement: Placement, fixed: frozenset[str]) -> dict[str, ReplicaGroup]:
    """The rule balance_primaries follows, computed the obvious way (every swap re-reads every group): the busiest
    node that can give a primary gives it to its replica with the fewest primaries, then the lowest node id, then
    the lowest partition."""
    groups = dict(placement.items())
    nodes = sorted({node for group in groups.values() for node in group.nodes})
    while True:
        count = Counter({node: 0 for node in nodes})
        count.update(group.primary for group in groups.values())
        swap = None
        for busy in sorted(count, key=lambda n: (-count[n], n)):
            candidates = [
                (count[replica], replica, partition)
                for partition, group in groups.items()
                if group.primary == busy and partition not in fixed
                for replica in group.replicas
                if count[replica] + 1 < count[busy]
            ]
            if candidates:
                swap = min(candidates)
                break
        if swap is None:
            return groups
        _, node, partition = swap
        group = groups[partition]
        groups[partition] = ReplicaGroup(node, tuple(group.primary if r == node else r for r in group.replicas))


@settings(max_examples=300, deadline=None)
@given(placement=placements(), data=st.data())
def test_balancing_swaps_as_the_naive_rule_does(placement: Placement, data: st.DataObject) -> None:
    """balance_primaries keeps indexes instead of re-reading every group per swap (a rebalance of 10,000
    partitions on one node took about half a minute in the gRPC handler); its swaps are the naive rule's."""
    fixed = frozenset(data.draw(st.sets(st.sampled_from(sorted(placement))))) if len(placement) else frozenset()
    assert dict(balance_primaries(placement, fixed).items()) == _naive_balance(placement, fixed)



# ---------------------------------------------------------------------------------------------- order_moves


def primary_move(task: str, source: str, target: str) -> HandOver:
    return HandOver(task, source, target, ReplicaGroup(target, (source,)))


def batches(moves: list[HandOver]) -> list[list[HandOver]]:
    out: dict[int, list[HandOver]] = {}
    for move in moves:
        out.setdefault(move.batch, []).append(move)
    assert sorted(out) == list(range(len(out))), "batches are numbered from 0 without gaps"
    return [out[b] for b in sorted(out)]


def some_moves() -> list[HandOver]:
    """A bipartite case: senders a and b, receivers c, d and e; a takes part in three moves."""
    return [
        primary_move("t0", "a", "c"),
        primary_move("t1", "a", "d"),
        primary_move("t2", "a", "e"),
        primary_move("t3", "b", "c"),
        primary_move("t4", "b", "d"),
    ]


def test_all_at_once_is_one_batch() -> None:
    moves = some_moves()
    order_moves(moves, Strategy.ALL_AT_ONCE, lambda _m: 10)
    assert len(batches(moves)) == 1


def test_fluid_is_one_move_a_batch() -> None:
    moves = some_moves()
    order_moves(moves, Strategy.FLUID, lambda _m: 10)
    assert [len(b) for b in batches(moves)] == [1] * len(moves)


def test_batched_never_has_a_node_twice_in_a_batch_and_needs_as_many_batches_as_the_busiest_node() -> None:
    moves = some_moves()
    order_moves(moves, Strategy.BATCHED, lambda m: 100 if m.task == "t0" else 10)
    planned = batches(moves)
    for batch in planned:
        busy = [node for move in batch for node in (move.source, move.target)]
        assert len(busy) == len(set(busy)), batch
    most = max(Counter(n for m in moves for n in (m.source, m.target)).values())
    assert most == 3 and len(planned) == most


def test_batched_counts_the_receiving_replica_of_a_replica_only_change() -> None:
    """Without a primary move (source == target) the node that receives is the final group's new member."""
    moves = [
        HandOver("t0", "a", "a", ReplicaGroup("a", ("c",))),
        HandOver("t1", "b", "b", ReplicaGroup("b", ("c",))),
        HandOver("t2", "b", "b", ReplicaGroup("b", ("d",))),
    ]
    order_moves(moves, Strategy.BATCHED, lambda _m: 10)
    planned = batches(moves)
    assert len(planned) == 2
    for batch in planned:
        receivers = [m.final.replicas[0] for m in batch]
        senders = [m.source for m in batch]
        assert len(set(receivers)) == len(receivers) and len(set(senders)) == len(senders)


def test_a_move_the_controller_cannot_advance_fails_with_the_error_and_the_operation_ends() -> None:
    """An unexpected error while advancing a move is retried, then fails the move: the operation never stays
    running with no thread carrying it out (a hang seen in CI: --wait waited forever)."""

    class RaisingProtocol:  # the protocol's surface Migration uses, failing as a bug or a broken re-plan would
        def decide(self, move: HandOver) -> None:
            pass

        def advance(self, move: HandOver, may_steer: bool) -> None:
            raise RuntimeError("re-plan failed")

        def fail(self, move: HandOver, why: str) -> None:
            move.step, move.error = Step.FAILED, why

    move = primary_move("t", "a", "b")
    migration = Migration(1, "move", Strategy.BATCHED, [move], RaisingProtocol(), [])
    migration.start()
    deadline = time.monotonic() + 30
    while migration.running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not migration.running
    assert move.step is Step.FAILED and "re-plan failed" in move.error
    assert migration.status().state == "failed"


# --------------------------------------------------------------------------------- membership from heartbeats


def store(store_id: str, root: str = ROOT) -> common_pb2.StoreRef:
    operator, partition, name = store_id.split("/")
    suffix = "" if name == "default" else f"/{name}"
    return common_pb2.StoreRef(store_id=store_id, checkpoint_dir=f"{root}/state/{operator}/{partition}{suffix}")


def beat(
    membership: Membership,
    node: str,
    primaries: list[common_pb2.StoreRef] = (),
    replicas: list[common_pb2.StoreRef] = (),
    executor: bool = True,
    opens_ahead: bool = False,
    opened_ahead: list[common_pb2.StoreRef] = (),
) -> None:
    """A heartbeat of `node` (serving Spark executor `node` unless `executor` is false; its executor opening
    copies ahead of moves when `opens_ahead`, those of `opened_ahead` open)."""
    membership.heartbeat(
        control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(
                node_id=node,
                address=f"{node}:1",
                executor_id=node if executor else "",
                executor_host="10.0.0.1" if executor else "",
            ),
            primaries=[control_pb2.PrimaryReport(store=s, version=3) for s in primaries],
            replicas_held=[common_pb2.VersionHeld(store=s, version=3) for s in replicas],
            opens_ahead=opens_ahead,
            opened_ahead=[common_pb2.VersionHeld(store=s, version=3) for s in opened_ahead],
        )
    )


def key(store_id: str, root: str = ROOT) -> str:
    return partition_key(store(store_id, root))


def task(store_id: str, root: str = ROOT) -> str:
    return task_partition_key(store(store_id, root))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def membership(clock: FakeClock) -> Membership:
    """Node a runs partitions 0 and 1 of query ROOT and 0 of OTHER_ROOT; b replicates them; c is idle; d has no
    executor."""
    m = Membership(dead_after=3.0, clock=clock)
    beat_as_before(m)
    return m


def beat_as_before(m: Membership) -> None:
    """The fixture's nodes beat again, reporting what they did."""
    beat(m, "a", primaries=[store("0/0/default"), store("0/1/default"), store("0/0/default", OTHER_ROOT)])
    beat(m, "b", replicas=[store("0/0/default"), store("0/1/default")])
    beat(m, "c")
    beat(m, "d", executor=False)


def refused(call) -> OperationError:
    with pytest.raises(OperationError) as raised:
        call()
    return raised.value


def test_an_unknown_partition_is_refused_naming_the_known_ones(membership: Membership) -> None:
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    error = refused(lambda: operations.resolve_partition("7"))
    assert error.code is grpc.StatusCode.NOT_FOUND
    assert "unknown partition '7'" in str(error)
    assert task("0/0/default") in str(error) and task("0/1/default") in str(error)
    error = refused(lambda: operations.resolve_partition("3/1"))  # partition 1 exists, operator 3 does not
    assert error.code is grpc.StatusCode.NOT_FOUND and "unknown partition '3/1'" in str(error)


def test_an_unknown_partition_on_an_empty_controller_says_none_is_known() -> None:
    empty = Membership(dead_after=3.0, clock=FakeClock())
    error = refused(lambda: Operations(empty, ReplicaGroups(empty, q=1)).resolve_partition("0"))
    assert "no partition yet" in str(error)


def test_a_partition_in_two_queries_asks_for_the_query(membership: Membership) -> None:
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    error = refused(lambda: operations.resolve_partition("0"))
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "several queries" in str(error) and "--query" in str(error)
    assert ROOT in str(error) and OTHER_ROOT in str(error)
    assert operations.resolve_partition("0", query=ROOT) == [task("0/0/default")]
    assert operations.resolve_partition("0/0", query=f"file:{OTHER_ROOT}/") == [task("0/0/default", OTHER_ROOT)]
    assert operations.resolve_partition(" 1 ") == [task("0/1/default")]
    error = refused(lambda: operations.resolve_partition("0", query="/no/such/query"))
    assert error.code is grpc.StatusCode.NOT_FOUND and "in query /no/such/query" in str(error)


@pytest.mark.parametrize("spec", ["", "x", "0/", "/0", "a/1"])
def test_a_partition_spec_of_bad_syntax_says_what_is_expected(membership: Membership, spec: str) -> None:
    error = refused(lambda: Operations(membership, ReplicaGroups(membership, q=1)).resolve_partition(spec))
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "expected PARTITION, OPERATOR/PARTITION or OPERATOR/PARTITION/STORE" in str(error)


def test_executors_are_resolved_with_clear_refusals(membership: Membership, clock: FakeClock) -> None:
    groups = ReplicaGroups(membership, q=1)
    operations = Operations(membership, groups)
    assert operations.resolve_executor("c", for_target=True).node_id == "c"
    error = refused(lambda: operations.resolve_executor("9", for_target=True))
    assert error.code is grpc.StatusCode.NOT_FOUND
    assert "unknown executor '9'" in str(error) and "a (node a)" in str(error) and "? (node d)" in str(error)
    error = refused(lambda: operations.resolve_executor("d", for_target=True))
    assert error.code is grpc.StatusCode.FAILED_PRECONDITION and "no known Spark executor" in str(error)
    assert operations.resolve_executor("d", for_target=False).node_id == "d"  # a source needs none
    groups.drain("c")
    error = refused(lambda: operations.resolve_executor("c", for_target=True))
    assert error.code is grpc.StatusCode.FAILED_PRECONDITION and "is being drained" in str(error)
    clock.now = 10.0
    for node in ("a", "b", "d"):
        beat(membership, node, executor=node != "d")
    error = refused(lambda: operations.resolve_executor("c", for_target=False))
    assert error.code is grpc.StatusCode.FAILED_PRECONDITION and "(node c) is dead" in str(error)


def test_a_move_without_a_spark_driver_is_refused(membership: Membership) -> None:
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    error = refused(lambda: operations.move([PartitionMoveRequest("1", "c")]))
    assert error.code is grpc.StatusCode.FAILED_PRECONDITION and "no Spark driver" in str(error)
    assert refused(lambda: operations.status()).code is grpc.StatusCode.NOT_FOUND  # nothing was started
    error = refused(lambda: operations.move([]))
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    error = refused(lambda: operations.move([PartitionMoveRequest("1", "c")], strategy="sideways"))
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT and "unknown strategy 'sideways'" in str(error)
    # A move to where the partition runs already moves nothing: a note, and no Spark needed.
    status = operations.move([PartitionMoveRequest("1", "a")])
    assert not status.moves and "already on executor a" in status.notes[0]


def test_a_running_move_names_its_partitions_to_its_target_node_only(membership: Membership) -> None:
    """What the controller's heartbeat reply lists as `incoming` (the target's executor opens them ahead)."""
    steered = []
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=steered.append, locate=lambda _steer: ""))
    assert operations.incoming("c") == []
    try:
        status = operations.move([PartitionMoveRequest("1", "c")])
        assert [m.target_node for m in status.moves] == ["c"]
        # c holds no replica: the move warms it up, and c hears of the partition from the start.
        assert operations.incoming("c") == [store("0/1/default")]
        assert operations.incoming("a") == [] and operations.incoming("b") == []
    finally:
        operations.stop()


def warm_move_to_b(membership: Membership, clock: FakeClock) -> tuple[HandOverProtocol, HandOver]:
    """Partition 1's primary move from a to b (its replica holder), taken to step 3 (warm)."""
    groups = ReplicaGroups(membership, q=1)
    levers = SparkLevers(steer=lambda _steer: None, locate=lambda _steer: "")
    protocol = HandOverProtocol(membership, groups, levers, HandOverSettings(open_ahead_wait=3.0), clock, 0.0)
    move = HandOver(task("0/1/default"), "a", "b", ReplicaGroup("b", ("a",)))
    protocol.decide(move)
    protocol.advance(move, may_steer=False)
    assert move.step is Step.WARM
    return protocol, move


def a_ships_partition_1_to_b(membership: Membership) -> None:
    """a's heartbeat: it ships partition 1's increments to b, which acked version 3."""
    shipping = control_pb2.PrimaryReport(
        store=store("0/1/default"), version=3, replicas=[control_pb2.ReplicaProgress(node_id="b", acked_version=3)]
    )
    membership.heartbeat(
        control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(node_id="a", address="a:1", executor_id="a", executor_host="10.0.0.1"),
            primaries=[shipping],
        )
    )


def test_a_moves_partition_keeps_its_replicas_until_the_new_group_is_warm(membership: Membership) -> None:
    """A drain takes b out of every plan as it starts; a move of a later strategy batch warms its new members only
    when its turn comes. Until then the partition keeps b's replica: retiring it at once left the partition with
    no warm copy while the new one caught up."""
    a_ships_partition_1_to_b(membership)
    groups = ReplicaGroups(membership, q=1)
    levers = SparkLevers(steer=lambda _steer: None, locate=lambda _steer: "")
    protocol = HandOverProtocol(membership, groups, levers, HandOverSettings(), FakeClock(), 0.0)
    partition = key("0/1/default")
    move = HandOver(task("0/1/default"), "a", "c", ReplicaGroup("c", ("a",)))  # b leaves the group afterwards
    protocol.decide(move)
    groups.drain("b")  # as a drain of b does once its operation is planned
    assert groups.has_role(partition, "b") is True, "b's replica was retired before the move's warm-up"
    protocol.advance(move, may_steer=False)  # its warm-up starts: the new members join, b stays until the end
    assert set(groups.held(move.task)) == {"a", "b", "c"}
    protocol.fail(move, "the test ends it")
    assert groups.held(move.task) is None and groups.has_role(partition, "b") is False


def test_a_warm_up_that_runs_out_of_time_names_the_node_behind_and_its_role(
    membership: Membership, clock: FakeClock
) -> None:
    groups = ReplicaGroups(membership, q=1)
    levers = SparkLevers(steer=lambda _steer: None, locate=lambda _steer: "")
    protocol = HandOverProtocol(membership, groups, levers, HandOverSettings(warm_up_timeout=5.0), clock, 0.0)
    move = HandOver(task("0/1/default"), "a", "b", ReplicaGroup("b", ("c",)))  # c holds nothing: it stays behind
    protocol.decide(move)
    protocol.advance(move, may_steer=False)
    clock.now = 6.0
    beat_as_before(membership)
    protocol.advance(move, may_steer=False)
    assert move.step is Step.FAILED, move.log
    assert "node c (a replica of the group afterwards) cannot become a replica in time" in move.error, move.error


def test_a_move_ended_before_its_decision_holds_no_group(membership: Membership, clock: FakeClock) -> None:
    """An operation is listed before its moves are decided: Spark's decommission of the target, on another
    thread, can fail a move in between. The decision then held the partition's group, and nothing released it."""
    a_ships_partition_1_to_b(membership)  # a decision holds (a, b)
    groups = ReplicaGroups(membership, q=1)
    protocol = HandOverProtocol(membership, groups, SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""),
                                HandOverSettings(), clock, 0.0)  # fmt: skip
    move = HandOver(task("0/1/default"), "a", "c", ReplicaGroup("c", ("a",)))
    protocol.fail(move, "Spark is decommissioning executor c: the move cannot end there")
    protocol.decide(move)
    assert move.step is Step.FAILED and groups.held(move.task) is None


def test_a_warm_move_whose_targets_copy_is_gone_warms_up_again_instead_of_steering(
    membership: Membership, clock: FakeClock
) -> None:
    """B was warm when checked; before the steer its node restarted at the same address and reports no replica:
    steering then would load cold."""
    steered: list = []
    groups = ReplicaGroups(membership, q=1)
    protocol = HandOverProtocol(membership, groups, SparkLevers(steer=steered.append, locate=lambda _steer: ""),
                                HandOverSettings(), clock, 0.0)  # fmt: skip
    move = HandOver(task("0/1/default"), "a", "b", ReplicaGroup("b", ("a",)))
    protocol.decide(move)
    protocol.advance(move, may_steer=False)
    assert move.step is Step.WARM
    beat(membership, "b")  # the same address, nothing held
    protocol.advance(move, may_steer=True)
    assert move.step is Step.WARMING_UP and not steered, move.log
    assert "fell behind before the steer" in move.log[-1]


def test_a_warm_move_is_steered_once_its_targets_copy_is_opened_ahead(membership: Membership, clock: FakeClock) -> None:
    """Step 3 waits for B's executor to open its copy (B's node reports it), so that b*'s load only catches that
    copy up instead of asking the node inside the moved task."""
    beat(membership, "b", replicas=[store("0/0/default"), store("0/1/default")], opens_ahead=True)
    protocol, move = warm_move_to_b(membership, clock)
    clock.now = 1.0
    assert not protocol.opened_ahead(move)
    beat(membership, "b", replicas=[store("0/0/default"), store("0/1/default")], opens_ahead=True,
         opened_ahead=[store("0/1/default")])  # fmt: skip
    assert protocol.opened_ahead(move) and move.opened_ahead == "open"
    assert "executor b opened its copy ahead of the move" in move.log[-1]


def test_a_move_failed_while_its_copy_opened_ahead_is_checked_stays_failed(
    membership: Membership, clock: FakeClock
) -> None:
    """Another thread (Spark decommissioning the target, the query stopping) fails the move between the check of
    its step and the record of the opened copy: the late record must not bring it back to step 3 and a steer."""
    beat(membership, "b", replicas=[store("0/0/default"), store("0/1/default")], opens_ahead=True,
         opened_ahead=[store("0/1/default")])  # fmt: skip
    protocol, move = warm_move_to_b(membership, clock)
    node = membership.node

    def failed_meanwhile(node_id: str):  # the interleaving: the abandon runs as the target's record is read
        if node_id == "b" and not move.finished:
            protocol.fail(move, "Spark is decommissioning executor b: the move cannot end there")
        return node(node_id)

    membership.node = failed_meanwhile
    protocol.opened_ahead(move)
    assert move.step is Step.FAILED, move.log


def test_a_warm_move_is_steered_without_a_copy_opened_ahead_when_none_comes_in_time(
    membership: Membership, clock: FakeClock
) -> None:
    beat(membership, "b", replicas=[store("0/0/default"), store("0/1/default")], opens_ahead=True)
    protocol, move = warm_move_to_b(membership, clock)
    clock.now = 3.0
    assert not protocol.opened_ahead(move)
    clock.now = 3.5
    assert protocol.opened_ahead(move) and move.opened_ahead == "late"
    assert "did not open its copy of 0/1/default within 3s" in move.log[-1]


def test_a_warm_move_to_an_executor_that_opens_no_copies_ahead_does_not_wait(
    membership: Membership, clock: FakeClock
) -> None:
    protocol, move = warm_move_to_b(membership, clock)  # b's heartbeat says nothing of opening ahead
    assert protocol.opened_ahead(move) and move.opened_ahead == "no"


def test_a_warm_up_does_not_wait_for_a_member_of_the_new_group_that_died(
    membership: Membership, clock: FakeClock
) -> None:
    """The group afterwards keeps b, a replica holder that dies during the warm-up: the move goes on with c (its
    target) warm, instead of waiting out the warm-up's ten minutes for b."""
    groups = ReplicaGroups(membership, q=1)
    levers = SparkLevers(steer=lambda _steer: None, locate=lambda _steer: "")
    protocol = HandOverProtocol(membership, groups, levers, HandOverSettings(), clock, 0.0)
    move = HandOver(task("0/1/default"), "a", "c", ReplicaGroup("c", ("b",)))
    protocol.decide(move)
    protocol.advance(move, may_steer=False)
    assert move.step is Step.WARMING_UP and "node c" in move.waiting_for
    clock.now = 5.0  # b is silent past dead_after; a and c go on, c now holding its copy
    beat(membership, "a", primaries=[store("0/0/default"), store("0/1/default"), store("0/0/default", OTHER_ROOT)])
    beat(membership, "c", replicas=[store("0/1/default")])
    protocol.advance(move, may_steer=False)
    assert move.step is Step.WARM, move.log
    assert any("node b of the group afterwards is lost" in line for line in move.log), move.log


def test_a_move_waits_for_sparks_run_id_of_its_partition_then_fails_naming_it(
    membership: Membership, clock: FakeClock
) -> None:
    """A node restarted since the partition's last commit reports it without Spark's run id (its provider tells
    it at the next commit): the move waits for it, bounded, and fails saying so rather than at once."""
    protocol, move = warm_move_to_b(membership, clock)
    protocol.advance(move, may_steer=True)
    assert move.step is Step.WARM and "Spark's run id and state root of 0/1/default" in move.waiting_for
    clock.now = 61.0
    beat(membership, "a", primaries=[store("0/0/default"), store("0/1/default"), store("0/0/default", OTHER_ROOT)])
    beat(membership, "b", replicas=[store("0/0/default"), store("0/1/default")])
    protocol.advance(move, may_steer=True)
    assert move.step is Step.FAILED and "run id and state root not known within 60s" in move.error


def placed(store_id: str, version: int) -> control_pb2.PrimaryReport:
    return control_pb2.PrimaryReport(
        store=store(store_id), version=version, place=control_pb2.SparkPlace(run_id="run-1", state_root=ROOT)
    )


def heartbeat_b_holding_a_replica(
    membership: Membership, node: str, primaries: Sequence[control_pb2.PrimaryReport] = ()
) -> None:
    """A heartbeat of `node` (its own executor) claiming `primaries`; node b also holds a replica of 0/1 at 3."""
    replicas = [store("0/1/default")] if node == "b" else []
    membership.heartbeat(
        control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(node_id=node, address=f"{node}:1", executor_id=node, executor_host="h"),
            primaries=list(primaries),
            replicas_held=[common_pb2.VersionHeld(store=s, version=3) for s in replicas],
        )
    )


def steered_move_a_to_b(
    clock: FakeClock, steered: list, locate: Callable = lambda _steer: "", **membership_settings: float
) -> tuple[Callable[..., None], HandOverProtocol, HandOver, Membership]:
    """A move of 0/1 from a (primary at version 3) to b (holding a replica), taken to its steer: the heartbeat
    function, the protocol, the move and the membership."""
    membership = Membership(dead_after=3.0, clock=clock, **membership_settings)
    heartbeat = functools.partial(heartbeat_b_holding_a_replica, membership)
    heartbeat("a", [placed("0/1/default", 3)])
    heartbeat("b")
    levers = SparkLevers(steer=steered.append, locate=locate)
    protocol = HandOverProtocol(membership, ReplicaGroups(membership, q=1), levers, HandOverSettings(), clock, 0.0)
    move = HandOver(task("0/1/default"), "a", "b", ReplicaGroup("b", ("a",)))
    protocol.decide(move)
    protocol.advance(move, may_steer=True)
    protocol.advance(move, may_steer=True)
    assert move.step is Step.STEERED and len(steered) == 1
    return heartbeat, protocol, move, membership


def test_a_steered_move_whose_target_dies_steers_the_partition_back_to_its_primary(clock: FakeClock) -> None:
    """B's executor is lost after the steer, before Spark ran the batch there: the move fails, and Spark, steered to
    a dead executor, is steered back to A, which still holds the partition warm. No failover follows B's loss for
    it: B's node was never its primary."""
    steered: list = []
    heartbeat, protocol, move, _ = steered_move_a_to_b(clock, steered)
    clock.now = 5.0  # b falls silent past dead_after; a beats on
    heartbeat("a", [placed("0/1/default", 3)])
    protocol.advance(move, may_steer=True)
    assert move.step is Step.FAILED, move.log
    assert [(s.executor_id, s.node_id) for s in steered] == [("b", "b"), ("a", "a")]
    assert "steered back to executor a (node a)" in move.log[-1]


def test_a_steered_move_of_an_idle_query_fails_saying_when_the_partition_last_committed(clock: FakeClock) -> None:
    steered: list = []
    heartbeat, protocol, move, _ = steered_move_a_to_b(clock, steered)
    idle = placed("0/1/default", 3)
    idle.seconds_since_commit = 301.0
    clock.now = 301.0
    heartbeat("a", [idle])
    heartbeat("b")
    protocol.advance(move, may_steer=True)
    assert move.step is Step.FAILED, move.log
    assert "its last commit was 301s ago" in move.error and "still steered to executor b" in move.error, move.error


def test_a_steered_move_whose_partition_no_node_claims_waits_for_sparks_batch(clock: FakeClock) -> None:
    """Spark's maintenance unloads A's copy after the steer; with no batch for a minute the controller forgets the
    partition. The move waits for Spark's batch (it used to fail on an internal error), and B's load ends it."""
    heartbeat, protocol, move, membership = steered_move_a_to_b(clock, [], forget_after=60.0)
    for now in range(2, 130, 2):  # a unloaded its copy: nobody claims the partition for two minutes
        clock.now = float(now)
        heartbeat("a")
        heartbeat("b")
        protocol.advance(move, may_steer=True)
    assert membership.stores_of_task(move.task) == []
    assert move.step is Step.STEERED and "no node claims it" in move.waiting_for
    heartbeat("b", [placed("0/1/default", 4)])  # Spark ran the batch on b's executor
    protocol.advance(move, may_steer=True)
    assert move.step is Step.PROMOTED, move.log


def test_a_steered_move_whose_source_node_restarts_keeps_waiting_for_sparks_batch(clock: FakeClock) -> None:
    """After the steer, A's node restarts and reports the partition without Spark's run id (its provider tells it
    at the next commit). Checking where Spark ran the partition used to fail the move on that report ("run id and
    state root are not known yet"); the move waits on, and B's batch promotes it."""
    located: list = []
    heartbeat, protocol, move, _ = steered_move_a_to_b(clock, [], lambda steer: located.append(steer) or "")
    # A's node restarted and reports a version committed since the steer, without the run id.
    unplaced = control_pb2.PrimaryReport(store=store("0/1/default"), version=4)
    for now in (1.0, 2.0):
        clock.now = now
        heartbeat("a", [unplaced])
        heartbeat("b")
        protocol.advance(move, may_steer=True)
    assert move.step is Step.STEERED, move.error
    assert "Spark to run a batch of the partition on executor b" in move.waiting_for and not located
    heartbeat("b", [placed("0/1/default", 5)])  # Spark ran the next batch on b's executor
    protocol.advance(move, may_steer=True)
    assert move.step is Step.PROMOTED, move.log


def test_a_move_whose_new_primary_is_lost_after_the_promotion_ends_without_waiting_on_a(clock: FakeClock) -> None:
    """B is killed right after its promotion (the partition fails over, maybe back to A). The move's last step
    waited the whole settle_timeout (3 minutes) for A to unload a copy Spark may use again; it ends once B is
    known dead, saying so."""
    heartbeat, protocol, move, _ = steered_move_a_to_b(clock, [])
    heartbeat("b", [placed("0/1/default", 4)])  # Spark ran the batch on b's executor
    protocol.advance(move, may_steer=True)
    assert move.step is Step.PROMOTED, move.log
    stale = placed("0/1/default", 3)
    clock.now = stale.seconds_since_commit = 2.0
    heartbeat("a", [stale])  # a still has its copy loaded: the move waits for it to unload
    protocol.advance(move, may_steer=True)
    assert move.step is Step.PROMOTED and "to unload its copy" in move.waiting_for
    clock.now = stale.seconds_since_commit = 4.0  # b is killed: no heartbeat for over dead_after
    heartbeat("a", [stale])
    protocol.advance(move, may_steer=True)
    assert move.step is Step.DONE, move.waiting_for
    assert move.source_after == "left as it is: the new primary's node b was lost after the promotion"


def test_a_stopped_querys_moves_end_at_once_and_its_primaries_stay(clock: FakeClock) -> None:
    """The driver's listener says a query run stopped: its partitions' moves end saying so, instead of waiting
    five minutes for a batch that will not come, and later commands leave their primaries where they are."""
    membership = Membership(dead_after=3.0, clock=clock)
    for node, primaries, replicas in (("a", [placed("0/1/default", 3)], []), ("b", [], [store("0/1/default")])):
        membership.heartbeat(
            control_pb2.HeartbeatRequest(
                node=control_pb2.NodeRef(node_id=node, address=f"{node}:1", executor_id=node, executor_host="h"),
                primaries=primaries,
                replicas_held=[common_pb2.VersionHeld(store=s, version=3) for s in replicas],
            )
        )
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        started = operations.move([PartitionMoveRequest("1", "b")])
        assert operations.query_stopped("run-1") == 1
        ended = wait_until_ended(operations, started.operation_id)
        assert ended.state == "failed" and "its query stopped (run run-1)" in ended.moves[0].error, ended
        again = operations.move([PartitionMoveRequest("1", "b")])
        assert not again.moves and "its query is stopped" in again.notes[0], again
        for number in range(200):  # runs of other queries stop: those that placed nothing left are not kept
            operations.query_stopped(f"other-run-{number}")
        assert len(operations._stopped_runs) <= 65, len(operations._stopped_runs)
        still = operations.move([PartitionMoveRequest("1", "b")])
        assert not still.moves and "its query is stopped" in still.notes[0], still
    finally:
        operations.stop()


def wait_until_ended(operations: Operations, operation_id: int) -> control_pb2.OperationStatus:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status = operations.status(operation_id)
        if status.state not in ("running", "queued"):
            return status
        time.sleep(0.05)
    raise AssertionError(f"operation {operation_id} still running: {operations.status(operation_id)}")


# ------------------------------------------------------------------------------------------ replica groups


def test_hold_fixes_a_group_until_release(membership: Membership) -> None:
    groups = ReplicaGroups(membership, q=1)
    partition, t = key("0/1/default"), task("0/1/default")
    planned = groups.choose_replica_group(partition, "a")
    assert len(planned) == 1 and planned[0] in ("b", "c", "d")
    groups.hold(t, ("a", "c", "d"))  # the old and the new members while the move runs
    assert groups.held(t) == ("a", "c", "d")
    assert groups.choose_replica_group(partition, "a") == ["c", "d"]  # more than q while held
    assert groups.choose_replica_group(partition, "c") == ["a", "d"]  # the new primary keeps the old one
    assert groups.has_role(partition, "d") is True and groups.has_role(partition, "b") is False
    other = key("0/1/other")  # another store of the same task partition is held with it
    assert groups.choose_replica_group(other, "a") == ["c", "d"]
    groups.release(t)
    assert groups.held(t) is None
    assert groups.choose_replica_group(partition, "a") == planned


def test_adopt_makes_a_target_the_plan_in_force(membership: Membership) -> None:
    groups = ReplicaGroups(membership, q=1)
    partition, t = key("0/0/default"), task("0/0/default")
    before = groups.choose_replica_group(partition, "a")
    wanted = "c" if before != ["c"] else "b"
    groups.adopt({t: ReplicaGroup("a", (wanted,))})
    assert groups.choose_replica_group(partition, "a") == [wanted]
    assert groups.has_role(partition, wanted) is True
    groups.adopt({t: ReplicaGroup("a", ("b", "c"))})  # not q replicas: ignored
    assert groups.choose_replica_group(partition, "a") == [wanted]
    groups.adopt({"9/9@/nowhere": ReplicaGroup("a", ("b",))})  # not placed: ignored
    assert groups.has_role(key("9/9/default", "/nowhere"), "a") is None


def test_a_drained_node_leaves_every_group_at_once_and_is_not_treated_as_lost(
    membership: Membership, clock: FakeClock
) -> None:
    """Re-replication waits after a loss; a drain is no loss: its roles are placed elsewhere at once."""
    groups = ReplicaGroups(membership, q=1, rereplication_delay=30.0)
    partitions = [key("0/0/default"), key("0/1/default"), key("0/0/default", OTHER_ROOT)]
    assert groups.current().note == ""
    holders = {node for p in partitions for node in groups.choose_replica_group(p, "a")}
    drained = sorted(holders)[0]
    groups.drain(drained)
    assert groups.draining() == frozenset({drained})
    plan = groups.current()
    assert plan.note == "" and plan.lost == frozenset(), plan.note
    for p in partitions:
        replicas = groups.choose_replica_group(p, "a")
        assert len(replicas) == 1 and drained not in replicas
        assert groups.has_role(p, drained) is False
    # A node that stops heartbeating is a loss: its roles stay empty while re-replication waits.
    lost = next(n for p in partitions for n in groups.choose_replica_group(p, "a"))
    clock.now = 5.0
    for node in {"a", "b", "c", "d"} - {lost}:
        beat(
            membership,
            node,
            primaries=[store("0/0/default"), store("0/1/default"), store("0/0/default", OTHER_ROOT)]
            if node == "a"
            else [],
            executor=node != "d",
        )
    plan = groups.current()
    assert lost in plan.lost and "waits" in plan.note, plan.note


def test_a_command_given_while_another_runs_is_queued_and_planned_when_its_turn_comes(
    membership: Membership, clock: FakeClock
) -> None:
    """Not refused: queued behind the running operation, listed with what it waits for, and planned only when its
    turn comes (a drain marks its executor then, not before: moves to it were refused for the rest of a run)."""
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        first = operations.move([PartitionMoveRequest("1", "c")])  # c holds nothing: it warms up, and runs on
        # The running move says what it waits for: c, which holds nothing, to catch up.
        waiting = wait_until(lambda: operations.status(first.operation_id).moves[0].waiting_for)
        assert waiting.startswith("node c (0/1/default at none of 3)") and " to catch up; " in waiting, waiting
        assert waiting.endswith(" s left"), waiting
        queued = operations.drain("b")
        assert queued.state == "queued" and queued.operation_id == first.operation_id + 1, queued
        assert queued.notes == [f"queued behind operation {first.operation_id}: planned and started when it ends"]
        assert "b" not in operations.draining()
        assert operations.resolve_executor("b", for_target=True).node_id == "b"
        # Names and strategies are checked at once, not when the turn comes.
        error = refused(lambda: operations.drain("a", strategy="sideways"))
        assert error.code is grpc.StatusCode.INVALID_ARGUMENT and "a" not in operations.draining()
        error = refused(lambda: operations.drain("9"))
        assert error.code is grpc.StatusCode.NOT_FOUND
        # The running move's target dies: the move fails with the reason, and the queued drain starts.
        clock.now = 10.0
        for node in ("a", "b", "d"):  # a and d are left for the primaries and their replicas once b is drained
            beat(membership, node, executor=node != "d")
        ended = wait_until(
            lambda: operations.status(first.operation_id).state == "failed" and operations.status(first.operation_id)
        )
        assert ended.moves[0].error == "target executor c (node c) lost at step warming up", ended
        assert not ended.moves[0].waiting_for
        started = wait_until(
            lambda: operations.status(queued.operation_id).state != "queued" and operations.status(queued.operation_id)
        )
        assert started.kind == "drain" and "b" in operations.draining(), started
    finally:
        operations.stop()


def test_a_drain_that_would_leave_too_few_executors_for_the_replicas_is_refused_naming_them(
    membership: Membership,
) -> None:
    """Drained executors stay out of every plan: with q=1 and c and d drained, draining b would leave one executor
    for each partition's primary and its replica, and the groups short until an executor is added."""
    groups = ReplicaGroups(membership, q=1)
    operations = Operations(membership, groups)
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        groups.drain("c")  # as a drain of c does when it starts
        groups.drain("d")
        error = refused(lambda: operations.drain("b"))
        assert error.code is grpc.StatusCode.FAILED_PRECONDITION, error
        expected = "1 executor(s) would be left to hold each partition's primary and its 1 replica(s), which needs 2"
        assert expected in str(error)
        assert "add an executor first" in str(error)
    finally:
        operations.stop()


def test_nodes_drained_before_and_now_dead_do_not_count_against_a_drain(
    membership: Membership, clock: FakeClock
) -> None:
    """Executors Spark decommissioned earlier stay marked as drained: they are gone, not among those left. With a,
    b, c and d live and three dead nodes drained before, draining b leaves three, enough for q=1."""
    groups = ReplicaGroups(membership, q=1)
    operations = Operations(membership, groups)
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        for gone in ("x", "y", "z"):
            beat(membership, gone)
            groups.drain(gone)
        clock.now = 10.0  # x, y and z fall silent: dead
        beat_as_before(membership)
        started = operations.drain("b")
        assert started.state != "failed" and not started.error, started
    finally:
        operations.stop()


def test_a_node_the_membership_forgot_leaves_the_draining_set(membership: Membership, clock: FakeClock) -> None:
    groups = ReplicaGroups(membership, q=1)
    beat(membership, "x")
    groups.drain("x")
    groups.current()
    assert "x" in groups.draining()
    clock.now = 10.0 + membership.dead_after + membership.forget_after  # x is dropped; the others beat on
    beat_as_before(membership)
    groups.current()
    assert "x" not in groups.draining()


def test_an_operation_the_controller_stopped_before_its_moves_ended_is_stopped_not_done(
    membership: Membership,
) -> None:
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    started = operations.move([PartitionMoveRequest("1", "c")])  # c holds nothing: its warm-up waits
    assert wait_until(lambda: operations.status(started.operation_id).moves[0].step == "warming up")
    operations.stop()
    ended = wait_until(
        lambda: operations.status(started.operation_id).state != "running" and operations.status(started.operation_id)
    )
    assert ended.state == "stopped", ended


def test_a_move_whose_target_node_restarts_ends_at_once_naming_it(membership: Membership) -> None:
    """A target whose state node came back as a new process (at another address: its copies are gone) is not
    waited for until the warm-up's time limit: the move fails at the next tick, saying why."""
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        started = operations.move([PartitionMoveRequest("1", "c")])
        assert wait_until(lambda: operations.status(started.operation_id).moves[0].step == "warming up")
        membership.register(control_pb2.NodeRef(node_id="c", address="c:2", executor_id="c", executor_host="host-c"))
        failed = wait_until(
            lambda: (
                operations.status(started.operation_id).state == "failed" and operations.status(started.operation_id)
            )
        )
        assert failed.moves[0].error == (
            "the state node of target executor c (node c) restarted at step warming up: the copy it was given is "
            "gone (move it again)"
        ), failed
    finally:
        operations.stop()


def test_a_queued_command_that_can_no_longer_be_planned_ends_failed_with_the_reason(
    membership: Membership, clock: FakeClock
) -> None:
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        first = operations.move([PartitionMoveRequest("1", "c")])
        queued = operations.move([PartitionMoveRequest("0", "c", ROOT)])  # to the same target, behind the first
        assert queued.state == "queued"
        clock.now = 10.0  # c dies before the queued move's turn
        for node in ("a", "b"):
            beat(membership, node)
        wait_until(lambda: operations.status(first.operation_id).state == "failed")
        failed = wait_until(
            lambda: operations.status(queued.operation_id).state == "failed" and operations.status(queued.operation_id)
        )
        assert failed.error.startswith("could not be planned when its turn came: executor 'c' (node c) is dead"), failed
        assert not operations.running
    finally:
        operations.stop()


def test_drain_refuses_to_leave_no_live_executor() -> None:
    m = Membership(dead_after=3.0, clock=FakeClock())
    beat(m, "a", primaries=[store("0/0/default")])
    error = refused(lambda: Operations(m, ReplicaGroups(m, q=1)).drain("a"))
    assert error.code is grpc.StatusCode.FAILED_PRECONDITION and "no other live executor" in str(error)


# ------------------------------------------------------------------------------------------------- the CLI


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "statestore.cli", *args], capture_output=True, text=True, timeout=120)


def test_cli_rebalance_dry_run_on_an_empty_controller_notes_it_and_succeeds(controller: Controller) -> None:
    result = run_cli("rebalance", "--dry-run", "--controller", f"127.0.0.1:{controller.port}")
    assert result.returncode == 0, result.stderr
    assert "rebalance (batched), planned, 0 move(s)" in result.stdout
    assert "note: no partition is placed yet" in result.stdout


def test_cli_move_names_what_is_unknown(controller: Controller) -> None:
    address = f"127.0.0.1:{controller.port}"
    result = run_cli("move", "0", "--to", "9", "--controller", address)
    assert result.returncode == 1
    assert "statestore move: move: unknown executor '9': the controller knows none" in result.stderr
    beat(controller.membership, "a", primaries=[store("0/0/default")])
    beat(controller.membership, "b")
    result = run_cli("move", "5", "--to", "b", "--controller", address)
    assert result.returncode == 1
    assert f"unknown partition '5': the controller knows {task('0/0/default')}" in result.stderr
    result = run_cli("move", "0", "--to", "9", "--controller", address)
    assert result.returncode == 1 and "a (node a), b (node b)" in result.stderr
    result = run_cli("move", "0", "--to", "b", "--controller", address)
    assert result.returncode == 1 and "no Spark driver" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_says_when_the_controller_is_unreachable() -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run_cli("drain", "1", "--controller", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert f"controller 127.0.0.1:{port} unreachable" in result.stderr
    assert "Traceback" not in result.stderr


# ------------------------------------------------------------------------------- Spark decommissions an executor


def wait_until(condition, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)
    return found


def test_executors_decommissioned_in_one_event_are_drained_together_and_never_to_each_other(
    membership: Membership,
) -> None:
    """Dynamic allocation scales a and b down at once. Drained one by one, a's partitions went to b, its replica
    holder, not yet known to be going, and b's drain then waited behind a's while b exited: one drain of both, with
    neither as a target."""
    place = control_pb2.SparkPlace(run_id="0b5e8d7c-1f2a-4c3b-9d8e-7f6a5b4c3d2e", state_root=f"{ROOT}/state")
    membership.heartbeat(
        control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(node_id="a", address="a:1", executor_id="a", executor_host="10.0.0.1"),
            primaries=[control_pb2.PrimaryReport(store=store("0/1/default"), version=3, place=place)],
        )
    )
    groups = ReplicaGroups(membership, q=1)
    operations = Operations(membership, groups)
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        answers = operations.decommissioning_all(["a", "b"])
        assert answers["a"] and answers["a"] == answers["b"], answers
        assert groups.draining() >= {"a", "b"}
        status = operations.status(answers["a"])
        assert status.moves and all(m.target_node not in ("a", "b") for m in status.moves), status
    finally:
        operations.stop()


def test_a_decommissioning_executor_is_drained_at_once_to_its_replica_holders(membership: Membership) -> None:
    """Spark decommissions executor a (it runs no new task and exits once idle): every primary with a replica
    holder is steered there at once, without waiting for the group's new replicas, and a's node leaves every
    plan; when a is then removed, failover leaves the steered partitions to the hand-over."""
    place = control_pb2.SparkPlace(run_id="0b5e8d7c-1f2a-4c3b-9d8e-7f6a5b4c3d2e", state_root=f"{ROOT}/state")
    membership.heartbeat(
        control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(node_id="a", address="a:1", executor_id="a", executor_host="10.0.0.1"),
            primaries=[
                control_pb2.PrimaryReport(store=s, version=3, place=place)
                for s in (store("0/0/default"), store("0/1/default"), store("0/0/default", OTHER_ROOT))
            ],
        )
    )
    steered: list = []
    groups = ReplicaGroups(membership, q=1)
    operations = Operations(membership, groups)
    operations.attach_spark(SparkLevers(steer=steered.append, locate=lambda _steer: ""))
    try:
        operation_id = operations.decommissioning("a")
        assert operation_id
        assert operations.decommissioning("a") == operation_id  # polled again: the same drain
        assert groups.draining() == frozenset({"a"})
        handed = {task("0/0/default"), task("0/1/default")}  # b holds both; nobody holds OTHER_ROOT's
        wait_until(lambda: operations.steered_from("a") == handed)
        assert {(s.store.checkpoint_dir, s.executor_id) for s in steered} == {
            (store("0/0/default").checkpoint_dir, "b"),
            (store("0/1/default").checkpoint_dir, "b"),
        }
        status = operations.status(operation_id)
        assert status.kind == "decommission" and status.strategy == "all-at-once" and status.state == "running"
        assert "Spark is decommissioning executor a" in status.notes[0]
        assert any("no live replica holder" in note for note in status.notes), status.notes
        assert all(m.source_node == "a" and m.target_node != "a" for m in status.moves)
        shown = format_status(control_pb2.StatusReply(operations=[status]))
        assert "decommission (all-at-once), running" in shown and "why: Spark is decommissioning executor a" in shown
        decisions = Failover(membership).executor_lost("a", steered.append, skip=operations.steered_from("a"))
        assert all(task_partition_key(d.store) not in handed for d in decisions)
    finally:
        operations.stop()


def test_an_executor_decommissioned_while_a_drain_runs_joins_it(membership: Membership) -> None:
    """Dynamic allocation scales a down, then b a few seconds later, while a's drain (whose moves go to b, the
    replica holder) still waits for Spark's next batch. b exits about a second after its last task: its drain
    cannot wait for a's to end. It joins a's operation: the moves to b fail, and a's partitions and b's get moves
    to the nodes left, in the same operation."""
    beat(membership, "e")
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        first = operations.decommissioning("a")
        assert first
        to_b = {m.partition for m in operations.status(first).moves if m.target_node == "b"}
        assert to_b == {task("0/0/default"), task("0/1/default")}
        assert operations.decommissioning("b") == first  # joined, not "call again"
        assert {"a", "b"} <= operations.draining()
        # Failed at once, or before the operation's next step if one was under way (Migration._when_idle).
        status = wait_until(
            lambda: all(m.step == "failed" for m in operations.status(first).moves if m.target_node == "b")
            and operations.status(first)
        )
        failed = [m for m in status.moves if m.target_node == "b"]
        assert failed and all("decommissioning executor b" in m.error for m in failed)
        live = [m for m in status.moves if m.step != "failed"]
        assert {m.partition for m in live} >= to_b, status
        assert all(m.target_node not in ("a", "b") for m in live), status
        assert any("executor b (node b)" in note for note in status.notes)
        assert operations.decommissioning("b") == first  # polled again: the same drain
    finally:
        operations.stop()


def test_spark_events_do_not_wait_for_a_steer_stuck_on_the_driver(membership: Membership) -> None:
    """A step of an operation waits on the driver's steer RPC (up to its deadline when the driver is slow). Spark's
    next decommission event, on the thread that watches the driver's executors, must not wait with it: its
    requests are run before the operation's next step."""
    import threading

    steering, release = threading.Event(), threading.Event()

    def stuck_steer(_steer: object) -> None:
        steering.set()
        release.wait(30)

    beat(membership, "e")
    place = control_pb2.SparkPlace(run_id="0b5e8d7c-1f2a-4c3b-9d8e-7f6a5b4c3d2e", state_root=f"{ROOT}/state")
    membership.heartbeat(  # a's partitions as Spark placed them: steerable
        control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(node_id="a", address="a:1", executor_id="a", executor_host="10.0.0.1"),
            primaries=[control_pb2.PrimaryReport(store=store(s), version=3, place=place)
                       for s in ("0/0/default", "0/1/default")],
        )
    )  # fmt: skip
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=stuck_steer, locate=lambda _steer: ""))
    try:
        first = operations.decommissioning("a")
        assert steering.wait(10), "the drain steered nothing"
        answered: list[int | None] = []
        event = threading.Thread(target=lambda: answered.append(operations.decommissioning("b")))
        event.start()
        event.join(timeout=5)
        assert answered == [first], "the event waited for the steer stuck on the driver"
        release.set()
        wait_until(lambda: all(m.step == "failed" for m in operations.status(first).moves if m.target_node == "b"))
    finally:
        release.set()
        operations.stop()


def test_a_decommission_met_while_its_node_is_silent_is_asked_again(membership: Membership, clock: FakeClock) -> None:
    """The node of the executor Spark decommissions missed heartbeats past dead_after (a pause): "nothing to
    drain" (0) was final, and the executor exited undrained once its node was back. It is asked again instead."""
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        clock.now = 5.0  # past dead_after (3 s): every node silent
        beat(membership, "b", replicas=[store("0/0/default"), store("0/1/default")])
        beat(membership, "c")
        assert operations.decommissioning("a") is None
        beat_as_before(membership)  # a is back
        assert operations.decommissioning("a")
        assert operations.decommissioning("nobody") == 0  # no state node at all: nothing to drain, for good
    finally:
        operations.stop()


def test_a_decommission_judges_its_moves_against_the_primaries_it_chose_its_pins_from(membership: Membership) -> None:
    """Reports that move a primary arrive while the drain is planned (a partition of the decommissioned a is now
    c's, as a hand-over just finished might report): the drain's moves still start on a, the node its pins
    were chosen for, never on a node that is not being decommissioned (an elastic run once handed a partition over
    from the node that had just received it)."""
    groups = ReplicaGroups(membership, q=1)
    planned = groups.target

    def target_after_a_late_report(*args: object, **kwargs: object) -> object:
        beat(membership, "a", primaries=[store("0/0/default"), store("0/0/default", OTHER_ROOT)])
        beat(membership, "c", primaries=[store("0/1/default")])
        return planned(*args, **kwargs)

    groups.target = target_after_a_late_report  # type: ignore[method-assign]
    operations = Operations(membership, groups)
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        operation_id = operations.decommissioning("a")
        assert operation_id
        status = operations.status(operation_id)
        moved = [m for m in status.moves if m.source_node != m.target_node]
        assert moved and all(m.source_node == "a" for m in moved), status
    finally:
        operations.stop()


def test_a_move_to_a_decommissioning_executor_fails_and_its_drain_joins_the_operation(
    membership: Membership,
) -> None:
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        move = operations.move([PartitionMoveRequest("1", "c")])  # c holds nothing: it warms up first
        # c exits about a second after its last task: its drain joins the running operation, not after it.
        assert operations.decommissioning("c") == move.operation_id
        assert "c" in operations.draining()
        failed = wait_until(
            lambda: operations.status(move.operation_id).state == "failed" and operations.status(move.operation_id)
        )
        assert "Spark is decommissioning executor c" in failed.moves[0].error
        assert any("executor c (node c)" in note for note in failed.notes)
    finally:
        operations.stop()


def test_a_decommission_during_a_balance_moves_the_executors_partitions_at_once(membership: Membership) -> None:
    """The load-balancing policy's operation moves a's partition 1 to c (c warms up first); Spark decommissions a.
    The balance's move off a, not steered yet, fails and a's partitions get urgent moves to their freshest replica
    holder, in the same operation: waiting for the balance to end, a exited and its partitions failed over."""
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        balance = operations.move([PartitionMoveRequest("1", "c")])  # as a balance: a running operation
        assert operations.decommissioning("a") == balance.operation_id
        status = wait_until(
            lambda: (s := operations.status(balance.operation_id))
            and any(m.target_node == "c" and m.step == "failed" for m in s.moves)
            and s
        )
        urgent = [m for m in status.moves if m.source_node == "a" and m.step != "failed"]
        assert {m.partition for m in urgent} >= {task("0/0/default"), task("0/1/default")}, status
        assert all(m.target_node == "b" for m in urgent if m.partition != task("0/0/default", OTHER_ROOT))
    finally:
        operations.stop()


def test_waiting_for_an_operation_ends_at_its_timeout_naming_it() -> None:
    """`spark_provider.move(wait=True)` never waits forever on an operation the controller does not end."""
    from spark_provider import move

    server = Controller("127.0.0.1:0", dead_after=600.0, forget_after=600.0)
    server.start()
    try:
        beat(server.membership, "a", primaries=[store("0/0/default"), store("0/1/default")])
        beat(server.membership, "b", replicas=[store("0/0/default"), store("0/1/default")])
        beat(server.membership, "c")
        server.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
        # c holds nothing and no node runs to bootstrap it: the move stays warming up.
        with pytest.raises(TimeoutError, match=r"operation 1 \(move\) still running after 0.5s: `statestore status`"):
            move({"1": "c"}, controller=f"127.0.0.1:{server.port}", timeout=0.5)
    finally:
        server.stop(grace=0.5)


def test_an_adopted_group_naming_a_node_that_died_during_the_move_is_placed_again(
    membership: Membership, clock: FakeClock
) -> None:
    """A move's final group is adopted when it promotes; a member that died during its warm-up (re-replication had
    re-planned before) would otherwise stay in the plan, the partition without a live replica, until some other
    change came."""
    groups = ReplicaGroups(membership, q=1, rereplication_delay=0.0)
    partition, t = key("0/0/default"), task("0/0/default")
    groups.choose_replica_group(partition, "a")
    clock.now += 4.0  # c dies (silent past dead_after); the others beat
    beat(membership, "a", primaries=[store("0/0/default"), store("0/1/default"), store("0/0/default", OTHER_ROOT)])
    beat(membership, "b", replicas=[store("0/0/default"), store("0/1/default")])
    beat(membership, "d", executor=False)
    assert "c" not in groups.choose_replica_group(partition, "a")  # the loss re-planned
    groups.adopt({t: ReplicaGroup("a", ("c",))})  # the move's target group, c in it
    assert groups.choose_replica_group(partition, "a") in (["b"], ["d"])
