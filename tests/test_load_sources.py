"""Where the provider's load takes its state from, with a real state node and the provider's own Java code
(spark_provider/java_test/io/statestore/spark/LoadCheck.java) and no Spark scheduler: the node's replica when it
follows the checkpoint location's history (caught up with the increments it lacks), never when it holds a
history Spark abandoned or a version past the one asked for; the checkpoint location then. The node's end of
MATERIALIZE, PROMOTE and DEMOTE (docs/formats.md section 6) is exercised on the way: the node's copies are
handed to it as a provider's unloaded directories (DEMOTE)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from test_load_sources_harness import OPTIONS, Setup, load_rig
from test_node_harness import wait_until

from statestore.checkpoint_location import CheckpointLocation

pytestmark = pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None, reason="needs a JDK")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with load_rig(tmp_path_factory.mktemp("loads")) as rig:
        yield rig


def test_a_replica_on_the_kept_history_is_caught_up_and_used(setup: Setup) -> None:
    location = setup.history(1, versions=4)
    replica = location.restore(setup.root.parent / "copy-1", version=2, options=OPTIONS)
    setup.hand_to_node(replica)
    loaded = setup.load(1, 4)
    assert (loaded["source"], loaded["from"], loaded["applied"]) == ("replica", "2", "2"), loaded
    assert loaded["keys"] == str(1 + 2 + 3 + 4)


def test_a_replica_of_an_abandoned_history_is_not_used(setup: Setup) -> None:
    """Version 3 exists twice: the node's copy followed a batch Spark re-ran with other input."""
    location = setup.history(2, versions=3)
    abandoned = location.restore(setup.root.parent / "copy-2", version=2, options=OPTIONS)
    abandoned.put(b"lost", b"x")
    abandoned.commit()  # version 3 of another history: same version, other lineage
    assert abandoned.version == 3 and abandoned.lineage != location.read_increment(3).lineage
    setup.hand_to_node(abandoned)
    loaded = setup.load(2, 3)
    assert loaded["source"] == "checkpoint", loaded
    assert "another history" in loaded["passed"], loaded
    assert loaded["keys"] == str(1 + 2 + 3)


def test_a_handed_over_directory_that_is_not_what_its_provider_announced_is_never_served(setup: Setup) -> None:
    """The node adopts a provider's closed directory without opening it (a stopped query hands over hundreds at
    once) and checks it when first used: one holding version 2 announced as version 3 is replaced by an empty
    replica then (logged), and the node answers the load that the replica is empty (it once handed that empty
    replica out as version 0): the load reads the checkpoint location."""
    location = setup.history(10, versions=3)
    copy = location.restore(setup.root.parent / "copy-10", version=2, options=OPTIONS)
    lineage_3 = location.read_increment(3).lineage
    assert "adopted" in setup.hand_to_node(copy, announced=(3, lineage_3))
    loaded = setup.load(10, 3)
    assert loaded["source"] == "checkpoint" and "the replica is empty" in loaded["passed"], loaded
    assert loaded["keys"] == str(1 + 2 + 3)
    log = setup.cluster.processes["n"].log()
    assert "adopted_directory_refused" in log and "not version 3 as announced" in log, log[-3000:]


def test_a_replica_past_the_version_asked_for_is_not_used(setup: Setup) -> None:
    location = setup.history(3, versions=4)
    setup.hand_to_node(location.restore(setup.root.parent / "copy-3", version=4, options=OPTIONS))
    loaded = setup.load(3, 2)
    assert loaded["source"] == "checkpoint" and "past 2" in loaded["passed"], loaded
    assert loaded["keys"] == str(1 + 2)


def test_without_a_copy_on_the_node_the_checkpoint_location_serves(setup: Setup) -> None:
    setup.history(4, versions=2)
    loaded = setup.load(4, 2)
    assert loaded["source"] == "checkpoint" and "no replica here" in loaded["passed"], loaded


def test_a_node_without_a_replica_fetches_a_peers_copy_when_allowed(setup: Setup) -> None:
    """Node m holds nothing of partitions 5 and 6; node n holds replicas at version 3; the controller locates
    them. (A provider's close hands its directory to its node: m then holds a copy of its own.)"""
    for partition in (5, 6):
        location = setup.history(partition, versions=4)
        setup.hand_to_node(location.restore(setup.root.parent / f"copy-{partition}", version=3, options=OPTIONS))
        wait_until(lambda loc=location: _holders(setup, loc) == ["n"], 10, "the controller to know n's replica")
    loaded = setup.load(5, 4, node="m", peer_fetch="always")
    assert (loaded["source"], loaded["from"], loaded["applied"]) == ("peer", "3", "1"), loaded
    assert loaded["keys"] == str(1 + 2 + 3 + 4)
    assert setup.load(6, 4, node="m", peer_fetch="never")["source"] == "checkpoint"


def _holders(setup: Setup, location: CheckpointLocation) -> list[str]:
    import grpc

    from statestore.rpc import common_pb2, control_pb2_grpc

    with grpc.insecure_channel(setup.cluster.controller_address) as channel:
        reply = control_pb2_grpc.ControlStub(channel).Locate(
            common_pb2.StoreRef(store_id=location.store_id, checkpoint_dir=str(location.path)), timeout=5
        )
    return [h.node.node_id for h in reply.holders]


def test_an_aborted_batch_is_undone_in_place_not_restored(setup: Setup) -> None:
    """The batch's writes went straight into RocksDB; abort writes back what they changed, so the retried task's
    load of the same version is served by the provider's own directory, with the state of before the batch."""
    setup.history(7, versions=3)
    first, again = setup.loads(7, 3, "n", "never", "abort-reload")
    assert first["source"] == "checkpoint" and first["keys"] == str(1 + 2 + 3)
    assert (again["source"], again["applied"], again["keys"]) == ("local", "0", str(1 + 2 + 3)), again


def test_a_snapshot_is_taken_at_the_commit_when_spark_asks_for_one(setup: Setup) -> None:
    """Spark's coordinator passes `forceSnapshotOnCommit` (getStore's third argument) for a store whose snapshot
    uploads lag: the store stays writable, and its commit is snapshotted."""
    location = setup.history(8, versions=2)
    setup.loads(8, 2, "n", "never", "force-snapshot")
    assert location.snapshot_versions() == [3]


def test_a_snapshot_of_a_history_a_rerun_batch_abandoned_is_passed_over(setup: Setup) -> None:
    """A background snapshot upload that ends after a re-run batch rewrote its version leaves a complete snapshot
    of the abandoned history (issue 13's suspect): a restore passes it over and names why, and gives the kept
    history's state at that version and after it."""
    location = setup.history(9, versions=2)
    abandoned = location.restore(setup.root.parent / "abandoned-9", version=2, options=OPTIONS)
    for i in range(10):
        abandoned.put(f"lost-{i}".encode(), b"x")
    location.commit(abandoned)  # version 3 of the history Spark then abandons
    location.write_snapshot(abandoned)
    late_upload = setup.root.parent / "late-upload-9"
    shutil.copytree(location.snapshot_path(3), late_upload)
    abandoned.close()
    kept = location.restore(setup.root.parent / "kept-9", version=2, options=OPTIONS)
    for i in range(3):
        kept.put(f"k3-{i}".encode(), b"x")
    location.commit(kept, 3)  # the re-run: version 3 rewritten, the abandoned snapshot deleted
    assert location.snapshot_versions() == []
    shutil.copytree(late_upload, location.snapshot_path(3))  # ... and then the late upload completes
    for i in range(4):
        kept.put(f"k4-{i}".encode(), b"x")
    location.commit(kept)
    kept.close()

    at_3 = setup.load(9, 3)
    assert at_3["source"] == "checkpoint" and at_3["keys"] == str(1 + 2 + 3), at_3
    assert (at_3["from"], at_3["applied"]) == ("0", "3"), at_3  # from the empty store: no snapshot below
    # The provider's close handed its version 3 to the node, which serves version 4 from it.
    at_4 = setup.load(9, 4)
    assert at_4["keys"] == str(1 + 2 + 3 + 4), at_4
