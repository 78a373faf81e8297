"""Replica groups under a real Spark query, q=2 and sync: on local-cluster[3,1,1024] every partition is
replicated on both other executors' nodes; a commit waits for one replica's ack, so right after each batch
one replica of every partition already holds its last version (read from the replica's own store); every
replica stays within one version of the primary and, once quiet, holds the primary's exact state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_replica_groups_spark_harness import (
    EXECUTORS,
    SHUFFLE_PARTITIONS,
    LagSampler,
    StreamingAggregation,
    assert_replicas_identical,
    controller_address,
    primaries,
    replica_cluster,
    replica_db,
    replicas_by_partition,
    replicas_converged,
    sidecar_pids,
    status,
    store_digest,
    wait_until,
)

Q = 2


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    root = tmp_path_factory.mktemp("rg2")
    with replica_cluster(root, Q, "statestore-replica-groups-q2", sync=True) as session:
        yield session, root


def test_two_replicas_per_partition_sync_within_one_version_and_identical(spark: tuple[Any, Path]) -> None:
    session, root = spark
    job = StreamingAggregation(session, root / "job")
    job.feed(2)
    job.start()
    try:
        job.wait_processed(120)
        wait_until(lambda: len(sidecar_pids(root)) == EXECUTORS, 60, "a sidecar per executor")
        address = controller_address(session)
        wait_until(lambda: replicas_converged(address, job, Q), 30, "replica groups formed and caught up")
        with LagSampler(address) as sampler:
            for _ in range(6):
                job.feed()
                job.wait_processed()
                last = job.last_versions()
                groups = replicas_by_partition(status(address))
                assert set(groups) == set(last) and len(last) == SHUFFLE_PARTITIONS
                for store_id, held in groups.items():
                    assert len(held) == Q, f"{store_id} has replicas {held}"
                    assert all(last[store_id] - 1 <= v <= last[store_id] for v in held.values()), (store_id, held)
                    on_disk = [store_digest(replica_db(root, node, store_id))[0] for node in held]
                    assert last[store_id] in on_disk, f"sync: no replica of {store_id} at {last[store_id]}: {on_disk}"
        assert sampler.samples > 10
        assert sampler.max_lag <= 1, f"lag above one version: {sampler.worst}"
        groups = wait_until(lambda: replicas_converged(address, job, Q), 15, "replicas at the last version")
        by_primary = primaries(status(address))
        for store_id, held in groups.items():
            assert set(held) | {by_primary[store_id]} == {str(e) for e in range(EXECUTORS)}
        assert assert_replicas_identical(root, job, groups) > 1000
    finally:
        job.stop()
