"""Spark Connect: a Connect server started with our jar and confs serves a client's stateful streaming query on
our provider, and the client needs nothing of ours (tests/connect_client.py refuses our packages). An executor
killed with SIGKILL fails over to replicas (the load sources in the client's query progress), and every
micro-batch's output equals Spark's RocksDB provider's on the same input, run from the same client."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import grpc
import pyspark

from spark_provider.jar import provider_jar
from spark_provider.local_cluster import kill_executor
from spark_provider.settings import PLUGIN_CLASS, PREFIX
from statestore import auth
from statestore.controller.simulated_cluster import free_port
from statestore.rpc import control_pb2, control_pb2_grpc
from statestore.waiting import wait_for

HERE = Path(__file__).resolve().parent
SPARK_HOME = Path(pyspark.__file__).parent
KEYS = [f"k{i}" for i in range(40)]
SECRET = "the-connect-test-secret"


OPERATOR = """
from pyspark.sql import SparkSession
import spark_provider
session = SparkSession.builder.remote({remote!r}).getOrCreate()
print(spark_provider.status(spark=session, text=True))
print("PLANNED", spark_provider.rebalance(dry_run=True, spark=session).kind)
"""


def _status(address: str) -> control_pb2.StatusReply:
    with auth.channel(address) as channel:
        return control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=5)


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _write_batches(directory: Path, count: int) -> None:
    directory.mkdir()
    rng = random.Random(7)
    for index in range(count):
        rows = [{"key": rng.choice(KEYS), "value": rng.randrange(100)} for _ in range(300)]
        (directory / f"{index:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_connect_client_runs_a_stateful_query_on_our_provider_through_a_kill(tmp_path: Path) -> None:
    _write_batches(tmp_path / "batches", 6)
    port, controller_port = free_port(), free_port()
    server_log = open(tmp_path / "connect-server.log", "wb")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(
        [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master", "local-cluster[3,1,1024]",
            "--jars", str(provider_jar()),
            "--conf", f"spark.plugins={PLUGIN_CLASS}",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", f"{PREFIX}controllerPort={controller_port}",
            "--conf", f"{PREFIX}secret={SECRET}",
            "spark-internal",
        ],
        stdout=server_log,
        stderr=subprocess.STDOUT,
        # The server runs the client's foreachBatch function with PYSPARK_PYTHON (its environment, not a conf).
        env={**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable},
        cwd=tmp_path,
        start_new_session=True,
    )
    client = None
    try:
        wait_for(lambda: server.poll() is not None or _listening(port), 180, "the Connect server listening")
        assert server.poll() is None, (tmp_path / "connect-server.log").read_text()[-6000:]
        client = subprocess.Popen(
            [sys.executable, str(HERE / "connect_client.py"), f"sc://127.0.0.1:{port}", str(tmp_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(tmp_path / "client.log", "wb"),  # noqa: SIM115 (the child keeps it)
            text=True,
            cwd=tmp_path,
        )
        address = client.stdout.readline().removeprefix("CONTROLLER ").strip()
        assert address == f"127.0.0.1:{controller_port}", (tmp_path / "client.log").read_text()[-4000:]
        auth.remember(address, SECRET)
        assert client.stdout.readline().strip() == "KILL", (tmp_path / "client.log").read_text()[-4000:]

        def caught_up() -> bool:
            try:
                reply = _status(address)
            except grpc.RpcError:
                return False
            return bool(reply.partitions) and all(
                p.replicas and all(r.version_held == p.primary_version for r in p.replicas) for p in reply.partitions
            )

        try:
            wait_for(caught_up, 60, "every partition with a caught-up replica")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; status: {_status(address)}") from None
        by_node: dict[str, list[str]] = defaultdict(list)
        for partition in _status(address).partitions:
            by_node[partition.primary_node].append(partition.store.store_id)
        victim = max(sorted(by_node), key=lambda node: len(by_node[node]))
        kill_executor(victim)
        wait_for(
            lambda: all(p.steered_to for p in _status(address).partitions if p.store.store_id in by_node[victim]),
            60,
            f"the partitions of executor {victim} steered to their replicas",
        )
        # The Python API from a Spark Connect session (in a process of its own: a Connect session marks its
        # process as a Connect client for good): the controller's address and secret are the session's confs.
        operator = subprocess.run(
            [sys.executable, "-c", OPERATOR.format(remote=f"sc://127.0.0.1:{port}")],
            capture_output=True, text=True, timeout=120, cwd=HERE.parent,
        )  # fmt: skip
        assert operator.returncode == 0, operator.stderr[-4000:]
        assert "0/0/default" in operator.stdout and "FAILOVER" in operator.stdout, operator.stdout
        assert "PLANNED rebalance" in operator.stdout, operator.stdout
        client.stdin.write("killed\n")
        client.stdin.flush()
        lines = client.stdout.read().splitlines()
        client.wait(timeout=300)
        assert client.returncode == 0, (tmp_path / "client.log").read_text()[-6000:]
        (result,) = [json.loads(line.removeprefix("RESULT ")) for line in lines if line.startswith("RESULT ")]
    finally:
        if client is not None and client.poll() is None:
            client.kill()
        server.terminate()
        try:
            server.wait(timeout=60)
        finally:
            if server.poll() is None:
                server.kill()
            server_log.close()
    lost = len(by_node[victim])
    sources = result["after_kill"]
    assert sources.get("statestoreLoadSourceReplica", 0) >= lost, (victim, lost, sources)
    assert sources.get("statestoreLoadSourceCheckpoint", 0) == 0, (victim, lost, sources)
    assert len(result["ours"]) == 6 and result["ours"] == result["spark"]
    assert all(result["ours"]), "every micro-batch had output"
    assert not any(_listening(p) for p in (port, controller_port)), "the server and its controller still listen"
