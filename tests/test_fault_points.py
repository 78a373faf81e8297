"""Named fault points in real node and controller processes (statestore.faults.points), armed through
STATESTORE_FAULTS_FILE: a replica killed as it applies and one paused before it acks, a primary's node failing a
shipment, a snapshot refused to a bootstrapping peer, and a controller failing heartbeats. Each fires once, does
what its action says, and afterwards the replica holds the primary's last version with its exact content."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from conftest import java_check
from test_node_harness import Cluster, Primary, replica_digest, running_cluster, send_cont, wait_until

from statestore.faults import points
from statestore.faults.points import FAULTS_ENV, FaultInjected

STORE = "7/0/default"


@pytest.fixture
def faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The faults file every process started by the test reads (empty: nothing armed yet)."""
    path = tmp_path / "faults"
    monkeypatch.setenv(FAULTS_ENV, str(path))
    return path


@pytest.fixture
def cluster(tmp_path: Path, faults: Path) -> Iterator[Cluster]:
    """A controller and nodes a (the primary's) and b (its replica, q=1), all reading `faults`."""
    with running_cluster(tmp_path, ("a", "b"), 1, dead_after=3.0) as running:
        try:
            yield running
        finally:
            for process in running.processes.values():
                if process.popen is not None and process.popen.poll() is None:
                    send_cont(process)  # a paused process must be able to die


def caught_up(
    cluster: Cluster, primary: Primary, node: str = "b", timeout: float = 60, store_id: str = STORE
) -> None:
    last = primary.store.version
    wait_until(lambda: cluster.held(node, store_id) == last, timeout, f"{node} at version {last}")
    assert replica_digest(cluster.data_dir(node), store_id) == (last, primary.digest())


def fired(cluster: Cluster, name: str, point: str) -> bool:
    return f'"fault point {point} of' in cluster.processes[name].log()


def test_a_replica_killed_as_it_applies_restarts_and_catches_up(cluster: Cluster, faults: Path, tmp_path: Path) -> None:
    primary = Primary(tmp_path, STORE, cluster.addresses["a"])
    try:
        primary.commit_and_ship(3, sync=True)
        faults.write_text("apply kill\n")
        primary.commit_and_ship(2)
        replica = cluster.processes["b"]
        wait_until(lambda: replica.popen.poll() is not None, 20, "b killed at the apply point")
        assert replica.popen.returncode == -signal.SIGKILL
        assert not faults.exists()  # one shot: the line was claimed
        primary.commit_and_ship(3)
        cluster.start_node("b")
        primary.commit_and_ship(2)
        caught_up(cluster, primary)
    finally:
        primary.close()


def test_a_replica_paused_before_its_ack_is_declared_dead_then_resumes(
    cluster: Cluster, faults: Path, tmp_path: Path
) -> None:
    primary = Primary(tmp_path, STORE, cluster.addresses["a"])
    try:
        primary.commit_and_ship(2, sync=True)
        faults.write_text("applied pause 0\n")  # partition 0 only: STORE's
        primary.commit_and_ship(1)
        wait_until(lambda: fired(cluster, "b", "applied"), 20, "b paused after applying")
        alive = lambda: any(n.node.node_id == "b" and n.alive for n in cluster.status().nodes)  # noqa: E731
        wait_until(lambda: not alive(), 20, "the controller to declare the paused b dead")
        primary.commit_and_ship(3)
        send_cont(cluster.processes["b"])
        wait_until(alive, 20, "b alive again")
        primary.commit_and_ship(2)
        caught_up(cluster, primary)
    finally:
        primary.close()


def test_a_slow_partition_holds_up_no_other_partition_on_the_same_link(
    cluster: Cluster, faults: Path, tmp_path: Path
) -> None:
    """Node b takes 8 s to apply partition 0's next increment (a stand-in for a catch-up or a bootstrap); partition
    1's increment, shipped after it on the same link from node a, is applied meanwhile (before, it waited behind)."""
    slow = Primary(tmp_path / "slow", STORE, cluster.addresses["a"])
    other = Primary(tmp_path / "other", "7/1/default", cluster.addresses["a"])
    try:
        slow.commit_and_ship(1, sync=True)
        other.commit_and_ship(1, sync=True)
        faults.write_text("apply delay 8000 0\n")  # partition 0 only: the slow one's
        slow.commit_and_ship(1)
        wait_until(lambda: fired(cluster, "b", "apply"), 10, "b to start its slow apply")
        other.commit_and_ship(1)
        wait_until(lambda: cluster.held("b", "7/1/default") == 2, 5, "partition 1's version 2 on b")
        assert cluster.held("b", STORE) == 1  # partition 0's apply still under way
        caught_up(cluster, slow)
        caught_up(cluster, other, store_id="7/1/default")
    finally:
        slow.close()
        other.close()


def test_a_shipment_the_primarys_node_fails_is_refused_and_the_replica_catches_up(
    cluster: Cluster, faults: Path, tmp_path: Path
) -> None:
    primary = Primary(tmp_path, STORE, cluster.addresses["a"])
    try:
        primary.commit_and_ship(2, sync=True)
        faults.write_text("ship raise\n")
        with pytest.raises(grpc.RpcError) as error:
            primary.ship(primary.commit(9))
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "fault point ship of 7/0/default: injected failure" in error.value.details()
        primary.commit_and_ship(3)  # the failed version is durable in the checkpoint location: pulled from there
        caught_up(cluster, primary)
    finally:
        primary.close()


def test_a_controller_failing_heartbeats_and_a_refused_bootstrap_lose_nothing(
    cluster: Cluster, faults: Path, tmp_path: Path
) -> None:
    primary = Primary(tmp_path, STORE, cluster.addresses["a"])
    try:
        faults.write_text("heartbeat raise\nbootstrap-serve raise\n")
        wait_until(lambda: fired(cluster, "controller", "heartbeat"), 20, "a heartbeat to fail")
        for seed in range(20):  # far enough ahead for an empty replica to bootstrap
            primary.commit(seed)
        primary.location.write_snapshot(primary.store)
        primary.commit_and_ship(2)
        wait_until(lambda: fired(cluster, "a", "bootstrap-serve"), 30, "a snapshot refused to b")
        primary.commit_and_ship(2)
        caught_up(cluster, primary)
    finally:
        primary.close()


def test_an_unarmed_point_does_nothing_and_a_raise_names_its_point(tmp_path: Path) -> None:
    points.arm(None)
    points.fault_point("apply", STORE)  # unarmed: returns at once
    path = tmp_path / "faults"
    path.write_text("apply raise 3\napply delay 1 0\n")
    points.arm(str(path))
    try:
        points.fault_point("apply", STORE)  # partition 0: the delay line fires, the raise (partition 3) stays
        assert path.read_text().split() == ["apply", "raise", "3"]
        with pytest.raises(FaultInjected, match="fault point apply of 1/3/default: injected failure"):
            points.fault_point("apply", "1/3/default")
        assert not path.exists()
        points.fault_point("apply", "1/3/default")  # nothing armed any more
    finally:
        points.arm(None)


# ------------------------------------------------------------------------------------------ the provider's points



@pytest.fixture(scope="module")
def faults_check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command line of FaultsCheck, compiled against the provider jar."""
    return java_check(tmp_path_factory, "FaultsCheck", "64m")


def test_the_providers_raise_fails_the_step_once_and_pause_stops_the_jvm_until_resumed(
    faults_check: list[str], tmp_path: Path
) -> None:
    import subprocess

    path = tmp_path / "faults"
    path.write_text("commit raise 4\n")
    run = lambda partition: subprocess.run(  # noqa: E731
        [*faults_check, str(path), "commit", partition], capture_output=True, text=True, timeout=60
    ).stdout.strip()
    assert run("3") == "passed"  # another partition: the line stays armed
    assert run("4") == "raised: statestore fault point commit of 0/4/default: injected failure"
    assert run("4") == "passed" and not path.exists()  # one shot
    path.write_text("load pause\n")
    check = subprocess.Popen([*faults_check, str(path), "load", "1"], stdout=subprocess.PIPE, text=True)
    try:
        state = lambda: Path(f"/proc/{check.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]  # noqa: E731
        wait_until(lambda: state() == "T", 30, "the JVM stopped by its fault point")
        assert check.poll() is None
        check.send_signal(signal.SIGCONT)
        assert check.communicate(timeout=60)[0].strip() == "passed"
    finally:
        if check.poll() is None:
            check.kill()


def test_a_sync_commit_of_a_rewrite_the_replica_failed_to_apply_returns_once_the_replica_holds_it(
    cluster: Cluster, faults: Path, tmp_path: Path
) -> None:
    """Spark re-ran batch 3: the primary commits a new 3 and ships it flagged, synchronously. The replica's first
    apply of it fails (a raise at its apply point), and that ack names the version it still holds: the abandoned 3.
    The commit must not count that as the new 3 replicated (it did: the sync commit returned at once, and a replica
    whose partition then stayed idle kept the abandoned history, shown caught up); it returns once the retry applied
    the new 3."""
    primary = Primary(tmp_path, STORE, cluster.addresses["a"])
    try:
        primary.commit_and_ship(3, sync=True)
        caught_up(cluster, primary)
        primary.roll_back(2)
        rewritten = primary.commit(3)  # the new 3: other deletes than the old one's (seed 2)
        faults.write_text("apply raise\n")
        result = primary.ship(rewritten, sync=True, rewrites_history=True)
        assert fired(cluster, "b", "apply")
        assert result.synced, result.detail
        assert replica_digest(cluster.data_dir("b"), STORE) == (3, primary.digest())
    finally:
        primary.close()
