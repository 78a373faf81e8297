"""A rig for measuring and checking where the provider's load takes its state from, with real state nodes and
the provider's own Java code (spark_provider/java_test/io/statestore/spark/LoadCheck.java) and no Spark
scheduler: a controller, two nodes serving local sockets, a state root whose partitions' histories are written
with the engine, copies handed to a node as a provider's unloaded directories (DEMOTE). Used by
tests/test_load_sources.py and bench/load_source_bench.py. Holds no tests of its own."""

from __future__ import annotations

import contextlib
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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

    def hand_to_node(self, store: VersionedStore, announced: tuple[int, bytes] | None = None) -> str:
        """Close `store` and hand its directory to the node to adopt as a replica, as a provider's close() does
        (announcing `announced`, the version and lineage, instead of the store's own when given)."""
        version, lineage, path = store.version, store.lineage, store.path
        if announced is not None:
            version, lineage = announced
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
        return self.loads(partition, version, node, peer_fetch)[-1]

    def loads(
        self, partition: int, version: int, node: str = "n", peer_fetch: str = "never", *extra: str
    ) -> list[dict[str, str]]:
        """LoadCheck's reports, one per load (`extra`: LoadCheck's further arguments)."""
        local = self.root.parent / f"local-{node}"
        result = subprocess.run(
            ["java", "-Xmx256m", "-cp", self.classpath, "io.statestore.spark.LoadCheck", str(self.root),
             str(partition), str(local), str(self.sockets[node]), str(version), peer_fetch, *extra],
            capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        lines = [line for line in result.stdout.strip().splitlines() if line.startswith("source=")]
        return [dict(part.split("=", 1) for part in line.split(" ", 5)) for line in lines]


@contextlib.contextmanager
def load_rig(tmp: Path, provider_dir: Path | None = None) -> Iterator[Setup]:
    """A controller and two nodes ("n", "m") serving local sockets, and LoadCheck compiled, under `tmp`; the
    processes' logs are printed if the body fails. The providers' directories are beneath `provider_dir` (default
    `tmp`, the nodes' data dirs' parent), the only place the nodes take local-channel paths from."""
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
                                      cluster.controller_address, "--heartbeat-interval", "0.1",
                                      *(["--provider-dir", str(provider_dir)] if provider_dir else []))
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


