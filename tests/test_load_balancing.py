"""Load balancing's pieces without Spark: primaries balanced by load inside their replica groups
(`placement.primaries.balance_primaries_by_load`), executors' loads from the nodes' load reports
(`statestore.controller.load`), and the policy (`statestore.controller.load_balancer`): imbalance counted over
batches in a row, an operation started (or only planned in dry-run mode) that says why, a cooldown after it, and
nothing done when no role swap would help."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_node_harness import FakeClock

from handover.handover import SparkLevers
from placement import Placement, ReplicaGroup
from placement.primaries import balance_primaries_by_load, move_primaries_to_lighter_nodes
from statestore.cluster.membership import Membership
from statestore.controller.load import executor_loads, task_loads
from statestore.controller.load_balancer import BalancerSettings, LoadBalancer
from statestore.controller.operations import Operations
from statestore.controller.replica_groups import ReplicaGroups
from statestore.controller.status import build_status, format_status
from statestore.partition_key import task_partition_key
from statestore.rpc import common_pb2, control_pb2

ROOT = "/data/q/checkpoint"


# ------------------------------------------------------------------------------ balance_primaries_by_load


def busiest(placement: Placement, loads: dict[str, float], cores: dict[str, int]) -> float:
    per_node: dict[str, float] = {}
    for partition, group in placement.items():
        per_node[group.primary] = per_node.get(group.primary, 0.0) + loads.get(partition, 0.0)
    return max((v / cores.get(n, 1) for n, v in per_node.items()), default=0.0)


def test_a_hot_partition_is_handed_to_its_replica_and_cold_ones_stay() -> None:
    placement = Placement(
        {
            "hot": ReplicaGroup("a", ("b",)),
            "warm": ReplicaGroup("a", ("c",)),
            "cold": ReplicaGroup("b", ("a",)),
        }
    )
    loads = {"hot": 900.0, "warm": 300.0, "cold": 100.0}
    after, swapped = balance_primaries_by_load(placement, loads, {})
    # a ran 1200 ms per batch; handing "hot" to b gives a 300, b 1000; handing "warm" to c gives a 900: better.
    assert swapped == ["warm"] and after["warm"] == ReplicaGroup("c", ("a",))
    assert busiest(after, loads, {}) == 900.0
    assert {p: set(g.nodes) for p, g in after.items()} == {p: set(g.nodes) for p, g in placement.items()}


def test_cores_count_and_fixed_partitions_keep_their_primary() -> None:
    placement = Placement({"p1": ReplicaGroup("a", ("b",)), "p2": ReplicaGroup("a", ("b",))})
    loads = {"p1": 400.0, "p2": 400.0}
    # b has 4 cores: both fit there better than on a's one.
    after, swapped = balance_primaries_by_load(placement, loads, {"a": 1, "b": 4})
    assert sorted(swapped) == ["p1", "p2"] and all(g.primary == "b" for g in after.values())
    after, swapped = balance_primaries_by_load(placement, loads, {"a": 1, "b": 4}, fixed=frozenset({"p1"}))
    assert swapped == ["p2"] and after["p1"].primary == "a"
    after, swapped = balance_primaries_by_load(placement, loads, {"a": 1, "b": 4}, max_swaps=1)
    assert len(swapped) == 1


@st.composite
def loaded_placements(draw: st.DrawFn) -> tuple[Placement, dict[str, float], dict[str, int]]:
    nodes = [f"n{i}" for i in range(draw(st.integers(2, 5)))]
    replicas = draw(st.integers(1, len(nodes) - 1))
    groups, loads = {}, {}
    for i in range(draw(st.integers(0, 12))):
        members = draw(st.permutations(nodes))[: replicas + 1]
        groups[f"p{i:02d}"] = ReplicaGroup(members[0], tuple(members[1:]))
        loads[f"p{i:02d}"] = float(draw(st.integers(0, 1000)))
    cores = {n: draw(st.integers(1, 4)) for n in nodes}
    return Placement(groups), loads, cores


@settings(max_examples=150, deadline=None)
@given(case=loaded_placements())
def test_balancing_by_load_keeps_groups_and_never_raises_the_busiest(
    case: tuple[Placement, dict[str, float], dict[str, int]],
) -> None:
    placement, loads, cores = case
    after, swapped = balance_primaries_by_load(placement, loads, cores)
    assert {p: set(g.nodes) for p, g in after.items()} == {p: set(g.nodes) for p, g in placement.items()}
    assert busiest(after, loads, cores) <= busiest(placement, loads, cores) + 1e-9
    assert {p for p in placement if after[p].primary != placement[p].primary} <= set(swapped)
    assert balance_primaries_by_load(placement, loads, cores) == (after, swapped)


def test_an_idle_node_outside_every_group_takes_the_hottest_primaries_it_can() -> None:
    placement = Placement(
        {
            "p0": ReplicaGroup("a", ("b",)),
            "p1": ReplicaGroup("a", ("b",)),
            "p2": ReplicaGroup("b", ("a",)),
            "p3": ReplicaGroup("b", ("a",)),
        }
    )
    loads = {"p0": 500.0, "p1": 300.0, "p2": 400.0, "p3": 300.0}
    cores = {"a": 1, "b": 1, "c": 1}  # c joined: it holds nothing yet
    after, moved = move_primaries_to_lighter_nodes(placement, loads, cores, max_moves=2)
    # a runs 800, b 700: p0 goes to c (a 300, c 500); then b is the busiest, and neither of its partitions
    # would leave c below b's 700: one move only.
    assert moved == ["p0"] and after["p0"] == ReplicaGroup("c", ("a",))
    assert busiest(after, loads, cores) < busiest(placement, loads, cores)
    assert all(after[p] == placement[p] for p in placement if p not in moved)
    assert move_primaries_to_lighter_nodes(placement, loads, cores, fixed=frozenset({"p0", "p1", "p2", "p3"}))[1] == []


# -------------------------------------------------------------------------------- executors' load, policy


def store(partition: int, name: str = "default") -> common_pb2.StoreRef:
    suffix = "" if name == "default" else f"/{name}"
    return common_pb2.StoreRef(store_id=f"0/{partition}/{name}", checkpoint_dir=f"{ROOT}/state/0/{partition}{suffix}")


def beat(
    membership: Membership,
    node: str,
    primaries: list[tuple[common_pb2.StoreRef, float]] = (),
    replicas: list[common_pb2.StoreRef] = (),
    version: int = 3,
    cores: int = 1,
) -> None:
    """A heartbeat of `node` (Spark executor `node`), primary of `primaries` (store, task ms per batch)."""
    reports = []
    for s, millis in primaries:
        report = control_pb2.PrimaryReport(store=s, version=version)
        report.load.CopyFrom(control_pb2.PartitionLoad(task_millis=millis, rows_written=10, batches=8))
        reports.append(report)
    membership.heartbeat(
        control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(
                node_id=node, address=f"{node}:1", executor_id=node, executor_host="10.0.0.1", executor_cores=cores
            ),
            primaries=reports,
            replicas_held=[common_pb2.VersionHeld(store=s, version=version) for s in replicas],
        )
    )


def test_an_executors_load_sums_its_task_partitions_and_a_joins_stores_count_once() -> None:
    membership = Membership(dead_after=3.0, clock=FakeClock())
    join = [(store(0, n), 100.0 + i) for i, n in enumerate(["left-a", "left-b", "right-a", "right-b"])]
    beat(membership, "a", [*join, (store(1), 50.0)], cores=2)
    beat(membership, "b")
    tasks = task_loads(membership)
    assert tasks[task_partition_key(store(0, "left-a"))] == 103.0  # the largest of the task's four stores
    loads = executor_loads(membership)
    assert loads["a"].millis == 153.0 and loads["a"].per_core == 76.5
    assert loads["b"].millis == 0.0 and loads["b"].tasks == {}  # an idle executor counts: load should go there
    reply = build_status(membership, ReplicaGroups(membership, q=1), 1)
    nodes = {n.node.node_id: n for n in reply.nodes}
    assert nodes["a"].load_millis == 153.0 and nodes["a"].node.executor_cores == 2
    shown = format_status(reply)
    assert "load/batch" in shown and "153 ms (76 ms/core)" in shown and "task/batch" in shown


class Cluster:
    """Nodes a, b, c: a is primary of partitions 0-3 (0 and 1 hot), each partition's replica on b or c."""

    def __init__(self) -> None:
        self.membership = Membership(dead_after=30.0, clock=FakeClock())
        self.operations = Operations(self.membership, ReplicaGroups(self.membership, q=1))
        self.steered: list[object] = []
        self.operations.attach_spark(SparkLevers(steer=self.steered.append, locate=lambda _steer: ""))
        self.version = 3

    def batch(self, loads: dict[int, float]) -> None:
        """One more micro-batch committed everywhere, with these task times on a."""
        self.version += 1
        beat(self.membership, "a", [(store(p), ms) for p, ms in loads.items()], version=self.version)
        beat(self.membership, "b", replicas=[store(0), store(2)], version=self.version)
        beat(self.membership, "c", replicas=[store(1), store(3)], version=self.version)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    yield c
    c.operations.stop()


HOT = {0: 800.0, 1: 800.0, 2: 50.0, 3: 50.0}


def test_an_executor_busy_for_batches_in_a_row_gets_its_hot_partitions_handed_over(cluster: Cluster) -> None:
    balancer = LoadBalancer(cluster.membership, cluster.operations, BalancerSettings(mode="on", batches=3))
    actions = []
    for _ in range(3):
        cluster.batch(HOT)
        verdict = balancer.look()
        assert verdict is not None and verdict.busiest == "a" and verdict.ratio > 1.5
        actions.append(verdict.action)
    assert actions == ["wait", "wait", "started 2"], actions
    assert balancer.look() is None  # no new batch: nothing counted
    status = cluster.operations.status()
    assert status.kind == "balance" and status.strategy == "batched"
    assert sorted((m.source_node, m.target_node) for m in status.moves) == [("a", "b"), ("a", "c")]
    assert {m.partition.split("@")[0] for m in status.moves} == {"0/0", "0/1"}
    why = [n for n in status.notes if n.startswith("automatic load balancing")]
    assert why and "executor a (node a)" in why[0] and "3 batches in a row" in why[0]
    assert any("load balancing: 800 ms per batch moves from node a" in line for m in status.moves for line in m.log)
    # While it runs, and for the cooldown after, nothing more is started however skewed the reports.
    for _ in range(5):
        cluster.batch(HOT)
        assert balancer.look().action == "cooldown"
    reply = build_status(cluster.membership, ReplicaGroups(cluster.membership, q=1), 1)
    reply.operations.extend(cluster.operations.recent())
    assert "why: automatic load balancing" in format_status(reply)


def test_dry_run_only_plans_the_moves_and_says_why(cluster: Cluster) -> None:
    balancer = LoadBalancer(cluster.membership, cluster.operations, BalancerSettings(mode="dry-run", batches=2))
    cluster.batch(HOT)
    assert balancer.look().action == "wait"
    cluster.batch(HOT)
    assert balancer.look().action == "planned 2"
    status = cluster.operations.status()
    assert status.state == "planned" and len(status.moves) == 2 and not cluster.steered
    assert any(n.startswith("automatic load balancing") for n in status.notes)
    assert not cluster.operations.running


def test_a_hot_spot_no_role_swap_can_fix_is_not_chased(cluster: Cluster) -> None:
    """One partition carries all the load: handing it over would only move the hot spot."""
    balancer = LoadBalancer(cluster.membership, cluster.operations, BalancerSettings(mode="on", batches=1))
    cluster.batch({0: 800.0, 1: 0.0, 2: 0.0, 3: 0.0})
    assert balancer.look().action == "no gain"
    assert cluster.operations.recent() == []


def test_executors_within_the_factor_are_left_alone() -> None:
    membership = Membership(dead_after=30.0, clock=FakeClock())
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    balancer = LoadBalancer(membership, operations, BalancerSettings(mode="on", batches=1))
    for version in (4, 5, 6):
        beat(membership, "a", [(store(0), 300.0), (store(1), 200.0)], replicas=[store(2)], version=version)
        beat(membership, "b", [(store(2), 350.0)], replicas=[store(0), store(1)], version=version)
        verdict = balancer.look()
        assert verdict.action == "" and verdict.busiest == "a" and verdict.ratio == pytest.approx(500 / 425)
    assert operations.recent() == []


def test_an_executor_that_joins_takes_primaries_after_warming_up_their_replicas() -> None:
    """Scale-out: a third executor joins a balanced pair; no role swap can reach it, so the policy moves
    primaries to it with a warm-up each (the hand-over's step 2 bootstraps it)."""
    membership = Membership(dead_after=30.0, clock=FakeClock())
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    balancer = LoadBalancer(membership, operations, BalancerSettings(mode="on", batches=2, max_moves=1))
    try:
        for v in (4, 5):
            beat(membership, "a", [(store(0), 400.0), (store(1), 400.0)], replicas=[store(2), store(3)], version=v)
            beat(membership, "b", [(store(2), 400.0), (store(3), 400.0)], replicas=[store(0), store(1)], version=v)
            beat(membership, "c", version=v)
            verdict = balancer.look()
        # 1.5x the mean is not over the factor (1.5): an executor that runs nothing while others run two task
        # partitions counts as imbalance by itself.
        assert verdict.action == "started 1" and verdict.ratio == pytest.approx(800 / (1600 / 3))
        status = operations.status()
        (moved,) = status.moves
        assert moved.target_node == "c" and moved.source_node in ("a", "b")
        assert "warming up" in "\n".join(moved.log) or moved.step in ("decided", "warming up"), moved
    finally:
        operations.stop()


def test_bad_settings_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="mode 'sometimes'"):
        BalancerSettings(mode="sometimes")
    with pytest.raises(ValueError, match=r"imbalance factor 0\.9"):
        BalancerSettings(imbalance_factor=0.9)


def test_a_query_idle_at_a_higher_version_does_not_silence_the_policy(cluster: Cluster) -> None:
    """A batch was the highest version any primary reported: while a query at version 50,000 stayed idle (or
    stopped), no batch of another query counted, and the policy looked at nothing, saying nothing."""
    other = common_pb2.StoreRef(store_id="0/0/default", checkpoint_dir="/data/idle/checkpoint/state/0/0")
    beat(cluster.membership, "d", [(other, 10.0)], version=50_000)
    balancer = LoadBalancer(cluster.membership, cluster.operations, BalancerSettings(mode="on", batches=2))
    actions = []
    for _ in range(2):
        cluster.batch(HOT)
        verdict = balancer.look()
        assert verdict is not None, "the idle query's version hid this batch"
        actions.append(verdict.action)
    assert actions[0] == "wait" and actions[1].startswith("started"), actions
    assert balancer.look() is None  # nothing committed since: no batch


def test_an_executor_whose_cores_are_not_known_yet_counts_as_the_largest() -> None:
    """A node learns its executor's cores from its first stateful task, which Spark never sends to a new executor
    (it runs tasks where their state is). Counted as one core, no move to it ever looked like a gain."""
    membership = Membership(dead_after=30.0, clock=FakeClock())
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    balancer = LoadBalancer(membership, operations, BalancerSettings(mode="on", batches=1, max_moves=1))
    try:
        a_tasks = [(store(p), 100.0) for p in range(4)]
        b_tasks = [(store(p), 100.0) for p in range(4, 8)]
        beat(membership, "a", a_tasks, replicas=[s for s, _ in b_tasks], version=4, cores=4)
        beat(membership, "b", b_tasks, replicas=[s for s, _ in a_tasks], version=4, cores=4)
        beat(membership, "c", version=4, cores=0)  # joined: cores not known yet
        assert executor_loads(membership)["c"].cores == 4
        verdict = balancer.look()
        assert verdict is not None and verdict.action == "started 1", verdict
        (moved,) = operations.status().moves
        assert moved.target_node == "c"
    finally:
        operations.stop()


def test_a_stopped_querys_load_is_not_balanced() -> None:
    """Its partitions stay known for a while after it stops: their load is no executor's any more, no move is
    planned for them, and an operation with no move is not started."""
    membership = Membership(dead_after=30.0, clock=FakeClock())
    place = control_pb2.SparkPlace(run_id="run-1", state_root=f"{ROOT}/state")
    reports = []
    for p in (0, 1):
        report = control_pb2.PrimaryReport(store=store(p), version=4, place=place)
        report.load.CopyFrom(control_pb2.PartitionLoad(task_millis=900.0, rows_written=10, batches=8))
        reports.append(report)
    membership.heartbeat(
        control_pb2.HeartbeatRequest(
            node=control_pb2.NodeRef(node_id="a", address="a:1", executor_id="a", executor_host="h"),
            primaries=reports,
        )
    )
    beat(membership, "b", replicas=[store(0), store(1)], version=4)
    operations = Operations(membership, ReplicaGroups(membership, q=1))
    operations.attach_spark(SparkLevers(steer=lambda _steer: None, locate=lambda _steer: ""))
    try:
        operations.query_stopped("run-1")
        loads = task_loads(membership)
        cores = {n: e.cores for n, e in executor_loads(membership).items()}
        assert operations.balance_load(loads, cores, ["test"], max_moves=2) is None
        assert operations.recent() == []
    finally:
        operations.stop()


def test_dry_runs_do_not_push_the_operations_carried_out_out_of_the_list(cluster: Cluster) -> None:
    """In dry-run mode the policy plans an operation every few batches: one dry run at most is kept among the
    operations listed, so the moves, drains and decommissions carried out stay there."""
    from statestore.controller.operations import PartitionMoveRequest

    cluster.batch(HOT)
    moved = cluster.operations.move([PartitionMoveRequest("1", "c")])
    for _ in range(12):
        cluster.operations.rebalance(dry_run=True)
    assert cluster.operations.status(moved.operation_id).operation_id == moved.operation_id
    assert sum(o.state == "planned" for o in cluster.operations.recent()) == 1
