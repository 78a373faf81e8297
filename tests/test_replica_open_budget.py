"""A node keeps at most `--max-open-replicas` replica stores open, however many replicas it holds: real node
processes, the replicas' open files read from /proc. Replicas past the budget are closed after each increment and
opened again at their next; what they hold, their undo record (a copy one version back) and later increments are
as for a replica that stayed open."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from test_node_harness import (
    Cluster,
    Primary,
    _digest_pairs,
    pid_of,
    replica_digest,
    replica_dir,
    running_cluster,
    wait_until,
)

from statestore.node.bootstrap import receive_snapshot
from statestore.rpc import replication_pb2, replication_pb2_grpc
from statestore.store import VersionedStore

BUDGET = 2
PARTITIONS = 5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("open-budget")
    extra = {"node-b": ("--max-open-replicas", str(BUDGET))}
    with running_cluster(root, ("node-a", "node-b"), q=1, dead_after=30.0, extra=extra) as cluster:
        yield cluster


def _replicas_with_open_files(cluster: Cluster, node: str) -> set[str]:
    """The replica directories of `node` that its process holds a file of open."""
    pid = pid_of(cluster.processes[node])
    replicas_root = str(cluster.data_dir(node) / "replicas") + os.sep
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith(replicas_root):
            held.add(target[len(replicas_root) :].split(os.sep)[0])
    return held


def test_a_node_keeps_its_open_replica_stores_within_its_budget_and_each_replica_whole(
    cluster: Cluster, tmp_path: Path
) -> None:
    primaries = [Primary(tmp_path, f"0/{p}/default", cluster.addresses["node-a"]) for p in range(PARTITIONS)]
    try:
        for _ in range(4):  # round-robin, as a micro-batch's tasks commit
            for primary in primaries:
                primary.ship(primary.commit(0), sync=True)
        for primary in primaries:
            store_id = primary.ref.store_id
            wait_until(lambda s=store_id: cluster.held("node-b", s) == 4, what=f"{store_id} at 4")
        assert len(list((cluster.data_dir("node-b") / "replicas").glob("*/store.json"))) == PARTITIONS
        open_dirs = _replicas_with_open_files(cluster, "node-b")
        assert 1 <= len(open_dirs) <= BUDGET, open_dirs
        for primary in primaries:
            assert replica_digest(cluster.data_dir("node-b"), primary.ref.store_id) == (4, primary.digest())

        # A closed replica's undo record survived its closing: a copy one version back (Spark re-running the
        # batch it applied) is taken back by it, not refused.
        last = primaries[-1]
        assert replica_dir(cluster.data_dir("node-b"), last.ref.store_id).name not in open_dirs, open_dirs
        request = replication_pb2.BootstrapRequest(store=last.ref, replica_only=True, at_most=3)
        with grpc.insecure_channel(cluster.addresses["node-b"]) as channel:
            chunks = replication_pb2_grpc.ReplicationStub(channel).Bootstrap(request, timeout=15)
            manifest = receive_snapshot(chunks, tmp_path / "copy", "node-b's replica")
        last.roll_back(3)
        with VersionedStore.open(tmp_path / "copy", last.ref.store_id) as copy:
            assert (manifest.version, copy.version, copy.lineage) == (3, 3, last.store.lineage)
            assert {cf: _digest_pairs(copy.items(cf)) for cf in copy.column_families()} == last.digest()

        # More increments to every replica, the rolled-back one rewriting its version 4: all reopen, apply and
        # stay within the budget.
        last.ship(last.commit(1), sync=True, rewrites_history=True)
        for primary in primaries:
            primary.ship(primary.commit(0), sync=True)
        expected = {p.ref.store_id: (p.store.version, p.digest()) for p in primaries}
        for store_id, (version, _) in expected.items():
            wait_until(lambda s=store_id, v=version: cluster.held("node-b", s) == v, what=f"{store_id} at {version}")
        assert len(_replicas_with_open_files(cluster, "node-b")) <= BUDGET
        for store_id, held in expected.items():
            assert replica_digest(cluster.data_dir("node-b"), store_id) == held
        assert '"event": "adopted_directory_refused"' not in cluster.processes["node-b"].log()
    finally:
        for primary in primaries:
            primary.close()
