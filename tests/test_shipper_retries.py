"""A replica that refuses a partition's increments for longer than the shipper's fast retries.

Seen in `bench/failover_bench.py --partitions 200`: Spark ran a partition on another executor, the node that had
been its primary was demoted and refused the new primary's increments while its provider still had the store open
("awaits its provider's store (DEMOTE)"), until Spark's maintenance closed it more than a minute later; it then
adopted that store one version behind. The primary had given up on the refused increment after its fast retries
(about 10 s), the query was idle, and the replica stayed a version behind until the partition's next commit.

The peer here is a scripted Replication service over real gRPC that refuses as such a node does, then takes what it
is sent: the test is of the link's retry policy, which no real node can be held in that state long enough to show.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

from statestore.node.settings import NodeSettings
from statestore.node.shipper import _FAILED_RETRIES, ReplicaLink, _Shipment
from statestore.partition_key import partition_key
from statestore.rpc import common_pb2, replication_pb2, replication_pb2_grpc

STORE = common_pb2.StoreRef(store_id="0/7/default", checkpoint_dir="/ckpt/q/state/0/7")


class RefusingReplica(replication_pb2_grpc.ReplicationServicer):
    """Refuses every increment (ACK_FAILED, as a demoted node awaiting its provider's store) until `refuse_for`
    seconds after the first one, then applies whatever comes."""

    def __init__(self, refuse_for: float) -> None:
        self.refuse_for = refuse_for
        self.first: float | None = None
        self.attempts: Counter[int] = Counter()
        self.applied: list[int] = []
        self.lock = threading.Lock()

    def Ship(
        self, request_iterator: Iterator[replication_pb2.ShipRequest], context: grpc.ServicerContext
    ) -> Iterator[replication_pb2.ShipAck]:
        for request in request_iterator:
            blob = request.increment
            with self.lock:
                now = time.monotonic()
                self.first = self.first if self.first is not None else now
                self.attempts[blob.version] += 1
                refused = now - self.first < self.refuse_for
                if not refused:
                    self.applied.append(blob.version)
            held = common_pb2.VersionHeld(store=blob.store, version=0 if refused else blob.version)
            if refused:
                detail = f"b awaits its provider's store of {blob.store.store_id} (DEMOTE)"
                yield replication_pb2.ShipAck(
                    held=held, version=blob.version, status=replication_pb2.ACK_FAILED, replica_node="b", detail=detail
                )
            else:
                yield replication_pb2.ShipAck(
                    held=held, version=blob.version, status=replication_pb2.ACK_APPLIED, replica_node="b"
                )


def test_the_newest_refused_increment_is_sent_until_taken_and_older_ones_are_left_to_a_pull(tmp_path: Path) -> None:
    interval = 0.02  # heartbeat interval: fast retries last about 20 x 0.02 s, slow ones come 0.2 s apart
    replica = RefusingReplica(refuse_for=1.5)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    replication_pb2_grpc.add_ReplicationServicer_to_server(replica, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    cond = threading.Condition()
    settings = NodeSettings(listen="127.0.0.1:0", data_dir=tmp_path / "node", heartbeat_interval=interval)
    link = ReplicaLink("b", f"127.0.0.1:{port}", settings, cond)
    try:
        with cond:
            link.enqueue(_Shipment(STORE, 1, b"increment 1"))
            link.enqueue(_Shipment(STORE, 2, b"increment 2"))
        deadline = time.monotonic() + 30
        with cond:
            while link.acked(partition_key(STORE)) != 2:
                assert time.monotonic() < deadline, ("increment 2 was never taken", replica.attempts)
                cond.wait(0.1)
        with replica.lock:
            # The refusals outlasted the fast retries: increment 2 came again after them, and was taken.
            assert replica.applied == [2], replica.applied
            assert replica.attempts[2] > _FAILED_RETRIES + 1, replica.attempts
            # Increment 1 was sent once and retried the fast way only: the replica pulls it as the gap before 2.
            assert replica.attempts[1] == _FAILED_RETRIES + 1, replica.attempts
        with cond:
            assert link.in_flight_bytes() == 0
    finally:
        link.close()
        server.stop(0)
