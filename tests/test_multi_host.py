"""Several hosts for real: a Spark standalone master, three workers and the driver, each in its own network
namespace with its own address on a bridge. Our provider with q=1 replicates between the workers' addresses
(every state node listens on and advertises its executor's host, never loopback), an executor is killed with
SIGKILL and its partitions fail over to replicas on other hosts, and every batch's output equals Spark's RocksDB
provider's on the same input. Skipped, saying why, where network namespaces cannot be made (not root)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns_cluster import NetnsHosts, StandaloneCluster, unavailable_reason
from netns_driver import CONTROLLER_PORT, NODE_PORT

HERE = Path(__file__).resolve().parent
WORKERS = ("w1", "w2", "w3")

_why_not = unavailable_reason()
pytestmark = pytest.mark.skipif(_why_not is not None, reason=f"several hosts on one machine: {_why_not}")


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[NetnsHosts]:
    hosts = NetnsHosts(tmp_path, ("driver", "master", *WORKERS))
    try:
        hosts.create()
        yield hosts
    finally:
        hosts.close()


def _logs(root: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-6000:]}" for p in sorted(root.glob("*.log")))


def test_replication_and_failover_cross_hosts_with_results_equal_to_spark_rocksdb(
    hosts: NetnsHosts, tmp_path: Path
) -> None:
    cluster = StandaloneCluster(hosts, "master", WORKERS)
    cluster.start()
    out = tmp_path / "driver.json"
    driver = hosts.hosts["driver"]
    command = driver.command(
        [sys.executable, str(HERE / "netns_driver.py"), str(tmp_path), cluster.master_url, driver.address, str(out)]
    )
    with open(tmp_path / "driver.log", "ab") as log:
        finished = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, cwd=HERE.parent, timeout=900)
    exited_at = time.time()
    report = json.loads(out.read_text()) if out.exists() else {}
    assert finished.returncode == 0, f"the driver failed; report {report}\n{_logs(tmp_path)}"
    # It called spark.stop() as its last line, and its process ended soon after (our controller in it, which
    # nodes on other hosts kept calling until their executors ended, never held it at exit).
    stopped_at = float(out.with_suffix(".stopped").read_text())
    assert exited_at - stopped_at < 10.0, f"the driver exited {exited_at - stopped_at:.1f}s after its last line"

    worker_addresses = {hosts.hosts[w].address for w in WORKERS}
    node_hosts = {node: address.rpartition(":")[0] for node, address in report["nodes"].items()}
    # One node per executor, each on its own worker's address: never loopback, never a wildcard.
    assert len(node_hosts) == len(WORKERS), report
    assert set(node_hosts.values()) == worker_addresses, report
    assert not any(ipaddress.ip_address(h).is_loopback for h in node_hosts.values()), report
    assert report["controller"] == f"{driver.address}:{CONTROLLER_PORT}", report
    # The ports set (node_port, controller_port): one executor per host, so each node has the first one.
    assert {int(a.rpartition(":")[2]) for a in report["nodes"].values()} == {NODE_PORT}, report
    # Every partition's replica is on another host than its primary and holds a copy (warm() waited until each
    # was at its primary's version; the status read after it may show a primary's report a commit late).
    for store_id, group in report["groups"].items():
        replicas = group["replicas"]
        assert len(replicas) == 1, (store_id, group)
        (replica,) = replicas
        assert node_hosts[replica] != node_hosts[group["primary"]], (store_id, group)
        assert replicas[replica] > 0, (store_id, group)
    # The kill's lost partitions loaded from replicas on other hosts, none from the checkpoint location.
    assert report["lost"], report
    sources = report["load_sources_after_kill"]
    assert sources["replica"] == len(report["lost"]) and sources["checkpoint"] == 0, report
    assert report["results_match"] and report["batches_compared"] >= 5, report
