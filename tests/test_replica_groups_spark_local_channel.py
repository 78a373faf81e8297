"""The node's end of the provider's local channel (docs/formats.md section 6), with real node processes and
a real Unix socket, the test playing the provider: COMMITTED frames take the Primary.Ship path (verified,
shipped, answered in order; sync waits for an ack; the rewrite bit reaches the shipper), bad frames are
refused, RELEASED ends the node's primary role, and the sidecar's start-up conditions (stale or busy
socket, long path, parent gone)."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_node_harness import PROJECT_ROOT, Cluster, Primary, Process, replica_digest, statestore_command, wait_until

from statestore.node.local_channel import (
    COMMITTED,
    INCOMING,
    INCOMING_LIST,
    STATUS_ACCEPTED,
    STATUS_REFUSED,
    STATUS_REPLICATED,
    Committed,
    Incoming,
    IncomingList,
    Load,
    Released,
    Reply,
    decode_incoming_list,
    decode_reply,
    encode_committed,
    encode_incoming_list,
    encode_load,
    encode_released,
    frame,
    read_frame,
)
from statestore.rpc import control_pb2

STORE = "5/0/default"


def _sidecar_argv(data_dir: Path, sock: Path, *extra: str) -> list[str]:
    return statestore_command(
        "node", "--local-socket", str(sock), "--data-dir", str(data_dir), "--listen", "127.0.0.1:0", *extra
    )


class Provider:
    """The test's stand-in for the Java provider: one connection, one request at a time."""

    def __init__(self, path: Path) -> None:
        self.conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.conn.settimeout(30)
        self.conn.connect(str(path))

    def request(self, data: bytes) -> Reply:
        self.conn.sendall(data)
        received = read_frame(self.conn)
        assert received is not None, "the node closed the channel"
        frame_type, fields = received
        assert frame_type == 2
        return decode_reply(fields)

    def committed(self, primary: Primary, data: bytes, sync: bool = False, rewrites: bool = False) -> Reply:
        version = primary.store.version
        message = Committed(STORE, primary.ref.checkpoint_dir, version, sync, rewrites, data)
        return self.request(encode_committed(message))

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def channel_cluster(tmp_path: Path) -> Iterator[tuple[Cluster, Path]]:
    """A controller, node-b as replica, and node-a serving the local channel on a port it picks itself."""
    cluster = Cluster(tmp_path, q=1)
    sock = tmp_path / "a" / "node.sock"
    try:
        cluster.start_controller()
        cluster.start_node("node-b")
        argv = _sidecar_argv(
            cluster.data_dir("node-a"),
            sock,
            "--node-id",
            "node-a",
            "--controller",
            cluster.controller_address,
            "--heartbeat-interval",
            "0.1",
        )
        node_a = Process("node-a", argv, tmp_path / "node-a.log")
        cluster.processes["node-a"] = node_a
        node_a.start()
        wait_until(lambda: sock.exists() or node_a.popen.poll() is not None, 20, "node-a's local socket")
        assert node_a.popen.poll() is None, node_a.log()
        cluster.wait_groups(2)
        yield cluster, sock
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.close()


def test_committed_frames_are_shipped_and_answered(channel_cluster: tuple[Cluster, Path], tmp_path: Path) -> None:
    cluster, sock = channel_cluster
    primary = Primary(tmp_path, STORE, "unused:0")
    provider = Provider(sock)
    try:
        for i in range(5):
            reply = provider.committed(primary, primary.commit(i), sync=True)
            assert reply.status == STATUS_REPLICATED, reply
        for i in range(5, 12):
            assert provider.committed(primary, primary.commit(i)).status == STATUS_ACCEPTED
        last = primary.store.version
        wait_until(lambda: cluster.held("node-b", STORE) == last, 20, f"node-b at {last}")
        assert replica_digest(cluster.data_dir("node-b"), STORE) == (last, primary.digest())
        # The node registered with the port it bound (it was started with --listen 127.0.0.1:0).
        addresses = {n.node.node_id: n.node.address for n in cluster.status().nodes}
        assert addresses["node-a"].startswith("127.0.0.1:") and not addresses["node-a"].endswith(":0")

        good = primary.commit(12)
        damaged = bytearray(good)
        damaged[len(damaged) // 2] ^= 0xFF
        reply = provider.committed(primary, bytes(damaged))
        assert reply.status == STATUS_REFUSED and "refused increment" in reply.message
        wrong = Committed(STORE, primary.ref.checkpoint_dir, primary.store.version + 5, False, False, good)
        reply = provider.request(encode_committed(wrong))
        assert reply.status == STATUS_REFUSED and "its increment says" in reply.message
        reply = provider.request(frame(99, b""))
        assert reply.status == STATUS_REFUSED and "not supported" in reply.message
        assert provider.committed(primary, good).status == STATUS_ACCEPTED  # the channel still works

        # The rewrite bit reaches the shipping path (what replicas then do is the shipper's business).
        assert provider.committed(primary, good, rewrites=True).status == STATUS_ACCEPTED
        events = [json.loads(line) for line in cluster.processes["node-a"].log().splitlines() if line.startswith("{")]
        rewrites = [e for e in events if e["event"] == "history_rewritten"]
        assert rewrites and rewrites[-1]["reason"] == "flagged" and rewrites[-1]["version"] == 13

        # RELEASED (the provider unloaded the store): node-a stops being its primary and stops reporting it.
        released = encode_released(Released(STORE, primary.ref.checkpoint_dir))
        assert provider.request(released) == Reply(STATUS_ACCEPTED, "released")
        assert provider.request(released) == Reply(STATUS_ACCEPTED, "was not primary here")
        wait_until(lambda: {n.node.node_id: n.primaries for n in cluster.status().nodes}["node-a"] == 0, 10, "no claim")
        assert provider.committed(primary, primary.commit(13)).status == STATUS_ACCEPTED  # primary again
        wait_until(lambda: {n.node.node_id: n.primaries for n in cluster.status().nodes}["node-a"] == 1, 10, "a claim")
    finally:
        provider.close()
        primary.close()


def test_a_broken_frame_is_refused_and_the_connection_closed(channel_cluster: tuple[Cluster, Path]) -> None:
    _, sock = channel_cluster
    provider = Provider(sock)
    try:
        provider.conn.sendall(struct.pack(">I", 0))
        received = read_frame(provider.conn)
        assert received is not None and decode_reply(received[1]).status == STATUS_REFUSED
        assert provider.conn.recv(1) == b""  # framing is lost: the node hangs up, the provider reconnects
    finally:
        provider.close()
    again = Provider(sock)
    try:
        truncated = frame(COMMITTED, b"\x00\x05abc")
        assert again.request(truncated).status == STATUS_REFUSED
    finally:
        again.close()


def test_load_reports_reach_the_controllers_status(channel_cluster: tuple[Cluster, Path], tmp_path: Path) -> None:
    """LOAD frames after commits: the node keeps means over the last 8 and reports them with the partition; the
    executor's cores go with the node; a LOAD of a partition the node is not primary of is ignored."""
    cluster, sock = channel_cluster
    primary = Primary(tmp_path, STORE, "unused:0")
    provider = Provider(sock)
    try:
        for i in range(10):
            assert provider.committed(primary, primary.commit(i)).status == STATUS_ACCEPTED
            load = Load(STORE, primary.ref.checkpoint_dir, primary.store.version, 100 + 10 * i, 50, 4096 + i, 4)
            assert provider.request(encode_load(load)) == Reply(STATUS_ACCEPTED, "recorded")
        other = Load("5/9/default", primary.ref.checkpoint_dir, 1, 5, 5, 5, 4)
        assert provider.request(encode_load(other)) == Reply(STATUS_ACCEPTED, "not primary here: ignored")

        def reported() -> control_pb2.PartitionStatus | None:
            # The report of the last LOAD (its state bytes): a heartbeat between the ninth and tenth LOAD already
            # reports 8 batches, the mean of the eight before.
            found = [
                p for p in cluster.status().partitions
                if p.store.store_id == STORE and p.load.batches == 8 and p.load.state_bytes == 4096 + 9
            ]  # fmt: skip
            return found[0] if found else None

        wait_until(lambda: reported() is not None, 20, "the load report in the controller's status")
        load = reported().load
        assert load.task_millis == sum(100 + 10 * i for i in range(2, 10)) / 8  # the last 8 batches
        assert load.rows_written == 50 and load.state_bytes == 4096 + 9
        node = next(n for n in cluster.status().nodes if n.node.node_id == "node-a")
        assert node.node.executor_cores == 4
    finally:
        provider.close()
        primary.close()


def test_incoming_list_frames_round_trip() -> None:
    entries = [Incoming("0/1/default", "/ckpt/state/0/1", 7), Incoming("0/1/left-keyToNumValues", "s3://b/c", 0)]
    data = encode_incoming_list(IncomingList(entries))
    assert data[4] == INCOMING_LIST
    assert decode_incoming_list(data[5:]).entries == entries
    assert decode_incoming_list(encode_incoming_list(IncomingList([]))[5:]).entries == []


def test_incoming_is_answered_with_the_partitions_moving_here(channel_cluster: tuple[Cluster, Path]) -> None:
    """No operation runs: the node answers INCOMING with an empty INCOMING_LIST (a running move's targets are
    listed by the controller's heartbeat reply: tests/test_handover_units.py, and the executor opening them ahead:
    tests/test_handover_spark.py); an INCOMING with fields is refused."""
    _, sock = channel_cluster
    provider = Provider(sock)
    try:
        provider.conn.sendall(frame(INCOMING, b""))
        received = read_frame(provider.conn)
        assert received is not None and received[0] == INCOMING_LIST
        assert decode_incoming_list(received[1]).entries == []
        assert provider.request(frame(INCOMING, b"x")).status == STATUS_REFUSED
    finally:
        provider.close()


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT)


def test_a_stale_socket_is_replaced_and_a_busy_one_refused(tmp_path: Path) -> None:
    sock = tmp_path / "node.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock))
    stale.close()  # the file stays, nobody listens: what a killed node leaves
    first = Process("first", _sidecar_argv(tmp_path / "d1", sock), tmp_path / "first.log")
    first.start()
    try:
        wait_until(lambda: "local_channel_listening" in first.log(), 20, "the first node listening")
        assert "local_channel_stale_socket_removed" in first.log()
        second = _run(_sidecar_argv(tmp_path / "d2", sock))
        assert second.returncode == 2
        assert f"local socket {sock} is in use: another node listens there" in second.stderr
    finally:
        first.terminate()
    assert first.popen.returncode == 0 and not sock.exists()


def test_a_too_long_socket_path_is_a_clear_error(tmp_path: Path) -> None:
    sock = tmp_path / ("x" * 120) / "node.sock"
    result = _run(_sidecar_argv(tmp_path / "d", sock))
    assert result.returncode == 2
    assert "is too long" in result.stderr


def test_a_sidecar_exits_with_its_parent(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    sock = tmp_path / "node.sock"
    node = Process("sidecar", _sidecar_argv(tmp_path / "d", sock, "--parent-pid", str(parent.pid)), tmp_path / "n.log")
    node.start()
    try:
        wait_until(lambda: sock.exists(), 20, "the sidecar listening")
        assert node.popen.poll() is None
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        assert node.popen.wait(timeout=15) == 0
        assert "parent_gone" in node.log() and not sock.exists()
    finally:
        parent.kill()
        node.kill9()
