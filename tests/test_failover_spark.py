"""Failover from warm replicas on real Spark: local-cluster with three executor JVMs, each starting its state
node, and kill -9 of an executor JVM between batches or just before a commit. The lost partitions' next loads
come from replicas (the provider's `statestoreLoadSource*` metrics say so), never from the checkpoint
location, and every batch's output equals Spark's RocksDB provider's on the same input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_failover_spark_harness import (
    SPARK_ROCKSDB,
    RecordedQuery,
    aggregation,
    assert_same_batches,
    checkpoint_load_lines,
    deduplication,
    inner_join,
    inner_join_outputs,
    keyed_rows,
    reference_outputs,
    reporting,
    sided_rows,
    wait_for,
)
from test_replica_groups_spark_harness import (
    EXECUTORS,
    controller_address,
    primaries,
    replica_cluster,
    replicas_by_partition,
    run_statestore_status,
    status,
    wait_converged,
)

from spark_provider.local_cluster import executor_pids, kill_executor
from spark_provider.progress import load_sources

EVENTS = {"events": "k string, v long"}
SIDED_EVENTS = {"events": "side string, k string, v long"}
# Maintenance every 2 s: an executor Spark moved a partition away from unloads it (and hands its directory to
# its node) soon, as in a long-running query.
# Spark runs a task where the controller steered it unless that executor stays busy for the locality wait; with
# two one-core executors left after a kill and a slow first batch, the default 3 s ran out on CI and a lost
# partition ran on an executor holding no replica of it (and, peer loads off, loaded from the checkpoint location,
# as designed). These tests are about the load where Spark was steered: the wait is made long enough to hold.
SPARK_CONF = {"spark.sql.streaming.stateStore.maintenanceInterval": "2s", "spark.locality.wait": "30s"}


def warm(spark: Any, queries: list[RecordedQuery], q: int) -> str:
    """Start the queries on two batches; return the controller's address once every executor's node is up and
    every partition has its q replicas at the primary's version."""
    for query in queries:
        query.feed(2)
        query.start("statestore")
    for query in queries:
        query.wait_processed()
    address = controller_address(spark)
    wait_for(lambda: sum(n.alive for n in status(address).nodes) == EXECUTORS, 60, "a live node per executor")
    for query in queries:
        query.feed(1)
        query.wait_processed()
        wait_converged(address, query, q, 60)
    return address


def kill_at(spark: Any, query: RecordedQuery, faults: Path, line: str) -> list[str]:
    """Arm the provider's fault point `line` (it kills an executor), feed one batch and wait for it; returns the
    executors' log lines of loads from the checkpoint location since the kill."""
    executors_before = set(executor_pids())
    loads_before = set(checkpoint_load_lines(spark))
    faults.write_text(line)
    query.feed(1)
    query.wait_processed(180)
    assert not faults.exists(), "the fault point was not reached"
    assert set(executor_pids()) != executors_before, "no executor was killed"
    return [line for line in checkpoint_load_lines(spark) if line not in loads_before]


def kill_busiest_executor(address: str, queries: list[RecordedQuery]) -> tuple[str, dict[int, list[str]]]:
    """Between batches: kill -9 the executor that is primary of the most partitions, wait until the controller
    steered each of them to a replica holder; returns the executor and, per query, its lost partitions."""
    reply = status(address)
    counts: dict[str, int] = {}
    for query in queries:
        for node in primaries(reply, query).values():
            counts[node] = counts.get(node, 0) + 1
    victim = max(sorted(counts), key=lambda n: counts[n])
    lost = {
        id(query): sorted(s for s, node in primaries(reply, query).items() if node == victim) for query in queries
    }
    kill_executor(victim)

    def steered() -> bool:
        return all(
            p.steered_to
            for query in queries
            for p in status(address).partitions
            if p.store.store_id in lost[id(query)] and Path(p.store.checkpoint_dir).is_relative_to(query.checkpoint)
        )

    wait_for(steered, 30, f"the lost partitions of executor {victim} steered to replica holders")
    return victim, lost


def test_q1_aggregation_fails_over_to_replicas_between_batches_and_before_a_commit(tmp_path: Path) -> None:
    faults = tmp_path / "fault"
    with replica_cluster(
        tmp_path, 1, "failover-q1", spark_conf=SPARK_CONF, peer_fetch="always", faults_file=str(faults)
    ) as spark:
        query = RecordedQuery(spark, tmp_path / "agg", EVENTS, aggregation, "update", keyed_rows(3000, 2000))
        try:
            address = warm(spark, [query], 1)
            # Between batches.
            loads_before = set(checkpoint_load_lines(spark))
            victim, lost = kill_busiest_executor(address, [query])
            assert lost[id(query)], "the killed executor was primary of nothing"
            before = query.last_batch_id()
            query.feed(1)
            query.wait_processed()
            sources = load_sources(query.progress_of(before + 1))
            assert sources["replica"] >= len(lost[id(query)]), (victim, lost, sources)
            # Every lost partition from a replica; one that was not lost may be run elsewhere by Spark when its
            # locality wait runs out, and load (logged) from the checkpoint location: not this test's subject.
            new_loads = [line for line in checkpoint_load_lines(spark) if line not in loads_before]
            assert not [line for line in new_loads for s in lost[id(query)] if f" {s} " in line], new_loads
            shown = run_statestore_status(address)
            assert "FAILOVER" in shown and "replica v" in shown, shown

            # Just before a commit: the task of partition 0 has loaded and written its batch, and its executor
            # dies. Its retry, wherever Spark runs it, loads from a replica or a peer's copy.
            query.feed(1)
            query.wait_processed()
            wait_converged(address, query, 1, 60)
            # Partition 0's retry loads from a replica or a peer. Spark may also run again partitions the killed
            # executor had committed in that batch (it resubmits the stage of a lost executor): their replicas may
            # hold the version the re-run writes again, and serve the one before by their undo records. None
            # loads from the checkpoint location.
            assert not kill_at(spark, query, faults, "commit kill 0")
            query.feed(2)
            query.wait_processed()
        finally:
            query.stop()
        assert_same_batches(query.results(), reference_outputs(query, tmp_path / "reference"))


def test_a_batch_rerun_after_an_executor_kill_loads_from_a_replica_of_the_version_before(tmp_path: Path) -> None:
    """Sync mode (a commit waits for a replica's ack): partition 0's executor dies right after its replica
    acked version v, before Spark heard of the commit. Spark runs the task again, and it loads v-1: from the
    replica's undo record (its node's own copy or a peer's), not from the checkpoint location; the results stay
    exact."""
    faults = tmp_path / "fault"
    with replica_cluster(
        tmp_path, 1, "failover-rerun", spark_conf=SPARK_CONF, peer_fetch="always", faults_file=str(faults), sync=True
    ) as spark:
        query = RecordedQuery(spark, tmp_path / "agg", EVENTS, aggregation, "update", keyed_rows(3000, 2000))
        try:
            address = warm(spark, [query], 1)
            rerun = query.last_batch_id() + 1
            # Partition 0's rerun must not read the checkpoint location. Another partition may: one whose only
            # replica was on the dead node waits out its sync commit, and Spark may then run a partition queued
            # behind it elsewhere, where nothing holds a copy (seen on CI: that load is logged, and correct).
            from_checkpoint = kill_at(spark, query, faults, "acked kill 0")
            assert not [line for line in from_checkpoint if " 0/0/default " in line], from_checkpoint
            sources = load_sources(query.progress_of(rerun))
            assert sources["replica"] + sources["peer"] >= 1, sources
            query.feed(2)
            query.wait_processed()
            wait_converged(address, query, 1, 90)
        finally:
            query.stop()
        assert_same_batches(query.results(), reference_outputs(query, tmp_path / "reference"))


def test_q2_deduplication_and_join_fail_over_together_with_checkpoint_format_2(tmp_path: Path) -> None:
    conf = {**SPARK_CONF, "spark.sql.streaming.stateStore.checkpointFormatVersion": "2"}
    with replica_cluster(tmp_path, 2, "failover-q2", spark_conf=conf) as spark:
        dedup = RecordedQuery(spark, tmp_path / "dedup", EVENTS, deduplication, "append", keyed_rows(20000, 1500))
        join = RecordedQuery(spark, tmp_path / "join", SIDED_EVENTS, inner_join, "append", sided_rows(4000, 800))
        queries = [dedup, join]
        try:
            address = warm(spark, queries, 2)
            _, lost = kill_busiest_executor(address, queries)
            before = {id(q): q.last_batch_id() for q in queries}
            for query in queries:
                query.feed(1)
            for query in queries:
                query.wait_processed()
                sources = load_sources(query.progress_of(before[id(query)] + 1))
                expected = len(reporting(lost[id(query)]))
                assert sources["replica"] == expected and sources["checkpoint"] == 0, (lost[id(query)], sources)
            # After the failover the groups are whole again: q=2 replicas, on the two live executors' nodes and
            # on the node of the executor Spark started instead of the lost one.
            for query in queries:
                query.feed(1)
                query.wait_processed()
                wait_converged(address, query, 2, 90)
        finally:
            for query in queries:
                query.stop()
        assert_same_batches(dedup.results(), reference_outputs(dedup, tmp_path / "dedup-ref"))
        assert_same_batches(join.results(), inner_join_outputs(join))


def test_a_replica_of_an_abandoned_history_is_never_used(tmp_path: Path) -> None:
    """Batch 3 commits every partition (replicas apply it), then its executor dies and the batch fails; the
    batch is re-run on changed input. The replicas hold version 4 of the abandoned history: the re-run's loads
    of version 3 may use them only taken back to version 3 by their undo records (version 3 is of the kept
    history: the provider checks its lineage), never at version 4; later loads use replicas of the kept history
    only, and every batch equals Spark's provider's."""
    failing = 3
    changed = keyed_rows(3000, 2000, salt=7)

    def run(query: RecordedQuery, provider: str, on_failure: Any) -> None:
        def fail_batch(batch_id: int) -> None:
            if batch_id == failing and not getattr(query, "failed_once", False):
                query.failed_once = True  # type: ignore[attr-defined]
                on_failure()
                raise RuntimeError("batch 3 fails after its state was committed")

        query.fail_batch = fail_batch
        query.feed(failing + 1)
        query.start(provider)
        wait_for(lambda: query.query.exception() is not None, 180, "the query to fail at batch 3")
        query.query.stop()
        query.rewrite(failing, changed)
        query.start()
        query.feed(1)
        query.wait_processed()

    with replica_cluster(tmp_path, 1, "failover-abandoned", spark_conf=SPARK_CONF) as spark:
        ours = RecordedQuery(spark, tmp_path / "agg", EVENTS, aggregation, "update", keyed_rows(3000, 2000))
        address = controller_address(spark)

        def kill_busiest() -> None:
            wait_converged(address, ours, 1, 60)
            counts: dict[str, int] = {}
            for node in primaries(status(address), ours).values():
                counts[node] = counts.get(node, 0) + 1
            kill_executor(max(sorted(counts), key=lambda n: counts[n]))

        try:
            run(ours, "statestore", kill_busiest)
            # The re-run's loads of version 3 may come from replicas holding the abandoned version 4, taken back by
            # their undo records; whether they used the abandoned history shows in the outputs, compared below.
            wait_converged(address, ours, 1, 90)
            loads_before = set(checkpoint_load_lines(spark))
            victim, lost = kill_busiest_executor(address, [ours])
            before = ours.last_batch_id()
            ours.feed(1)
            ours.wait_processed()
            sources = load_sources(ours.progress_of(before + 1))
            # Every lost partition loaded from a replica. A partition that was not lost may be run elsewhere by
            # Spark (two one-core executors left, its locality wait ran out) and load, logged, from the checkpoint
            # location: correct, and not this test's subject.
            new_loads = [line for line in checkpoint_load_lines(spark) if line not in loads_before]
            assert not [line for line in new_loads for s in lost[id(ours)] if f" {s} " in line], new_loads
            assert sources["replica"] >= len(lost[id(ours)]), (victim, sources, new_loads)
        finally:
            ours.stop()

        reference = RecordedQuery(spark, tmp_path / "ref", EVENTS, aggregation, "update", keyed_rows(3000, 2000))
        try:
            run(reference, SPARK_ROCKSDB, lambda: None)
            reference.feed(ours.fed - reference.fed)
            reference.wait_processed()
        finally:
            reference.stop()
        assert_same_batches(ours.results(), reference.results())



def test_a_restarted_query_loads_its_first_batch_from_replicas(tmp_path: Path) -> None:
    """A query stopped and started again on its checkpoint gets a new run id, under which Spark's coordinator
    knows no place for its partitions: the driver's `QueryStarts` listener has the controller steer each to its
    replica holder before the first batch is planned, so that batch loads every partition from a replica, none
    from the checkpoint location (without the listener, a partition Spark ran on an executor holding nothing
    loaded from there)."""
    with replica_cluster(tmp_path, 1, "restart", spark_conf=SPARK_CONF) as spark:
        query = RecordedQuery(spark, tmp_path / "agg", EVENTS, aggregation, "update", keyed_rows(3000, 2000))
        try:
            address = warm(spark, [query], 1)
            before_run = query.query.runId
            holders = replicas_by_partition(status(address), query)
            last = query.last_batch_id()
            query.stop()
            query.stopped = False
            query.feed(1)
            query.start("statestore")
            query.wait_processed()
            assert query.query.runId != before_run
            sources = load_sources(query.progress_of(last + 1))
            assert sources["checkpoint"] == 0 and sources["replica"] == len(holders), (
                sources,
                checkpoint_load_lines(spark)[-8:],
            )
            versions = query.last_versions()
            wait_for(
                lambda: all(p.primary_version >= versions[p.store.store_id] for p in status(address).partitions
                            if p.store.store_id in versions),
                30,
                "the controller to see the restarted run's commits",
            )  # fmt: skip
            placed = primaries(status(address), query)
            assert all(placed[s] in holders[s] for s in holders), (placed, holders)
        finally:
            query.stop()
        assert_same_batches(query.results(), reference_outputs(query, tmp_path / "reference"))
