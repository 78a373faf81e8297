"""Node addresses for several hosts: what a node advertises, replica links keyed by node id, and acks from
another process at a replica's old address refused. Real node processes and real gRPC on loopback."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from test_node_harness import (
    Cluster,
    Primary,
    Process,
    is_serving,
    replica_digest,
    running_cluster,
    statestore_command,
    wait_until,
)

from statestore.node.server import NodeStartupError, advertised_address, first_free_address
from statestore.node.settings import NodeSettings


def _settings(listen: str, advertise: str = "", executor_host: str = "") -> NodeSettings:
    return NodeSettings(listen=listen, data_dir=Path("/nonexistent"), advertise=advertise, executor_host=executor_host)


@pytest.mark.parametrize(
    ("listen", "advertise", "executor_host", "expected"),
    [
        ("10.1.0.2:0", "", "10.1.0.2", ""),  # a concrete host: peers call the address it bound
        ("0.0.0.0:0", "", "10.1.0.2", "10.1.0.2:4711"),  # every interface: the executor's host
        ("[::]:0", "", "fd00::2", "[fd00::2]:4711"),
        ("0.0.0.0:0", "node-a.example:0", "10.1.0.2", "node-a.example:4711"),  # port 0: the bound one
        ("0.0.0.0:0", "node-a.example", "", "node-a.example:4711"),  # no port: the bound one
        ("0.0.0.0:4711", "proxy.example:9000", "", "proxy.example:9000"),  # as given
    ],
)
def test_a_node_advertises_an_address_peers_can_call(
    listen: str, advertise: str, executor_host: str, expected: str
) -> None:
    assert advertised_address(_settings(listen, advertise, executor_host), 4711) == expected


def test_a_wildcard_listener_without_executor_host_advertises_this_machine() -> None:
    advertised = advertised_address(_settings("0.0.0.0:0"), 4711)
    assert advertised == f"{socket.getfqdn()}:4711"
    assert not advertised.startswith("0.0.0.0")


def _imposter(cluster: Cluster, address: str) -> Process:
    """Another node process, with its own id and no controller, listening at `address`."""
    argv = statestore_command(
        "node", "--listen", address, "--data-dir", str(cluster.root / "imposter-data"), "--node-id", "imposter"
    )
    process = Process("imposter", argv, cluster.root / "imposter.log")
    cluster.processes["imposter"] = process
    process.start()
    wait_until(lambda: is_serving(address) or process.popen.poll() is not None, 20, "imposter serving")
    assert process.popen.poll() is None, process.log()
    return process


def test_acks_from_another_process_at_a_replicas_address_are_refused(tmp_path: Path) -> None:
    # The controller must not declare node-b dead during the test: the group keeps naming it at its old address.
    with running_cluster(tmp_path, ("node-a", "node-b"), q=1, dead_after=120.0) as cluster:
        primary = Primary(tmp_path, "0/2/default", cluster.addresses["node-a"])
        try:
            result = primary.commit_and_ship(3, sync=True)[-1]
            assert {r.node_id: r.acked_version for r in result.replicas} == {"node-b": 3}

            cluster.processes["node-b"].kill9()
            imposter = _imposter(cluster, cluster.addresses["node-b"])
            primary.commit_and_ship(2)
            node_a_log = cluster.processes["node-a"].log
            wait_until(lambda: "ack_from_wrong_node" in node_a_log(), 20, "node-a refusing the imposter's acks")
            assert "imposter" in node_a_log()
            # The imposter answered, but node-b's acked version is still the one node-b gave.
            report = primary.ship(primary.commit(0), sync=False)
            assert {r.node_id: r.acked_version for r in report.replicas} == {"node-b": 3}
            imposter.kill9()
        finally:
            primary.close()


def test_a_replica_that_comes_back_at_another_address_is_followed_there(tmp_path: Path) -> None:
    with running_cluster(tmp_path, ("node-a", "node-b"), q=1, dead_after=120.0) as cluster:
        primary = Primary(tmp_path, "0/3/default", cluster.addresses["node-a"])
        try:
            primary.commit_and_ship(3, sync=True)
            old_address = cluster.addresses["node-b"]
            cluster.processes["node-b"].kill9()
            del cluster.addresses["node-b"]  # the same node id, started again on another port
            new_address = cluster.start_node("node-b")
            assert new_address != old_address
            wait_until(
                lambda: any(n.node.address == new_address for n in cluster.status().nodes), 20, "new address known"
            )
            primary.commit_and_ship(4)
            last = primary.store.version
            wait_until(lambda: cluster.held("node-b", "0/3/default") == last, 30, f"node-b at {last}")
            assert replica_digest(cluster.data_dir("node-b"), "0/3/default") == (last, primary.digest())
            assert "replica_link_moved" in cluster.processes["node-a"].log()
        finally:
            primary.close()


def test_a_taken_node_port_moves_to_the_next_free_one() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(NodeStartupError, match=f"cannot listen on 127.0.0.1:{port}"):
            first_free_address(f"127.0.0.1:{port}", 0)
        moved = first_free_address(f"127.0.0.1:{port}", 16)
        assert moved != f"127.0.0.1:{port}" and port < int(moved.rpartition(":")[2]) <= port + 16
    assert first_free_address("127.0.0.1:0", 16) == "127.0.0.1:0"
