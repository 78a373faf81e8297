"""Network faults between real node processes through the fault proxy (statestore.faults.proxy): the link a primary's
node ships on is delayed, corrupted, duplicated, reordered, black-holed and cut, and a node is partitioned from the
controller while it still reaches its peers. Whatever the fault, once it heals the replica holds the primary's last
version with the primary's exact content, and nothing the primary committed is lost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_node_harness import Cluster, Primary, free_port, replica_digest, running_cluster, wait_until

from statestore.faults.link_faults import LINK_FAULTS_ENV
from statestore.faults.proxy import FaultProxy

STORE = "5/0/default"


@pytest.fixture
def linked(tmp_path: Path) -> Iterator[tuple[Cluster, FaultProxy]]:
    """A controller, node a (the primary's) and node b (its replica, q=1), b reached by its peers only through a
    fault proxy (b advertises the proxy's address)."""
    cluster = Cluster(tmp_path, q=1, dead_after=3.0)
    listen = f"127.0.0.1:{free_port()}"
    proxy = FaultProxy(listen, name="peers to b")
    try:
        proxy.start()
        cluster.start_controller()
        cluster.start_node("a")
        cluster.addresses["b"] = listen
        cluster.start_node("b", "--advertise", proxy.address)
        cluster.wait_groups(2)
        yield cluster, proxy
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.close()
        proxy.stop()


def caught_up(cluster: Cluster, primary: Primary, node: str = "b", timeout: float = 60) -> None:
    last = primary.store.version
    wait_until(lambda: cluster.held(node, STORE) == last, timeout, f"{node} at version {last}")
    assert replica_digest(cluster.data_dir(node), STORE) == (last, primary.digest())


@pytest.mark.parametrize(
    ("fault", "number"),
    [("delay", 150), ("corrupt", 3), ("duplicate", 2), ("reorder", 2), ("drop", 0), ("cut", 0)],
)
def test_the_replica_ends_identical_whatever_the_link_did(
    linked: tuple[Cluster, FaultProxy], tmp_path: Path, fault: str, number: int
) -> None:
    cluster, proxy = linked
    primary = Primary(tmp_path, STORE, cluster.addresses["a"])
    try:
        primary.commit_and_ship(3, sync=True)
        caught_up(cluster, primary)
        before = proxy.chunks
        proxy.set(fault, millis=number) if fault == "delay" else proxy.set(fault, every=max(number, 1))
        primary.commit_and_ship(6)  # shipped through the fault
        if fault == "delay":  # a slow link still acks a sync commit
            (result,) = primary.commit_and_ship(1, sync=True)
            assert result.synced, result
        wait_until(lambda: proxy.chunks > before or fault == "cut", 20, "traffic through the fault")
        proxy.set("pass")
        primary.commit_and_ship(3)
        caught_up(cluster, primary)
        assert primary.location.increment_versions() == list(range(1, primary.store.version + 1))
    finally:
        primary.close()


def test_a_node_partitioned_from_the_controller_is_dead_to_it_and_rejoins(tmp_path: Path) -> None:
    """Node c reaches the controller only through the proxy and its peers directly: cut, the controller declares
    it dead and re-places its replica on b; healed, c is alive again; the primary's replicas end identical."""
    cluster = Cluster(tmp_path, q=1, dead_after=2.0)
    cluster.start_controller()
    proxy = FaultProxy(cluster.controller_address, name="c to the controller")
    try:
        proxy.start()
        cluster.start_node("a")
        cluster.start_node("b")
        # c's heartbeats go through the proxy (its --controller); a later --controller wins in argparse.
        cluster.start_node("c", "--controller", proxy.address)
        cluster.wait_groups(3)
        primary = Primary(tmp_path, STORE, cluster.addresses["a"])
        try:
            primary.commit_and_ship(3, sync=True)
            alive = lambda name: any(n.node.node_id == name and n.alive for n in cluster.status().nodes)  # noqa: E731
            proxy.set("cut")
            wait_until(lambda: not alive("c"), 20, "the controller to declare c dead")
            assert alive("a") and alive("b")
            primary.commit_and_ship(5)
            # b holds the replica: it did before, or the controller re-placed c's there.
            wait_until(lambda: cluster.held("b", STORE) == primary.store.version, 60, "b to hold the partition")
            proxy.set("pass")
            wait_until(lambda: alive("c"), 30, "c to rejoin")
            primary.commit_and_ship(3)
            caught_up(cluster, primary, "b")
        finally:
            primary.close()
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.close()
        proxy.stop()


def cut_applied(log: str) -> bool:
    return any("proxy_fault" in line and "cut" in line for line in log.splitlines())


def test_a_node_told_by_the_link_faults_file_proxies_its_inbound_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With STATESTORE_LINK_FAULTS_FILE set (the fault suite's way into nodes Spark starts), node b advertises a
    proxy in front of its port that follows the file: `cut` stops b's replica, `pass` lets it catch up exactly."""
    links = tmp_path / "links"
    monkeypatch.setenv(LINK_FAULTS_ENV, str(links))
    with running_cluster(tmp_path, ("a", "b"), 1, dead_after=3.0) as cluster:
        advertised = {n.node.node_id: n.node.address for n in cluster.status().nodes}
        assert advertised["b"] != cluster.addresses["b"], advertised  # the proxy's address, not the port's
        primary = Primary(tmp_path, STORE, cluster.addresses["a"])
        try:
            primary.commit_and_ship(2, sync=True)
            caught_up(cluster, primary)
            held = cluster.held("b", STORE)
            links.write_text("cut\n")
            wait_until(lambda: cut_applied(cluster.processes["b"].log()), 10, "b's proxy to apply the cut")
            primary.commit_and_ship(3)
            assert cluster.held("b", STORE) == held  # nothing crossed the cut link
            links.write_text("pass\n")
            primary.commit_and_ship(1)
            caught_up(cluster, primary)
        finally:
            primary.close()
