"""The state node process: clear start-up errors, health checking, an unreachable controller, the
Primary.Ship entry point's checks, and graceful shutdown on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from test_node_harness import PROJECT_ROOT, Process, free_port, is_serving, statestore_command, wait_until

from statestore.checkpoint_location import CheckpointLocation
from statestore.rpc import common_pb2, replication_pb2, replication_pb2_grpc
from statestore.store import VersionedStore


def _run_node(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        statestore_command("node", *args), capture_output=True, text=True, timeout=30, cwd=PROJECT_ROOT
    )


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        result = _run_node("--listen", address, "--data-dir", str(tmp_path / "data"))
    assert result.returncode == 2
    assert f"cannot listen on {address}: Address already in use" in result.stderr


def test_unwritable_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = _run_node("--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(blocker / "data"))
    assert result.returncode == 2
    assert f"data dir {blocker / 'data'} is not writable" in result.stderr


@pytest.fixture
def lone_node(tmp_path: Path) -> Process:
    """A node whose controller is unreachable (nothing listens there)."""
    address = f"127.0.0.1:{free_port()}"
    argv = statestore_command(
        "node",
        "--listen",
        address,
        "--data-dir",
        str(tmp_path / "data"),
        "--controller",
        f"127.0.0.1:{free_port()}",
        "--heartbeat-interval",
        "0.1",
    )
    process = Process("lone", argv, tmp_path / "lone.log")
    process.start()
    process.address = address  # type: ignore[attr-defined]
    try:
        wait_until(lambda: is_serving(address), 20, "node serving")
        yield process
    finally:
        process.kill9()


def test_unreachable_controller_ship_checks_and_graceful_shutdown(lone_node: Process, tmp_path: Path) -> None:
    wait_until(lambda: '"event": "controller_unreachable"' in lone_node.log(), what="unreachable controller logged")
    store = VersionedStore.open(tmp_path / "primary", "0/0/default")
    location = CheckpointLocation(tmp_path / "checkpoint", "0/0/default")
    store.put(b"k", b"v")
    location.commit(store)
    data = location.increment_path(1).read_bytes()
    store.close()
    ref = common_pb2.StoreRef(store_id="0/0/default", checkpoint_dir=str(location.path))
    with grpc.insecure_channel(lone_node.address) as channel:  # type: ignore[attr-defined]
        stub = replication_pb2_grpc.PrimaryStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Ship(
                replication_pb2.ShipCommand(increment=common_pb2.IncrementBlob(store=ref, data=data[:-3])), timeout=10
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "truncated" in refused.value.details()
        result = stub.Ship(
            replication_pb2.ShipCommand(increment=common_pb2.IncrementBlob(store=ref, data=data), sync=True), timeout=10
        )
        assert result.version == 1 and not result.replicas and "no replica group" in result.detail
    lone_node.popen.send_signal(signal.SIGTERM)
    assert lone_node.popen.wait(timeout=15) == 0
    assert '"event": "stopped"' in lone_node.log()


def test_a_node_raises_its_open_files_limit_to_the_hard_one() -> None:
    """A node holds hundreds of replicas' files at Spark's 200 partitions: it does not stop at a soft limit of 512."""
    script = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (min(512, hard), hard))\n"
        "from statestore.node.server import raise_open_files_limit\n"
        "raise_open_files_limit()\n"
        "print(*resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    soft, hard = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    assert soft == hard


def test_replica_sizes_are_reported_coarsely_so_heartbeats_stay_unchanged_between_small_growths() -> None:
    """A replica's size is reported to within about 6%, never above the true size, and not 0 for a non-empty
    store: two measurements a few increments apart give the same figure, so the node's fingerprinted reports do
    not change (and are not sent in full) for them."""
    from statestore.node.replica import coarse_size

    assert coarse_size(0) == 0 and coarse_size(1) == 64 * 1024
    assert 70_000 - 64 * 1024 < coarse_size(70_000) <= 70_000
    for size in (1 << 20, 1_500_000, 10**9, 4 * 10**9 + 12_345):
        assert size * (1 - 1 / 16) < coarse_size(size) <= size
    assert coarse_size(500_000_000) == coarse_size(500_000_000 + 3 * 4096)
