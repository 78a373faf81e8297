"""The controller: ring replica groups, status with lag (and the `statestore status` table), and a dead
replica replaced in its group, with real node processes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_node_harness import (
    PROJECT_ROOT,
    Cluster,
    Primary,
    replica_digest,
    send_cont,
    send_stop,
    statestore_command,
    wait_until,
)

from statestore.controller.replica_groups import choose_replica_group

STORE = "1/0/default"


def test_replica_group_is_the_next_q_live_nodes_after_the_primary() -> None:
    nodes = ["a", "b", "c", "d"]
    assert choose_replica_group("p", "b", nodes, 1) == ["c"]
    assert choose_replica_group("p", "d", nodes, 2) == ["a", "b"]
    assert choose_replica_group("p", "c", nodes, 5) == ["d", "a", "b"]
    assert choose_replica_group("p", "a", nodes, 0) == []
    assert choose_replica_group("p", "b", ["a", "c"], 1) == ["c"]  # a primary not live keeps its ring place


def _cluster(tmp_path: Path, names: tuple[str, ...], q: int, dead_after: float) -> Cluster:
    cluster = Cluster(tmp_path, q=q, dead_after=dead_after)
    try:
        cluster.start_controller()
        for name in names:
            cluster.start_node(name)
        cluster.wait_groups(len(names))
    except BaseException:
        print(cluster.logs())
        cluster.close()
        raise
    return cluster


def _replica_row(cluster: Cluster, node: str) -> tuple[int, int, int] | None:
    for partition in cluster.status().partitions:
        if partition.store.store_id == STORE:
            for replica in partition.replicas:
                if replica.node_id == node:
                    return replica.version_held, replica.lag_versions, replica.lag_bytes
    return None


def test_status_shows_lag_in_versions_and_bytes(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, ("node-a", "node-b"), q=1, dead_after=30.0)
    primary = Primary(tmp_path, STORE, cluster.addresses["node-a"])
    try:
        primary.commit_and_ship(3, sync=True)
        wait_until(lambda: _replica_row(cluster, "node-b") == (3, 0, 0), what="node-b caught up")
        send_stop(cluster.processes["node-b"])  # a stalled replica: alive for the controller, acking nothing
        primary.commit_and_ship(4)
        row = wait_until(
            lambda: (r := _replica_row(cluster, "node-b")) and r[1] == 4 and r[2] > 0 and r, what="lag of 4 versions"
        )
        assert row[0] == 3
        table = subprocess.run(
            statestore_command("status", "--controller", cluster.controller_address),
            capture_output=True,
            text=True,
            timeout=30,
            cwd=PROJECT_ROOT,
            check=True,
        ).stdout
        line = next(line for line in table.splitlines() if line.startswith(STORE))
        assert line.split()[:7] == [STORE, "node-a", "7", "node-b", "3", "4", str(row[2])]
        assert "node-a" in table and "alive" in table
        send_cont(cluster.processes["node-b"])
        wait_until(lambda: _replica_row(cluster, "node-b") == (7, 0, 0), what="lag back to 0")
    finally:
        send_cont(cluster.processes["node-b"])
        primary.close()
        cluster.close()


def test_dead_replica_is_replaced_and_the_new_one_catches_up(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, ("node-a", "node-b", "node-c"), q=1, dead_after=1.5)
    primary = Primary(tmp_path, STORE, cluster.addresses["node-a"])
    try:
        primary.commit_and_ship(5, sync=True)
        assert _replica_row(cluster, "node-b") is not None
        cluster.processes["node-b"].kill9()
        wait_until(lambda: not {n.node.node_id: n.alive for n in cluster.status().nodes}["node-b"], what="b dead")
        primary.commit_and_ship(3)
        wait_until(lambda: _replica_row(cluster, "node-c") == (8, 0, 0), what="node-c replica at 8")
        assert replica_digest(cluster.data_dir("node-c"), STORE) == (8, primary.digest())
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        primary.close()
        cluster.close()
