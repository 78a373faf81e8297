"""Automatic load balancing under a real query (local-cluster[3,1,1024], q=1, `load_balancing="on"`): a skewed
aggregation (most keys in two of the four partitions) whose primaries are first crowded onto one executor by an
operator's move is spread out again by the controller's policy alone, by hand-overs to replicas: the moved
partitions load from replicas, nothing loads from the checkpoint location, `statestore status` says why the
moves were made, and every batch's output equals Spark's RocksDB provider on the same input."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from test_failover_spark import EVENTS, SPARK_CONF, warm
from test_failover_spark_harness import RecordedQuery, aggregation, assert_same_batches, reference_outputs, wait_for
from test_handover_spark import assert_moves_loaded_from_replicas, assert_no_checkpoint_loads, feeding, task_of
from test_replica_groups_spark_harness import (
    SHUFFLE_PARTITIONS,
    primaries,
    replica_cluster,
    run_statestore_status,
    status,
)

from spark_provider import move
from statestore.rpc import control_pb2

HOT_PARTITIONS = {0, 1}


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


def test_a_skewed_query_crowded_onto_one_executor_is_spread_out_by_the_policy(tmp_path: Path) -> None:
    with replica_cluster(
        tmp_path, 1, "load-balancing", spark_conf=SPARK_CONF, load_balancing="on", load_balancing_batches=3
    ) as spark:
        query = RecordedQuery(spark, tmp_path / "agg", EVENTS, aggregation, "update", skewed_rows(spark, 6000))
        try:
            address = warm(spark, [query], 1)
            warm_batch = query.last_batch_id()
            # The policy may already act on the first layout: let it finish, then crowd every primary onto one
            # executor, as an operator (or Spark's own scheduling) could.
            with feeding([query]):
                wait_for(lambda: not any(o.state == "running" for o in operations(address)), 180, "no operation")
                crowded = Counter(primaries(status(address), query).values()).most_common(1)[0][0]
                executor = next(n.node.executor_id for n in status(address).nodes if n.node.node_id == crowded)
                tasks = sorted({task_of(s) for s in primaries(status(address), query)})
                crowd = move(dict.fromkeys(tasks, executor), controller=address)
                assert crowd.state == "done", crowd
                assert set(primaries(status(address), query).values()) == {crowded}
                # The policy sees one executor doing all the work for 3 batches (after its cooldown) and hands
                # primaries over.
                balanced = wait_for(
                    lambda: next(
                        (
                            o
                            for o in operations(address)
                            if o.kind == "balance" and o.operation_id > crowd.operation_id and o.state == "done"
                        ),
                        None,
                    ),
                    240,
                    "an automatic balancing operation to be done",
                )
            assert_moves_loaded_from_replicas(balanced)
            assert balanced.moves and all(m.source_node == crowded for m in balanced.moves), balanced
            assert any(note.startswith("automatic load balancing: executor") for note in balanced.notes), balanced
            after = Counter(primaries(status(address), query).values())
            assert after[crowded] < len(tasks) and len(after) > 1, after
            shown = run_statestore_status(address)
            assert "why: automatic load balancing" in shown and "load/batch" in shown
            # Every partition reports what its batches cost.
            assert all(p.load.batches > 0 for p in status(address).partitions), status(address).partitions
            query.feed(1)
            query.wait_processed()
            assert_no_checkpoint_loads(query, warm_batch)
        finally:
            query.stop()
        assert_same_batches(query.results(), reference_outputs(query, tmp_path / "reference"))
