"""Elastic stateful streaming under a real query: local-cluster[3,1,1024] with Spark's dynamic allocation (two
executors at first, at most three), q=1, `load_balancing="on"`, a skewed aggregation (most keys in two of the
four partitions). One application, three phases, the same query throughout:

1. **Skew**: every primary crowded onto one executor by an operator's move; the controller's policy alone spreads
   them out again by hand-overs to replicas, and `statestore status` says why.
2. **Scale-out**: a neighbour job's backlog makes dynamic allocation add a third executor during the query
   (between its micro-batches); it receives a replica first (the hand-over's warm-up), then primaries, by the
   policy.
3. **Scale-in**: Spark decommissions the busiest executor gracefully; the driver's JVM reports it and the
   controller drains it before it exits: when Spark reports it removed, failover finds nothing of it to do.

No partition of ours loads from the checkpoint location after the warm-up, and every batch's output equals
Spark's RocksDB provider on the same input."""

from __future__ import annotations

import random
import socket
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_failover_spark import EVENTS, SPARK_CONF
from test_failover_spark_harness import RecordedQuery, aggregation, assert_same_batches, reference_outputs, wait_for
from test_handover_spark import assert_moves_loaded_from_replicas, assert_no_checkpoint_loads, feeding, task_of
from test_replica_groups_spark_harness import (
    SHUFFLE_PARTITIONS,
    controller_address,
    primaries,
    process_argv,
    replica_cluster,
    run_statestore_status,
    sidecar_pids,
    status,
)

from spark_provider import move
from statestore.rpc import control_pb2

HOT_PARTITIONS = {0, 1}
# Dynamic allocation starts two one-core executors and may add a third when tasks wait: only the neighbour
# job's (a stream's micro-batch waits far less than the backlog timeout). An executor with no task would be
# removed after its idle timeout: long enough here for the policy to give the new one primaries.
ELASTIC_CONF = {
    **SPARK_CONF,
    "spark.dynamicAllocation.enabled": "true",
    "spark.dynamicAllocation.minExecutors": "2",
    "spark.dynamicAllocation.initialExecutors": "2",
    "spark.dynamicAllocation.maxExecutors": "3",
    "spark.dynamicAllocation.schedulerBacklogTimeout": "5s",
    "spark.dynamicAllocation.executorIdleTimeout": "300s",
    "spark.executor.cores": "1",
    "spark.decommission.enabled": "true",
}
NEIGHBOUR_TASKS, NEIGHBOUR_TASK_SECONDS = 4, 8


def partitions_of(spark: Any, keys: list[str]) -> dict[str, int]:
    """The shuffle partition of each key, as the aggregation's exchange computes it (Murmur3 `hash`, pmod)."""
    frame = spark.createDataFrame([(k,) for k in keys], "k string")
    rows = frame.selectExpr("k", f"pmod(hash(k), {SHUFFLE_PARTITIONS}) AS p").collect()
    return {row["k"]: row["p"] for row in rows}


def skewed_rows(spark: Any, per_batch: int) -> Callable[[str, int], list[dict]]:
    """Rows whose keys are in the hot partitions four times out of five."""
    partition = partitions_of(spark, [f"key{i:06d}" for i in range(4000)])
    hot = sorted(k for k, p in partition.items() if p in HOT_PARTITIONS)
    cold = sorted(k for k, p in partition.items() if p not in HOT_PARTITIONS)

    def rows(name: str, index: int) -> list[dict]:
        rng = random.Random(f"{name}-{index}-skewed")
        return [
            {"k": rng.choice(hot if rng.random() < 0.8 else cold), "v": rng.randrange(1000)} for _ in range(per_batch)
        ]

    return rows


def operations(address: str) -> list[control_pb2.OperationStatus]:
    return list(status(address).operations)


def executor_ids(spark: Any) -> set[str]:
    """The executors Spark's scheduler has now (the driver is not one of them)."""
    listed = str(spark.sparkContext._jsc.sc().getExecutorIds().mkString(","))
    return set(filter(None, listed.split(",")))


def live_nodes(address: str) -> dict[str, str]:
    """Node id -> executor id of every live node."""
    return {n.node.node_id: n.node.executor_id for n in status(address).nodes if n.alive}


def done_after(address: str, kind: str, after: int, accept: Callable[[Any], bool] = lambda _o: True) -> Any:
    """The first operation of `kind` started after operation `after`, done, that `accept` takes (else None)."""
    return next(
        (
            o
            for o in operations(address)
            if o.kind == kind and o.operation_id > after and o.state == "done" and accept(o)
        ),
        None,
    )


def while_running(query: RecordedQuery, condition: Callable[[], Any]) -> Callable[[], Any]:
    """`condition`, failing at once when the query failed or died meanwhile (not after the wait's timeout)."""

    def check() -> Any:
        query.raise_if_failed()
        return condition()

    return check


def neighbour_job(spark: Any) -> threading.Thread:
    """Another job of the application whose tasks wait for slots long enough for dynamic allocation to add an
    executor (a batch report, a backfill): started on a thread of its own."""

    def run() -> None:
        spark.sparkContext.parallelize(range(NEIGHBOUR_TASKS), NEIGHBOUR_TASKS).map(
            lambda x: time.sleep(NEIGHBOUR_TASK_SECONDS) or x
        ).count()

    thread = threading.Thread(target=run, name="neighbour-job", daemon=True)
    thread.start()
    return thread


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scraped(port: int) -> dict[str, float]:
    """The controller's Prometheus figures (statestore.controller.metrics), by series."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        name: float(value)
        for name, _, value in (line.rpartition(" ") for line in text.splitlines() if line and line[0] != "#")
    }


def decommission(spark: Any, executor_id: str) -> None:
    """Spark's graceful decommission of one executor, as dynamic allocation's scale-down or a decommissioned
    worker starts it (no replacement is asked for)."""
    jvm = spark.sparkContext._jvm
    info = jvm.org.apache.spark.scheduler.ExecutorDecommissionInfo("test scale-in", jvm.scala.Option.empty())
    backend = spark.sparkContext._jsc.sc().schedulerBackend()
    assert backend.decommissionExecutor(executor_id, info, True, False), f"Spark refused to decommission {executor_id}"


def test_skew_scale_out_and_scale_in_under_one_query_move_no_state_through_the_checkpoint(tmp_path: Path) -> None:
    with replica_cluster(
        tmp_path,
        1,
        "elastic",
        spark_conf=ELASTIC_CONF,
        load_balancing="on",
        load_balancing_batches=3,
        warm_up_mb_per_second=48,
        metrics_port=(metrics_port := free_port()),
        # A stage submitted before the drain's steer keeps the decommissioned executor as its tasks' preferred
        # location, and Spark stops counting a decommissioned executor alive for locality (`isExecutorAlive`): its
        # pending tasks then run at once on any executor of the host. On one that holds no replica (a CI run: 1 of 4
        # partitions) the load fetches a peer's copy with this setting; with `auto` on a local checkpoint it would
        # read the checkpoint location. Either way it is exact; this test is about no state through the checkpoint.
        peer_fetch="always",
    ) as spark:
        query = RecordedQuery(spark, tmp_path / "agg", EVENTS, aggregation, "update", skewed_rows(spark, 6000))
        try:
            query.feed(2)
            query.start("statestore")
            query.wait_processed()
            address = controller_address(spark)
            wait_for(lambda: len(live_nodes(address)) == 2, 60, "a live node per executor")
            for pid in sidecar_pids(tmp_path).values():  # the warm-up throttle reaches every state node
                argv = process_argv(pid) or []
                assert argv[argv.index("--bootstrap-mb-per-second") + 1] == "48.0", argv
            query.feed(1)
            query.wait_processed()
            warm_batch = query.last_batch_id()
            assert len(executor_ids(spark)) == 2, executor_ids(spark)
            with feeding([query]):
                # 1. Skew: let the policy finish with the first layout, then crowd every primary onto one
                # executor, as an operator (or Spark's own scheduling) could; the policy spreads them again.
                wait_for(lambda: not any(o.state == "running" for o in operations(address)), 180, "no operation")
                crowded = Counter(primaries(status(address), query).values()).most_common(1)[0][0]
                tasks = sorted({task_of(s) for s in primaries(status(address), query)})
                crowd = move(dict.fromkeys(tasks, live_nodes(address)[crowded]), controller=address)
                assert crowd.state == "done", crowd
                assert set(primaries(status(address), query).values()) == {crowded}
                spread = wait_for(
                    while_running(query, lambda: done_after(address, "balance", crowd.operation_id)),
                    240,
                    "the policy to spread the skew",
                )
                assert_moves_loaded_from_replicas(spread)
                assert spread.moves and all(m.source_node == crowded for m in spread.moves), spread
                assert any(note.startswith("automatic load balancing: executor") for note in spread.notes), spread
                shown = run_statestore_status(address)
                assert "why: automatic load balancing" in shown and "load/batch" in shown
                assert all(p.load.batches > 0 for p in status(address).partitions), status(address).partitions
                wait_for(lambda: not any(o.state == "running" for o in operations(address)), 180, "no operation")

            # 2. Scale-out: dynamic allocation adds an executor for the neighbour job's waiting tasks. The query
            # runs on, between micro-batches meanwhile: a micro-batch waiting behind the neighbour's tasks longer
            # than Spark's locality wait would be run by Spark on the new executor, which holds nothing yet (a
            # load from a peer with `peer_fetch`, else from the checkpoint location). Then the policy gives the new
            # executor primaries, each warmed up as a replica first.
            before = set(live_nodes(address))
            neighbour_job(spark).join(180)
            joined = wait_for(lambda: set(live_nodes(address)) - before, 60, "a third executor's node")
            (new_node,) = joined
            with feeding([query]):
                scaled_out = wait_for(
                    while_running(
                        query,
                        lambda: done_after(
                            address,
                            "balance",
                            spread.operation_id,
                            lambda o: new_node in {m.target_node for m in o.moves},
                        ),
                    ),
                    240,
                    "the policy to hand primaries to the new executor",
                )
                assert_moves_loaded_from_replicas(scaled_out)
                for moved in (m for m in scaled_out.moves if m.target_node == new_node):
                    log = "\n".join(moved.log)
                    assert "warming up" in log and log.index("warm:") < log.index("promoted:"), log
                assert new_node in primaries(status(address), query).values()

                # 3. Scale-in: Spark decommissions the busiest executor; it is drained before it exits.
                wait_for(lambda: not any(o.state == "running" for o in operations(address)), 180, "no operation")
                victim = Counter(primaries(status(address), query).values()).most_common(1)[0][0]
                victim_executor = live_nodes(address)[victim]
                latest = max(o.operation_id for o in operations(address))
                before = scraped(metrics_port)
                removals_before = before["statestore_failovers_total"]
                decommission(spark, victim_executor)
                drained = wait_for(
                    while_running(query, lambda: done_after(address, "decommission", latest)),
                    120,
                    "the decommissioned executor's drain",
                )
                wait_for(lambda: victim_executor not in executor_ids(spark), 60, "Spark to remove the executor")
                # Spark's removal event reached the controller (its metrics count it)...
                removal = wait_for(
                    lambda: (m := scraped(metrics_port))["statestore_failovers_total"] > removals_before and m,
                    30,
                    "Spark's removal event at the controller",
                )
            assert drained.strategy == "all-at-once" and "Spark is decommissioning executor" in drained.notes[0]
            assert_moves_loaded_from_replicas(drained)
            assert {m.source_node for m in drained.moves if m.source_node != m.target_node} == {victim}, drained
            # Drained before it exited: when Spark reported it removed (the event may come twice), no partition of
            # it was left to fail over.
            # ...with nothing of it left to fail over: it was drained before it exited.
            assert removal["statestore_failover_partitions_total"] == before["statestore_failover_partitions_total"], (
                before,
                removal,
            )
            assert victim not in primaries(status(address), query).values()
            query.feed(1)
            query.wait_processed()
            assert_no_checkpoint_loads(query, warm_batch)
        finally:
            query.stop()
        assert_same_batches(query.results(), reference_outputs(query, tmp_path / "reference"))
