"""Replica groups under a real Spark query, q=2 and sync: on local-cluster[3,1,1024] every partition is
replicated on both other executors' nodes; a commit waits for one replica's ack, so right after each batch
one replica of every partition already holds its last version (read from the replica's own store); every
replica stays within one version of the primary and, once quiet, holds the primary's exact state. kill -9 of
a node holding replicas of several partitions loses nothing: once its provider restarted it, every
partition again has both replicas, at the last version and identical to the primary."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_replica_groups_spark_harness import (
    EXECUTORS,
    SHUFFLE_PARTITIONS,
    StreamingAggregation,
    assert_replicas_identical,
    controller_address,
    feed_checking_lag,
    feed_until_sidecar_restarted,
    kill9,
    primaries,
    replica_cluster,
    replica_db,
    replica_holder,
    running_job,
    sidecar_pids,
    status,
    store_digest,
    wait_converged,
    wait_until,
)

Q = 2


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rg2")


@pytest.fixture(scope="module")
def spark(root: Path) -> Iterator[Any]:
    with replica_cluster(root, Q, "statestore-replica-groups-q2", sync=True) as session:
        yield session


@pytest.fixture(scope="module")
def job(spark: Any, root: Path) -> Iterator[StreamingAggregation]:
    """The module's streaming aggregation, running and warmed up (every partition has its Q replicas)."""
    with running_job(spark, root, Q) as job:
        yield job


def _all_partitions() -> set[str]:
    return {f"0/{p}/default" for p in range(SHUFFLE_PARTITIONS)}


def _assert_full_groups(address: str, groups: dict[str, dict[str, int]]) -> dict[str, str]:
    """Every partition has Q replicas, on every executor's node but its primary's; returns the primaries."""
    by_primary = primaries(status(address))
    assert set(groups) == _all_partitions(), groups
    for store_id, held in groups.items():
        assert len(held) == Q, f"{store_id} has replicas {held}"
        assert set(held) | {by_primary[store_id]} == {str(e) for e in range(EXECUTORS)}, (store_id, held)
    return by_primary


def test_two_replicas_per_partition_sync_within_one_version_and_identical(
    job: StreamingAggregation, root: Path
) -> None:
    address = controller_address(job.spark)

    def one_replica_at_the_last_version(store_id: str, held: dict[str, int], last: int) -> None:
        on_disk = [store_digest(replica_db(root, node, store_id))[0] for node in held]
        assert last in on_disk, f"sync: no replica of {store_id} at {last}: {on_disk}"

    sampler = feed_checking_lag(job, address, Q, check=one_replica_at_the_last_version)
    assert sampler.samples > 10
    assert sampler.max_lag <= 1, f"lag above one version: {sampler.worst}"
    groups = wait_converged(address, job, Q, 15)
    _assert_full_groups(address, groups)
    assert assert_replicas_identical(root, job, groups) > 1000


def test_node_holding_replicas_of_several_partitions_killed_every_group_restored(
    job: StreamingAggregation, root: Path
) -> None:
    """kill -9 of the sidecar holding the most replicas, mid-stream: the query goes on (sync commits are acked
    by the other replica), the provider restarts the sidecar, and afterwards every partition again has Q
    replicas at the primary's last version, each identical to the primary, as before the kill."""
    address = controller_address(job.spark)
    before = wait_converged(address, job, Q, 30)
    primaries_before = _assert_full_groups(address, before)
    assert assert_replicas_identical(root, job, before) > 1000
    victim = replica_holder(address)
    its_replicas = sorted(s for s, held in before.items() if victim in held)
    assert len(its_replicas) >= 2, f"node {victim} holds replicas of {its_replicas} only: {before}"
    old_pid = sidecar_pids(root)[victim]
    job.feed(8)
    wait_until(lambda: job.processed() >= job.fed - 6, 60, "the stream under way")
    kill9(old_pid)
    assert job.processed() < job.fed, "the kill came after the stream: not mid-stream"
    job.wait_processed()
    feed_until_sidecar_restarted(job, root, victim, old_pid)
    after = wait_converged(address, job, Q, 60)
    assert _assert_full_groups(address, after) == primaries_before
    assert {s: set(h) for s, h in after.items()} == {s: set(h) for s, h in before.items()}
    last = job.last_versions()
    assert all(v == last[s] for s, held in after.items() for v in held.values())
    assert assert_replicas_identical(root, job, after) > 1000
