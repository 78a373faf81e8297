"""A replica's lag in bytes, as `statestore status` reports it, from the replica's report and its primary's ack."""

from __future__ import annotations

from statestore.controller.status import replica_lag_bytes
from statestore.rpc import control_pb2


def progress(acked: int, lag_bytes: int) -> control_pb2.ReplicaProgress:
    return control_pb2.ReplicaProgress(node_id="b", acked_version=acked, lag_bytes=lag_bytes)


def test_a_replica_at_its_ack_lacks_the_bytes_its_primary_counts() -> None:
    assert replica_lag_bytes(10, 6, progress(6, 4000), 999) == 4000


def test_a_replica_ahead_of_its_ack_lacks_the_share_of_the_versions_it_still_misses() -> None:
    # Acked 6 of 10 with 4,000 bytes missing; the replica reports holding 8: two of the four versions remain.
    assert replica_lag_bytes(10, 8, progress(6, 4000), 999) == 2000


def test_a_caught_up_replica_lacks_nothing() -> None:
    assert replica_lag_bytes(10, 10, progress(6, 4000), 999) == 0
    assert replica_lag_bytes(10, 12, None, 999) == 0


def test_with_no_ack_the_primarys_mean_increment_stands_in() -> None:
    assert replica_lag_bytes(10, 7, None, 500) == 1500
    assert replica_lag_bytes(10, 7, None, 0) == 0
