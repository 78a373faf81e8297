"""The fault suite's matrix: each scenario disturbs one running query once (or twice at once), in one place.

A scenario's `inject` runs after the query is warm (three batches, every partition's replica at its primary's
version) and before the suite feeds it three more batches; `heal` (if any) runs `heal_after` seconds later,
while they run. Fault points are armed through the faults file every process reads (`statestore.faults.points`,
the provider's `Faults.java`), one shot each; where a point is reached only on a failover (a node's
`materialize` and `promote`) or a bootstrap (`bootstrap-serve`), the scenario also causes one. Paused processes
are resumed by the suite after `Rig.pause_seconds`.

Hand-over scenarios (`handover_scenarios.py`) start a move of partition 0 and kill its source or target at one of
the protocol's steps; sync scenarios run the query with sync replication.

`QUICK` names the representative subset `statestore faults --quick` runs (and CI with it): a kill of an executor
JVM at a commit, a kill of a state node as it applies an increment, a cut controller link, two faults at once, a
move's target killed once steered, and (sync mode) an executor killed after its replica acked.
"""

from __future__ import annotations

from spark_provider.fault_suite import handover_scenarios
from spark_provider.fault_suite.rig import Rig
from spark_provider.fault_suite.scenario import PARTITION, Inject, Scenario
from spark_provider.fault_suite.suite_query import SuiteQuery

# Past the nodes' bootstrap gap (16 versions): a replica lost whole is bootstrapped from a snapshot.
BOOTSTRAP_WARM_BATCHES = 18


def _arm(line: str) -> Inject:
    def inject(rig: Rig, query: SuiteQuery) -> None:
        rig.arm(line)

    return inject


def _kill_busiest_executor(rig: Rig, query: SuiteQuery) -> None:
    rig.kill_executor(rig.busiest(query))


def _arm_then_fail_over(line: str) -> Inject:
    """Arm `line`, then kill the executor primary of most partitions: the next batch loads its partitions from
    their replica holders' nodes (materialize, promote)."""

    def inject(rig: Rig, query: SuiteQuery) -> None:
        rig.arm(line)
        _kill_busiest_executor(rig, query)

    return inject


def _kill_node(role: str, empty: bool = False, line: str = "") -> Inject:
    """SIGKILL the state node of partition 0's primary or of its replica holder (`role`), maybe emptying its
    directory; `line` is armed first (a point the restarted node's bootstrap reaches, on the serving node)."""

    def inject(rig: Rig, query: SuiteQuery) -> None:
        if line:
            rig.arm(line)
        if role == "primary":
            node = rig.primary_of(query, PARTITION)
        else:
            holders = rig.replica_holders(query, PARTITION)
            if not holders:
                raise LookupError("partition 0 has no replica holder")
            node = holders[0]
        rig.kill_node(node, empty=empty)

    return inject


def _replica_disk_full(rig: Rig, query: SuiteQuery) -> None:
    """The node holding partition 0's replica restarted on a disk with 32 KiB left."""
    holders = rig.replica_holders(query, PARTITION)
    if not holders:
        raise LookupError("partition 0 has no replica holder")
    rig.fill_disk(holders[0])


def _lagging_replica_fails_over(point: str) -> Inject:
    """Arm `<point> kill 0`, slow every link into the nodes by 3 s, run one batch and kill the executor primary of
    partition 0 at once: its replica holder's copy lacks the last increment (still on the slow link), so the load
    that fails the partition over reads it from the checkpoint location (`last-increment`) and, with partial
    merge, applies it under the batch's writes (`last-increment-apply`), where the armed point kills again."""

    def inject(rig: Rig, query: SuiteQuery) -> None:
        rig.arm(f"{point} kill 0")
        rig.set_links("delay 3000")
        query.feed(1)
        if not query.wait_processed(120):
            raise RuntimeError(f"the batch before the kill did not end: {query.failure() or 'timeout'}")
        rig.kill_executor(rig.primary_of(query, PARTITION))

    return inject


def _two_at_once(rig: Rig, query: SuiteQuery) -> None:
    """The executor primary of partition 0 and the node holding partition 0's replica, killed together."""
    primary = rig.primary_of(query, PARTITION)
    holders = [h for h in rig.replica_holders(query, PARTITION) if h != primary]
    rig.kill_executor(primary)
    for holder in holders:
        rig.kill_node(holder)


def _corrupt_last_increment_then_fail_over(rig: Rig, query: SuiteQuery) -> None:
    """Flip bytes in the middle of partition 0's latest increment in the checkpoint location, then kill its
    executor: the load that follows must not take the corrupted file for state."""
    store = query.checkpoint / "state" / "0" / str(PARTITION)
    increments = sorted(store.glob("*.increment"), key=lambda p: int(p.name.split(".")[0]))
    if not increments:
        raise LookupError(f"no increment in {store}")
    path = increments[-1]
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for i in range(middle, min(middle + 16, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    rig.kill_executor(rig.primary_of(query, PARTITION))


def _proxy(kind: str, millis: int = 0, every: int = 1) -> Inject:
    def inject(rig: Rig, query: SuiteQuery) -> None:
        rig.proxy.set(kind, millis=millis, every=every)

    return inject


def _heal_proxy(rig: Rig) -> None:
    rig.proxy.set("pass")


def _links(line: str) -> Inject:
    def inject(rig: Rig, query: SuiteQuery) -> None:
        rig.set_links(line)

    return inject


def _heal_links(rig: Rig) -> None:
    rig.set_links("pass")


def _matrix() -> list[Scenario]:
    executor_points = ("load", "commit", "committed")
    found = []
    for point in executor_points:
        found.append(
            Scenario(
                f"executor-kill-at-{point}", "kill -9", f"executor JVM at {point}", _arm(f"{point} kill 0"), armed=True
            )
        )
    for point in executor_points:
        found.append(
            Scenario(
                f"executor-raise-at-{point}", "error", f"executor JVM at {point}", _arm(f"{point} raise 0"), armed=True
            )
        )
    found += [
        Scenario(
            "executor-delay-at-commit", "delay 3 s", "executor JVM at commit", _arm("commit delay 3000 0"), armed=True
        ),
        Scenario("executor-pause-at-commit", "pause 6 s", "executor JVM at commit", _arm("commit pause 0"), armed=True),
        *(
            Scenario(
                f"executor-kill-at-{point}",
                "kill -9 + executor kill",
                f"executor JVM at {point} (failover from a replica one increment behind)",
                _lagging_replica_fails_over(point),
                heal=_heal_links,
                heal_after=10,
                armed=True,
            )
            for point in ("last-increment", "last-increment-apply")
        ),
        Scenario(
            "executor-kill-between-batches",
            "kill -9",
            "executor JVM (busiest), between batches",
            _kill_busiest_executor,
        ),
    ]
    for point, actions in (
        ("ship", ("kill", "raise", "pause", "delay")),
        ("apply", ("kill", "raise", "pause")),
        ("applied", ("kill", "delay")),
    ):
        for action in actions:
            line = f"{point} {action} 2000 0" if action == "delay" else f"{point} {action} 0"
            fault = {"kill": "kill -9", "raise": "error", "pause": "pause 6 s", "delay": "delay 2 s"}[action]
            found.append(Scenario(f"node-{action}-at-{point}", fault, f"state node at {point}", _arm(line), armed=True))
    for point in ("materialize", "promote"):
        for action in ("kill", "raise"):
            fault = "kill -9" if action == "kill" else "error"
            found.append(
                Scenario(
                    f"node-{action}-at-{point}",
                    f"{fault} + executor kill",
                    f"state node at {point} (failover)",
                    _arm_then_fail_over(f"{point} {action}"),
                    armed=True,
                )
            )
    for action in ("kill", "raise"):
        fault = "kill -9" if action == "kill" else "error"
        found.append(
            Scenario(
                f"node-{action}-at-bootstrap-serve",
                f"{fault} + empty node",
                "state node at bootstrap-serve",
                _kill_node("replica", empty=True, line=f"bootstrap-serve {action}"),
                armed=True,
                warm_batches=BOOTSTRAP_WARM_BATCHES,
            )
        )
    found += [
        Scenario(
            "controller-raise-at-heartbeat", "error", "controller at heartbeat", _arm("heartbeat raise"), armed=True
        ),
        Scenario(
            "controller-delay-at-heartbeat",
            "delay 4 s",
            "controller at heartbeat",
            _arm("heartbeat delay 4000"),
            armed=True,
        ),
        Scenario("node-kill-primary", "kill -9", "state node of a primary, between batches", _kill_node("primary")),
        Scenario("node-kill-replica", "kill -9", "state node of a replica, between batches", _kill_node("replica")),
        Scenario(
            "node-restart-empty",
            "kill -9 + empty directory",
            "state node of a replica",
            _kill_node("replica", empty=True),
            warm_batches=BOOTSTRAP_WARM_BATCHES,
        ),
        *(
            Scenario(
                f"controller-link-{name}",
                fault,
                "every node's link to the controller",
                _proxy(kind, millis=millis, every=every),
                heal=_heal_proxy,
                heal_after=heal,
            )
            for name, fault, kind, millis, every, heal in (
                ("cut", "cut 10 s", "cut", 0, 1, 10),
                ("drop", "black hole 10 s", "drop", 0, 1, 10),
                ("delay", "delay 300 ms", "delay", 300, 1, 15),
                ("corrupt", "corrupt every 3rd chunk", "corrupt", 0, 3, 10),
                ("duplicate", "duplicate every 5th chunk", "duplicate", 0, 5, 10),
                ("reorder", "reorder every 4th chunk", "reorder", 0, 4, 10),
            )
        ),
        *(
            Scenario(
                f"replication-link-{name}",
                fault,
                "every link into a state node (replication, pulls)",
                _links(line),
                heal=_heal_links,
                heal_after=heal,
            )
            for name, fault, line, heal in (
                ("cut", "cut 10 s", "cut", 10),
                ("drop", "black hole 10 s", "drop", 10),
                ("delay", "delay 300 ms", "delay 300", 15),
                ("corrupt", "corrupt every 3rd chunk", "corrupt 3", 10),
                ("duplicate", "duplicate every 5th chunk", "duplicate 5", 10),
                ("reorder", "reorder every 4th chunk", "reorder 4", 10),
            )
        ),
        Scenario(
            "replica-disk-full",
            "disk full (32 KiB left)",
            "state node of a replica",
            _replica_disk_full,
            took_effect=Rig.disk_full_hit,
        ),
        Scenario(
            "corrupt-increment",
            "bytes flipped + executor kill",
            "latest increment in the checkpoint location",
            _corrupt_last_increment_then_fail_over,
            may_refuse=".increment",
        ),
        Scenario(
            "executor-and-replica-node",
            "kill -9 of both",
            "executor JVM and its partitions' replica node",
            _two_at_once,
        ),
    ]
    return found


_SINGLE_FAULTS = _matrix()
MATRIX: list[Scenario] = [
    *_SINGLE_FAULTS,
    *handover_scenarios.matrix(),
    *handover_scenarios.sync_matrix(_SINGLE_FAULTS),
]
QUICK = (
    "executor-kill-at-commit",
    "node-kill-at-apply",
    "controller-link-cut",
    "executor-and-replica-node",
    "handover-kill-target-at-steer",
    "executor-kill-at-acked-sync",
)
BY_NAME = {s.name: s for s in MATRIX}
