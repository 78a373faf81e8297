"""Three stateful queries of Spark's default 200 partitions each in one application, on three one-core executor JVMs
with their state nodes and one controller, q=1: every batch of each equals Spark's RocksDB provider's on the same
input (run with 8 partitions: the rows do not depend on them), and the controller's status lists every partition of
the three with its replica, caught up to its primary's version."""

from __future__ import annotations

from pathlib import Path

from test_failover_spark_harness import (
    RecordedQuery,
    aggregation,
    assert_same_batches,
    deduplication,
    keyed_rows,
    reference_outputs,
)
from test_replica_groups_spark_harness import (
    controller_address,
    replica_cluster,
    replicas_by_partition,
    status,
    wait_converged,
)

PARTITIONS = 200
EVENTS = {"events": "k string, v long"}
REFERENCE_PARTITIONS = 8  # the outputs to compare with do not depend on the partitioning (reference_outputs)


def test_three_queries_of_200_partitions_share_the_nodes_and_the_controller(tmp_path: Path) -> None:
    conf = {"spark.sql.shuffle.partitions": str(PARTITIONS)}
    with replica_cluster(tmp_path, 1, "three-queries", spark_conf=conf) as spark:
        queries = [
            RecordedQuery(spark, tmp_path / "agg-a", EVENTS, aggregation, "update", keyed_rows(4000, 1500, salt=1)),
            RecordedQuery(spark, tmp_path / "agg-b", EVENTS, aggregation, "update", keyed_rows(4000, 1500, salt=2)),
            RecordedQuery(spark, tmp_path / "dedup", EVENTS, deduplication, "append", keyed_rows(4000, 1500)),
        ]
        try:
            for query in queries:
                query.feed(2)  # two micro-batches each: state created, then carried and updated
                query.start("statestore")
            for query in queries:
                query.wait_processed(300)
            address = controller_address(spark)
            for query in queries:
                groups = wait_converged(address, query, 1, 120)
                assert len(groups) == PARTITIONS, f"{len(groups)} of {PARTITIONS} partitions have their replica"
            reply = status(address)
            assert len(reply.partitions) == 3 * PARTITIONS
            assert all(len(p.replicas) == 1 for p in reply.partitions)
            every = [held for query in queries for held in replicas_by_partition(reply, query).values()]
            assert len(every) == 3 * PARTITIONS
        finally:
            for query in queries:
                query.stop()
        for number, query in enumerate(queries):
            reference = reference_outputs(query, tmp_path / f"reference-{number}", partitions=REFERENCE_PARTITIONS)
            assert_same_batches(query.results(), reference)
