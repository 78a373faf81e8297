"""The application's secret (statestore.auth): a controller and nodes started with it refuse every call without it
or with another one (UNAUTHENTICATED, logged with the caller and the method), and serve replication and status to
callers that carry it; `enable()` makes one per application; the local socket is its owner's only; a controller
for a cluster does not listen on every interface unasked."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from test_node_harness import Cluster, Primary, replica_digest, running_cluster, wait_until

from statestore import auth
from statestore.rpc import common_pb2, control_pb2, control_pb2_grpc, replication_pb2, replication_pb2_grpc

SECRET = "0123456789abcdef" * 4


@pytest.fixture
def secured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """A controller and nodes a, b (q=1) started with the secret; b also serves a local socket."""
    monkeypatch.setenv(auth.SECRET_ENV, SECRET)  # the processes inherit it; this process's clients send it
    with running_cluster(tmp_path, ("a", "b"), 1, extra={"b": ("--local-socket", str(tmp_path / "b.sock"))}) as cluster:
        yield cluster


def refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as error:
        call()
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED, (error.value.code(), error.value.details())
    return error.value


def unauthenticated_events(cluster: Cluster, name: str) -> list[dict]:
    return [
        json.loads(line)
        for line in cluster.processes[name].log().splitlines()
        if line.startswith("{") and '"call_unauthenticated"' in line
    ]


def test_callers_without_the_secret_or_with_another_are_refused_and_logged(secured: Cluster) -> None:
    store = common_pb2.StoreRef(store_id="0/0/default", checkpoint_dir="/nowhere")
    pull = replication_pb2.PullRequest(store=store, from_version=1, to_version=3)
    ship = replication_pb2.ShipRequest(increment=common_pb2.IncrementBlob(store=store, version=1))
    for channel, why in (
        (grpc.insecure_channel, "no secret"),
        (lambda a: auth.channel(a, secret="guess"), "a wrong secret"),
    ):
        with channel(secured.controller_address) as to_controller:
            error = refused(
                lambda c=to_controller: control_pb2_grpc.ControlStub(c).Status(control_pb2.StatusRequest(), timeout=5)
            )
            assert f"carries {why}" in error.details()
            refused(lambda c=to_controller: control_pb2_grpc.ControlStub(c).Register(
                control_pb2.RegisterRequest(node=control_pb2.NodeRef(node_id="intruder", address="127.0.0.1:1")),
                timeout=5,
            ))  # fmt: skip
        with channel(secured.addresses["a"]) as to_node:
            refused(lambda c=to_node: list(replication_pb2_grpc.ReplicationStub(c).Pull(pull, timeout=5)))
            refused(lambda c=to_node: replication_pb2_grpc.PrimaryStub(c).Release(store, timeout=5))
            refused(lambda c=to_node: list(replication_pb2_grpc.ReplicationStub(c).Ship(iter([ship]), timeout=5)))
    for name in ("controller", "a"):
        events = unauthenticated_events(secured, name)
        assert {e["why"] for e in events} == {"no secret", "a wrong secret"}, events
        assert all(e["peer"] and e["method"].startswith("/statestore.rpc.") for e in events), events
    assert not any(n.node.node_id == "intruder" for n in secured.status().nodes)


def test_with_the_secret_replication_and_status_work(secured: Cluster, tmp_path: Path) -> None:
    primary = Primary(tmp_path, "0/1/default", secured.addresses["a"])
    try:
        for result in primary.commit_and_ship(5, sync=True):
            assert result.synced and {r.node_id for r in result.replicas} == {"b"}, result
        last = primary.store.version
        wait_until(lambda: secured.held("b", "0/1/default") == last, what="b holds the last version")
        assert replica_digest(secured.data_dir("b"), "0/1/default") == (last, primary.digest())
    finally:
        primary.close()
    assert all(n.alive for n in secured.status().nodes)  # heartbeats carry the secret
    assert not unauthenticated_events(secured, "controller") and not unauthenticated_events(secured, "b")


def test_a_node_without_the_secret_cannot_join(secured: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(auth.SECRET_ENV, "not-the-applications")
    secured.start_node("stranger")
    wait_until(lambda: unauthenticated_events(secured, "controller"), what="the stranger's refused heartbeat")
    monkeypatch.setenv(auth.SECRET_ENV, SECRET)
    assert "stranger" not in {n.node.node_id for n in secured.status().nodes}


def test_the_local_socket_is_its_owners_only(secured: Cluster, tmp_path: Path) -> None:
    mode = stat.S_IMODE((tmp_path / "b.sock").stat().st_mode)
    assert mode == 0o600, oct(mode)


def test_enable_makes_a_secret_per_application_and_its_controller_requires_it() -> None:
    from pyspark.sql import SparkSession

    from spark_provider import enable

    key = "spark.sql.streaming.stateStore.statestore.secret"
    first = enable(SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false"))
    secret = first._options[key]
    assert len(secret) == 64
    spark = first.getOrCreate()  # the plugin's driver side starts the controller as a sidecar of the JVM
    try:
        address = spark.conf.get("spark.sql.streaming.stateStore.statestore.controller")
        # (Over TLS if this process's JVM was started with a TLS application's confs: the registration says.)
        with auth.channel(address, secret="") as without:
            refused(lambda: control_pb2_grpc.ControlStub(without).Status(control_pb2.StatusRequest(), timeout=5))
        # This process's clients (operator calls) find the secret in the controller's registration on this host.
        with auth.channel(address) as registered:
            control_pb2_grpc.ControlStub(registered).Status(control_pb2.StatusRequest(), timeout=5)
        with auth.channel(address, secret="not-" + secret) as wrong:
            refused(lambda: control_pb2_grpc.ControlStub(wrong).Status(control_pb2.StatusRequest(), timeout=5))
    finally:
        spark.stop()
    second = enable(SparkSession.builder.master("local[1]").config("spark.authenticate.secret", "sparks-own"))
    assert second._options[key] == "sparks-own" != secret  # Spark's own secret when the user set one


def test_pull_and_bootstrap_serve_only_partitions_the_node_knows(secured: Cluster, tmp_path: Path) -> None:
    """A caller with the secret still cannot read an arbitrary checkpoint location through a node."""
    shipped = Primary(tmp_path / "shipped", "0/2/default", secured.addresses["a"])
    unshipped = Primary(tmp_path / "unshipped", "0/3/default", secured.addresses["a"])
    try:
        shipped.commit_and_ship(3, sync=True)
        for seed in range(12):  # committed to its checkpoint location (a snapshot too), never shipped to a node
            unshipped.commit(seed)
        unshipped.location.write_snapshot(unshipped.store)
        with auth.channel(secured.addresses["a"]) as channel:
            stub = replication_pb2_grpc.ReplicationStub(channel)
            served = list(stub.Pull(replication_pb2.PullRequest(store=shipped.ref, from_version=1, to_version=3)))
            assert [b.version for b in served] == [1, 2, 3]
            for call in (
                lambda: list(stub.Pull(replication_pb2.PullRequest(store=unshipped.ref, from_version=1, to_version=3))),
                lambda: list(stub.Bootstrap(replication_pb2.BootstrapRequest(store=unshipped.ref), timeout=10)),
            ):
                with pytest.raises(grpc.RpcError) as error:
                    call()
                assert error.value.code() == grpc.StatusCode.NOT_FOUND
                assert "serves only partitions it is primary of" in error.value.details()
    finally:
        shipped.close()
        unshipped.close()
