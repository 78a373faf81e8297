"""Planned hand-overs on real Spark: local-cluster with three executor JVMs, each starting its state node, and
the operator's `move`, `rebalance` (each strategy) and `drain` under running queries fed one file per
micro-batch. Every moved partition loads from its new executor's replica (the provider's load source metrics and
the controller's record say so), never from the checkpoint location; the old primary keeps a replica or drops
it as planned; replicas are identical to primaries once quiet; and every batch's output equals Spark's RocksDB
provider's on the same input (or an exact recomputation for the join). A drained executor is then killed, and no
partition reloads from the checkpoint location."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from test_failover_spark import EVENTS, SIDED_EVENTS, SPARK_CONF, warm
from test_failover_spark_harness import (
    RecordedQuery,
    aggregation,
    assert_same_batches,
    checkpoint_load_lines,
    inner_join,
    inner_join_outputs,
    keyed_rows,
    reference_outputs,
    sided_rows,
    wait_for,
)
from test_replica_groups_spark_harness import (
    assert_replicas_identical,
    primaries,
    replica_cluster,
    replicas_by_partition,
    run_statestore_status,
    status,
    wait_converged,
)

import spark_provider
from spark_provider import move, rebalance
from spark_provider.local_cluster import kill_executor
from spark_provider.progress import load_sources
from statestore.controller.client import ControlClient


@contextlib.contextmanager
def feeding(queries: list[RecordedQuery]) -> Iterator[None]:
    """Feed each query its next file whenever it processed the last one (a steady stream of micro-batches)."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            for query in queries:
                with contextlib.suppress(Exception):  # the main thread sees a failed query
                    if query.processed() >= query.fed:
                        query.feed(1)
            stop.wait(0.2)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)
    for query in queries:
        query.wait_processed()


def task_of(store_id: str) -> str:
    """`OPERATOR/PARTITION` of a store id."""
    return "/".join(store_id.split("/")[:2])


def executors_by_node(address: str) -> dict[str, str]:
    return {n.node.node_id: n.node.executor_id for n in status(address).nodes if n.alive}


def assert_moves_loaded_from_replicas(operation: object) -> None:
    assert operation.state == "done", operation
    for moved in operation.moves:
        if moved.source_node != moved.target_node:
            assert moved.load_source in ("replica", "local"), moved  # "local": its own directory, caught up
            assert moved.effective_version > 0 and moved.attempts >= 1, moved


def checkpoint_loads_logged(spark: object) -> list[str]:
    """`checkpoint_load_lines`, each with why every source was passed over first, one per line: a CI log cuts
    long lines short."""
    lines = []
    for line in checkpoint_load_lines(spark):
        executor, _, text = line.partition(": ")
        head, _, passed = text.partition(" (passed over: ")
        reasons = "\n    ".join(passed.rstrip(")").split("; "))
        lines.append(f"{executor}:\n    {reasons}\n  {head.split('statestore: ')[-1]}")
    return lines


def assert_no_checkpoint_loads(query: RecordedQuery, after_batch: int) -> None:
    """No batch after `after_batch` loaded any store from the checkpoint location."""
    for progress in query.query.recentProgress:
        if progress["batchId"] > after_batch and progress["numInputRows"] > 0:
            sources = load_sources(progress)
            assert sources["checkpoint"] == 0, "\n".join(
                [f"batch {progress['batchId']}: {sources}", *checkpoint_loads_logged(query.spark)]
            )


def test_move_and_every_rebalance_strategy_under_an_aggregation(tmp_path: Path) -> None:
    with replica_cluster(tmp_path, 1, "handover-agg", spark_conf=SPARK_CONF) as spark:
        query = RecordedQuery(spark, tmp_path / "agg", EVENTS, aggregation, "update", keyed_rows(3000, 2000))
        try:
            address = warm(spark, [query], 1)
            warm_batch = query.last_batch_id()
            reply = status(address)
            store_id = sorted(primaries(reply, query))[0]
            source = primaries(reply, query)[store_id]
            target = next(iter(replicas_by_partition(reply, query)[store_id]))
            executor = executors_by_node(address)[target]

            # `statestore move` as an operator types it, followed with --wait, with the application's secret in a
            # file (as a notebook shows it: the session's conf).
            secret_file = tmp_path / "secret"
            secret_file.write_text(spark.conf.get("spark.sql.streaming.stateStore.statestore.secret") + "\n")
            with feeding([query]):
                result = subprocess.run(
                    [sys.executable, "-m", "statestore.cli", "move", task_of(store_id), "--to", executor,
                     "--controller", address, "--strategy", "fluid", "--wait", "--timeout", "180",
                     "--secret-file", str(secret_file)],
                    capture_output=True, text=True, timeout=240,
                )  # fmt: skip
            assert result.returncode == 0, result.stdout + result.stderr
            assert "done" in result.stdout, result.stdout
            with ControlClient(address) as client:
                moved = client.operation()
            assert_moves_loaded_from_replicas(moved)
            assert moved.moves[0].source_after == "replica", moved  # A adopted its local store
            assert primaries(status(address), query)[store_id] == target
            assert source in replicas_by_partition(status(address), query)[store_id]

            # Skew every primary onto one executor, then rebalance with each strategy.
            steered_logs = []
            for strategy in ("all-at-once", "fluid", "batched"):
                crowded = executors_by_node(address)[source]
                with feeding([query]):
                    skewed = move(
                        {task_of(s): crowded for s in primaries(status(address), query)},
                        strategy="all-at-once",
                        controller=address,
                    )
                assert skewed.state == "done", skewed
                assert set(primaries(status(address), query).values()) == {source}
                planned = rebalance(strategy, dry_run=True, controller=address)
                assert planned.state == "planned" and planned.moves, planned
                with feeding([query]):
                    balanced = rebalance(strategy, controller=address)
                assert_moves_loaded_from_replicas(balanced)
                steered_logs += [line for m in balanced.moves for line in m.log]
                batches = max(m.batch for m in balanced.moves) + 1
                if strategy == "fluid":
                    assert batches == len(balanced.moves)
                if strategy == "all-at-once":
                    assert batches == 1
                if strategy == "batched":
                    for number in range(batches):
                        busy = Counter(
                            node
                            for m in balanced.moves
                            if m.batch == number
                            for node in (m.source_node, m.target_node)
                        )
                        assert max(busy.values()) == 1, (number, busy)
                counts = Counter(primaries(status(address), query).values())
                assert max(counts.values()) - min(counts.values(), default=0) <= 1 and len(counts) == 3, counts
            # The targets' nodes reported the copies their executors opened ahead, and the controller steered on it
            # (within its bounded wait: a busy machine may let some moves go without).
            assert any("opened its copy ahead of the move" in line for line in steered_logs), steered_logs

            # Drain an executor under the aggregation: it keeps no role, and every partition still loads warm.
            drained_node = sorted(executors_by_node(address))[0]
            with feeding([query]):
                drained = spark_provider.drain(executors_by_node(address)[drained_node], controller=address)
            assert_moves_loaded_from_replicas(drained)
            after = status(address)
            assert drained_node not in primaries(after, query).values()
            assert all(drained_node not in held for held in replicas_by_partition(after, query).values())

            shown = run_statestore_status(address)
            assert "MOVES" in shown and "rebalance (batched), done" in shown and "drain (batched), done" in shown
            query.feed(1)
            query.wait_processed()
            groups = wait_converged(address, query, 1, 90)
            assert drained_node not in {n for held in groups.values() for n in held}
            assert assert_replicas_identical(tmp_path, query, groups) > 0
            assert_no_checkpoint_loads(query, warm_batch)
        finally:
            query.stop()
        assert_same_batches(query.results(), reference_outputs(query, tmp_path / "reference"))


def test_a_join_moves_then_its_drained_executor_dies_without_a_checkpoint_load(tmp_path: Path) -> None:
    with replica_cluster(tmp_path, 1, "handover-join", spark_conf=SPARK_CONF) as spark:
        join = RecordedQuery(spark, tmp_path / "join", SIDED_EVENTS, inner_join, "append", sided_rows(4000, 800))
        try:
            address = warm(spark, [join], 1)
            warm_batch = join.last_batch_id()
            reply = status(address)
            counts = Counter(primaries(reply, join).values())
            # Move one of the join's task partitions (its four stores together) to an executor that holds no
            # replica of it: the target warms up first.
            nodes = executors_by_node(address)
            store_id = sorted(primaries(reply, join))[0]
            holders = set(replicas_by_partition(reply, join)[store_id]) | {primaries(reply, join)[store_id]}
            outsider = next(n for n in sorted(nodes) if n not in holders)
            with feeding([join]):
                moved = move({task_of(store_id): nodes[outsider]}, controller=address)
            assert_moves_loaded_from_replicas(moved)
            task_stores = [s for s in primaries(status(address), join) if task_of(s) == task_of(store_id)]
            assert len(task_stores) == 4 and {primaries(status(address), join)[s] for s in task_stores} == {outsider}
            assert "warming up" in "\n".join(moved.moves[0].log)

            # Rebalance the join (its four stores per task partition move together).
            with feeding([join]):
                balanced = rebalance("fluid", controller=address)
            assert_moves_loaded_from_replicas(balanced)
            counts = Counter(primaries(status(address), join).values())

            # Drain the busiest executor, then kill it: nothing loads from the checkpoint location.
            victim = max(sorted(counts), key=lambda n: counts[n])
            with feeding([join]), ControlClient(address) as client:
                drained = client.wait(client.drain(nodes[victim]).operation_id, timeout=300)
            assert drained.state == "done", drained
            assert_moves_loaded_from_replicas(drained)
            after = status(address)
            assert victim not in primaries(after, join).values()
            assert all(victim not in held for held in replicas_by_partition(after, join).values())
            wait_for(
                lambda: next(n for n in status(address).nodes if n.node.node_id == victim).replicas == 0,
                60,
                "the drained node to drop its replicas",
            )
            join.feed(1)
            join.wait_processed()
            groups = wait_converged(address, join, 1, 90)
            assert assert_replicas_identical(tmp_path, join, groups) > 0
            kill_executor(victim)
            join.feed(3)
            join.wait_processed(180)
            assert_no_checkpoint_loads(join, warm_batch)
        finally:
            join.stop()
        assert_same_batches(join.results(), inner_join_outputs(join))
