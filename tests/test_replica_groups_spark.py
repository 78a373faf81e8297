"""Replica groups under a real Spark query, q=1: master local-cluster[3,1,1024] (three executor JVMs, each
starting its state node as a sidecar on its first commit), the controller in the driver. Replicas follow
the primaries within one version and end with the primary's exact content; kill -9 of a node (a replica
holder, restarted with its directory or with an empty one; a primary's node) loses nothing and the query
goes on. Each sidecar keeps its data in its executor JVM's own directory, and a dead JVM's is deleted. The
application runs every gRPC call over mutual TLS with its secret, as a secured cluster would."""

from __future__ import annotations

import json
import os
import shutil
import signal
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
    node_dir,
    node_log_events,
    primaries,
    process_argv,
    replica_cluster,
    replica_holder,
    replicas_by_partition,
    run_statestore_status,
    running_job,
    sidecar_pids,
    status,
    wait_converged,
    wait_until,
)
from test_tls import make_ca, make_leaf

Q = 1


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rg")


def _stale_node_dir(root: Path) -> Path:
    """A sidecar data dir an executor JVM of an earlier run left behind (that pid can never be alive again)."""
    return root / "local" / f"{2**22 + 7}-00000000-0000-0000-0000-000000000000" / "node-0"


@pytest.fixture(scope="module")
def spark(root: Path) -> Iterator[Any]:
    stale = _stale_node_dir(root) / "replicas" / "0%2F0%2Fdefault" / "db"
    stale.mkdir(parents=True)
    (stale / "CURRENT").write_text("MANIFEST-000001\n")
    # Spark unloads a stopped query's stores at its next maintenance; every 2 s here instead of 60 s, and
    # the controller forgets unclaimed partitions after 15 s, so that the last test sees both happen.
    fast_maintenance = {"spark.sql.streaming.stateStore.maintenanceInterval": "2s"}
    # This module's application runs every gRPC call over mutual TLS, with its secret (tests/test_tls.py has
    # the refusals): the executors hand both to the sidecars they start.
    pki = root / "pki"
    pki.mkdir()
    files = make_leaf(pki, "application", make_ca(pki, "application-ca"))
    with replica_cluster(
        root, Q, "statestore-replica-groups-q1", spark_conf=fast_maintenance, forget_after_seconds=15,
        tls_cert=str(files.cert), tls_key=str(files.key), tls_ca=str(files.ca),
    ) as session:  # fmt: skip
        yield session


@pytest.fixture(scope="module")
def job(spark: Any, root: Path) -> Iterator[StreamingAggregation]:
    """The module's streaming aggregation, running, warmed up: every executor ran tasks, so all three
    sidecars are up and every partition has its replica group."""
    with running_job(spark, root, Q) as job:
        yield job


def test_each_sidecar_keeps_its_data_in_its_executor_jvms_directory(job: StreamingAggregation, root: Path) -> None:
    """`<localDir>/<jvm pid>-<uuid>/node-<executor id>`: one directory per executor JVM, so no sidecar reopens
    what another JVM's left; the node dir of a JVM that is gone was deleted when the executors started."""
    assert not _stale_node_dir(root).parent.exists()
    jvm_dirs = set()
    for node_id, pid in sidecar_pids(root).items():
        argv = process_argv(pid)
        assert argv is not None
        data_dir = Path(argv[argv.index("--data-dir") + 1])
        jvm_pid = int(argv[argv.index("--parent-pid") + 1])
        assert data_dir == node_dir(root, node_id) and (data_dir / "node.log").exists()
        assert data_dir.parent.name.startswith(f"{jvm_pid}-"), (data_dir, jvm_pid)
        ppid = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("PPid:"))
        assert int(ppid.split()[1]) == jvm_pid, "the sidecar is not a child of the JVM whose directory it uses"
        jvm_dirs.add(data_dir.parent)
        # The secret and the TLS files reach the node in its environment, the secret never on its command line.
        environ = dict(
            item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item
        )
        secret = job.spark.conf.get("spark.sql.streaming.stateStore.statestore.secret")
        assert environ.get("STATESTORE_SECRET") == secret and secret not in " ".join(argv)
        assert environ.get("STATESTORE_TLS_CA", "").endswith("application-ca.crt"), sorted(environ)
    assert len(jvm_dirs) == EXECUTORS


def test_replicas_hold_the_last_version_and_the_primarys_content(job: StreamingAggregation, root: Path) -> None:
    address = controller_address(job.spark)
    # Right after each batch: every replica holds the primary's last version or the one before.
    sampler = feed_checking_lag(job, address, Q)
    assert sampler.samples > 15
    assert sampler.max_lag <= 1, f"lag above one version: {sampler.worst}"
    groups = wait_converged(address, job, Q, 15)
    assert min(min(h.values()) for h in groups.values()) >= 8
    assert all(primaries(status(address))[s] not in held for s, held in groups.items())
    assert assert_replicas_identical(root, job, groups) > 1000
    table = run_statestore_status(address)
    assert "PARTITIONS" in table and "0/0/default" in table


@pytest.mark.parametrize("directory", ["kept", "emptied"])
def test_replica_node_killed_mid_stream_catches_up(job: StreamingAggregation, root: Path, directory: str) -> None:
    address = controller_address(job.spark)
    victim = replica_holder(address)
    old_pid = sidecar_pids(root)[victim]
    job.feed(8)
    wait_until(lambda: job.processed() >= job.fed - 6, 60, "the stream under way")
    if directory == "emptied":
        # Frozen while its directory moves away, so the killed node writes nothing more where it was.
        os.kill(old_pid, signal.SIGSTOP)
        node_dir(root, victim).rename(root / f"gone-{victim}-{old_pid}")
    kill9(old_pid)
    assert job.processed() < job.fed, "the kill came after the stream: not mid-stream"
    job.wait_processed()
    # The provider of that executor restarts its sidecar on a later commit; feed until it did.
    feed_until_sidecar_restarted(job, root, victim, old_pid)
    groups = wait_converged(address, job, Q, 60)
    # Placement re-places a node's roles once the controller declares it dead and, moving as little as it
    # can, does not hand them back when it rejoins: the restarted node may or may not still hold replicas.
    # Either way every partition keeps Q replicas, and all of them (the restarted node's included) hold
    # exactly the primary's content.
    assert all(len(held) == Q for held in groups.values()), groups
    assert assert_replicas_identical(root, job, groups) > 1000
    if directory == "emptied":
        # It started from nothing: every replica it holds was created anew by the restarted node.
        created = {e["store"] for e in node_log_events(root, victim, "replica_created")}
        assert {s for s, held in groups.items() if victim in held} <= created
        shutil.rmtree(root / f"gone-{victim}-{old_pid}", ignore_errors=True)


def test_primary_node_killed_the_query_goes_on_and_the_node_catches_up(job: StreamingAggregation, root: Path) -> None:
    address = controller_address(job.spark)
    by_primary = primaries(status(address))
    victim = sorted(by_primary.values())[0]
    its_partitions = sorted(s for s, p in by_primary.items() if p == victim)
    old_pid = sidecar_pids(root)[victim]
    before = job.processed()
    job.feed(6)
    wait_until(lambda: job.processed() >= before + 1, 60, "the stream under way")
    kill9(old_pid)
    killed_at = job.processed()
    assert killed_at < job.fed, "the kill came after the stream: not mid-stream"
    job.wait_processed()  # the query goes on: every batch completes
    assert job.processed() - killed_at >= 2
    feed_until_sidecar_restarted(job, root, victim, old_pid)
    groups = wait_converged(address, job, Q, 60)
    reply = status(address)
    assert all(n.alive for n in reply.nodes) and len(reply.nodes) == EXECUTORS
    last = job.last_versions()

    def victim_primaries_current() -> bool:
        # The restarted node ships its primaries again and reports their last version (on its next heartbeat).
        mine = [p for p in status(address).partitions if p.primary_node == victim]
        return bool(mine) and all(p.primary_version == last[p.store.store_id] for p in mine)

    wait_until(victim_primaries_current, 10, f"node {victim} reporting its partitions {its_partitions} current")
    assert assert_replicas_identical(root, job, groups) > 1000


def test_a_rerun_batch_is_shipped_as_a_rewrite(job: StreamingAggregation, root: Path) -> None:
    """Spark re-runs the last batch (its commit entry is gone) on changed input: every partition commits that
    version again with the rewrite bit, which reaches the shipper of whichever node is now its primary.

    A restarted query has no locality preference, so partitions may move to another executor: the old
    primary's node still reports the version it shipped last, the controller keeps the node that committed
    most recently and demotes the other. Every partition, moved or not, ends with Q replicas at its last
    version holding the new history, not the abandoned one."""
    address = controller_address(job.spark)
    job.wait_processed()
    before = primaries(status(address), job)
    job.stop()
    last_batch = job.fed - 1
    for name in (str(last_batch), f".{last_batch}.crc"):  # the commit entry and Hadoop's checksum of it
        (job.checkpoint / "commits" / name).unlink(missing_ok=True)
    abandoned = job.last_versions()
    job.rewrite_input(last_batch)
    job.start()
    job.wait_processed()
    job.feed()
    job.wait_processed()
    assert all(v == abandoned[s] + 1 for s, v in job.last_versions().items())
    flagged = {
        (e["store"], e["version"]): node
        for node in (str(n) for n in range(EXECUTORS))
        for e in node_log_events(root, node, "history_rewritten")
        if e.get("reason") == "flagged"
    }
    assert set(abandoned.items()) <= set(flagged), f"re-run versions not flagged: {abandoned} vs {flagged}"
    moved = sorted(s for s, v in abandoned.items() if flagged[(s, v)] != before[s])
    print(f"partitions moved to another executor by the restart: {moved} of {sorted(abandoned)}")
    groups = wait_converged(address, job, Q, 60)
    after = primaries(status(address), job)
    assert all(after[s] == flagged[(s, v)] for s, v in abandoned.items()), (after, flagged)
    assert all(after[s] not in held for s, held in groups.items())
    for store_id in moved:
        demoted = [e for e in node_log_events(root, before[store_id], "demoted") if e["store"] == store_id]
        assert demoted, f"{before[store_id]} still primary of {store_id}, which moved to {after[store_id]}"
    assert assert_replicas_identical(root, job, groups) > 1000


def test_two_queries_with_the_same_store_ids_replicate_side_by_side(job: StreamingAggregation, root: Path) -> None:
    """A second stateful query in the same application has the same store ids (`0/<partition>/default`): its
    partitions are other partitions on every node and in the controller, each with its own replicas. When it
    stops, Spark unloads its stores, each provider releases its partition to its node, and once nobody has
    claimed them for `forget_after_seconds` the controller forgets them and every node deletes its replicas."""
    address = controller_address(job.spark)
    other = StreamingAggregation(job.spark, root / "job2", keys=500)
    other.feed(3)
    other.start()
    try:
        job.feed(2)
        other.wait_processed(120)
        job.wait_processed()
        mine = wait_converged(address, job, Q, 60)
        theirs = wait_converged(address, other, Q, 60)
        assert set(mine) == set(theirs) and len(theirs) == SHUFFLE_PARTITIONS
        assert len(status(address).partitions) == 2 * SHUFFLE_PARTITIONS
        assert assert_replicas_identical(root, job, mine) > 1000
        assert assert_replicas_identical(root, other, theirs) > 100
        table = run_statestore_status(address)
        assert "query" in table.splitlines()[table.splitlines().index("PARTITIONS") + 1]
    finally:
        other.stop()
    wait_until(lambda: not replicas_by_partition(status(address), other), 90, "the stopped query forgotten")
    wait_until(lambda: not _replica_dirs_of(root, other), 30, "its replicas deleted on every node")
    assert replicas_by_partition(status(address), job) == wait_converged(address, job, Q, 30)


def _replica_dirs_of(root: Path, job: StreamingAggregation) -> list[Path]:
    """The replica directories of `job`'s partitions on every node (found by their store.json)."""
    found = []
    for executor in range(EXECUTORS):
        for ref_file in (node_dir(root, str(executor)) / "replicas").glob("*/store.json"):
            try:
                text = ref_file.read_text()
            except FileNotFoundError:  # the node deleted this replica between the listing and the read
                continue
            location = Path(json.loads(text)["checkpoint_dir"]).resolve()
            if location.is_relative_to(job.checkpoint.resolve()):
                found.append(ref_file.parent)
    return found
