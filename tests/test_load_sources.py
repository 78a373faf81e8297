"""Where the provider's load takes its state from, with a real state node and the provider's own Java code
(spark_provider/java_test/io/statestore/spark/LoadCheck.java) and no Spark scheduler: the node's replica when it
follows the checkpoint location's history (caught up with the increments it lacks), never when it holds a
history Spark abandoned or a version past the one asked for; the checkpoint location then. The node's end of
MATERIALIZE, PROMOTE and DEMOTE (docs/formats.md section 6) is exercised on the way: the node's copies are
handed to it as a provider's unloaded directories (DEMOTE)."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_node_harness import Cluster, Process, statestore_command, wait_until

from spark_provider.jar import provider_jar, pyspark_jars_dir
from statestore.checkpoint_location import CheckpointLocation
from statestore.node.local_channel import (
    STATUS_ACCEPTED,
    Demote,
    decode_reply,
    encode_demote,
    read_frame,
)
from statestore.options import StoreOptions
from statestore.store import VersionedStore

DRIVER = Path(__file__).resolve().parents[1] / "spark_provider" / "java_test" / "io" / "statestore" / "spark"
OPTIONS = StoreOptions(write_buffer_mb=4, block_cache_mb=4)

pytestmark = pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None, reason="needs a JDK")


@dataclass
class Setup:
    """A controller, one node serving a local socket, the compiled LoadCheck, and a state root."""

    cluster: Cluster
    sockets: dict[str, Path]
    classpath: str
    root: Path

    def location(self, partition: int) -> CheckpointLocation:
        return CheckpointLocation(self.root / "0" / str(partition), f"0/{partition}/default")

    def history(self, partition: int, versions: int) -> CheckpointLocation:
        """Versions 1..`versions` of the partition committed to its checkpoint location (version v adds v keys)."""
        location = self.location(partition)
        with VersionedStore.open(self.root.parent / f"primary-{partition}", location.store_id, OPTIONS) as store:
            for v in range(1, versions + 1):
                for i in range(v):
                    store.put(f"k{v}-{i}".encode(), b"x")
                location.commit(store)
        return location

    def hand_to_node(self, store: VersionedStore) -> str:
        """Close `store` and hand its directory to the node to adopt as a replica, as a provider's close() does."""
        version, lineage, path = store.version, store.lineage, store.path
        store.close()
        frame = encode_demote(Demote(store.store_id, str(self.location(int(store.store_id.split("/")[1])).path),
                                     version, lineage, str(path)))
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(20)
            conn.connect(str(self.sockets["n"]))
            conn.sendall(frame)
            received = read_frame(conn)
        assert received is not None
        reply = decode_reply(received[1])
        assert reply.status == STATUS_ACCEPTED and "adopted" in reply.message, reply
        return reply.message

    def load(self, partition: int, version: int, node: str = "n", peer_fetch: str = "never") -> dict[str, str]:
        """LoadCheck's report of loading `version` of the partition through our provider beside `node`."""
        local = self.root.parent / f"local-{node}"
        result = subprocess.run(
            ["java", "-Xmx256m", "-cp", self.classpath, "io.statestore.spark.LoadCheck", str(self.root),
             str(partition), str(local), str(self.sockets[node]), str(version), peer_fetch],
            capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        line = result.stdout.strip().splitlines()[-1]
        fields = dict(part.split("=", 1) for part in line.split(" ", 4))
        return fields


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("loads")
    classes = tmp / "classes"
    classes.mkdir()
    classpath = f"{provider_jar()}:{pyspark_jars_dir() / '*'}"
    subprocess.run(["javac", "--release", "17", "-nowarn", "-cp", classpath, "-d", str(classes),
                    str(DRIVER / "LoadCheck.java")], check=True, capture_output=True, text=True)
    cluster = Cluster(tmp, q=1)
    sockets = {name: tmp / name / "node.sock" for name in ("n", "m")}
    try:
        cluster.start_controller()
        for name, sock in sockets.items():
            argv = statestore_command("node", "--local-socket", str(sock), "--data-dir", str(cluster.data_dir(name)),
                                      "--listen", "127.0.0.1:0", "--node-id", name, "--controller",
                                      cluster.controller_address, "--heartbeat-interval", "0.1")
            node = cluster.processes[name] = Process(name, argv, tmp / f"{name}.log")
            node.start()
            wait_until(lambda s=sock, n=node: s.exists() or n.popen.poll() is not None, 20, f"{name}'s local socket")
            assert node.popen.poll() is None, node.log()
        yield Setup(cluster, sockets, f"{classes}:{classpath}", tmp / "state")
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.close()


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
