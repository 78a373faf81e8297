"""A Java application submitted with `spark-submit --jars ... --conf ...` and no Python in its code keeps its
state in our provider with replication: the plugin's driver side starts the controller and links it to Spark, an
executor killed with SIGKILL fails over to replicas (steered by the driver JVM), and every micro-batch's output
equals an exact recomputation."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import urllib.request
import zipfile
from collections import defaultdict
from pathlib import Path

import grpc
import pyspark
import pytest

from spark_provider.local_cluster import kill_executor
from spark_provider.progress import load_sources
from statestore import auth
from statestore.controller.simulated_cluster import free_port
from statestore.rpc import control_pb2, control_pb2_grpc
from statestore.waiting import wait_for

HERE = Path(__file__).resolve().parent
SPARK_HOME = Path(pyspark.__file__).parent
PARTITIONS = 6
KEYS = [f"k{i}" for i in range(40)]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/java_app compiled with javac against pyspark's jars, in a jar of its own."""
    work = tmp_path_factory.mktemp("java-app")
    classes = work / "classes"
    classes.mkdir()
    source = HERE / "java_app" / "StatefulCounts.java"
    subprocess.run(["javac", "-d", str(classes), "-cp", str(SPARK_HOME / "jars" / "*"), str(source)], check=True)
    jar = work / "app.jar"
    with zipfile.ZipFile(jar, "w") as out:
        for path in classes.rglob("*.class"):
            out.write(path, path.relative_to(classes).as_posix())
    return jar


def _batch(seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"key": rng.choice(KEYS), "value": rng.randrange(100)} for _ in range(300)]


def _expected_outputs(batches: list[list[dict]]) -> list[dict[str, tuple[int, int]]]:
    """Each micro-batch's update-mode output: the keys it saw, with their count and sum so far."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    outputs = []
    for rows in batches:
        for row in rows:
            totals[row["key"]][0] += 1
            totals[row["key"]][1] += row["value"]
        outputs.append({key: tuple(totals[key]) for key in {row["key"] for row in rows}})
    return outputs


def _output(out: Path, batch_id: int) -> dict[str, tuple[int, int]]:
    rows = {}
    for part in sorted((out / "batches" / str(batch_id)).glob("part-*")):
        for line in part.read_text().splitlines():
            row = json.loads(line)
            rows[row["key"]] = (row["n"], row["total"])
    return rows


def _progress(path: Path, batch_id: int) -> dict | None:
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        progress = json.loads(line)
        if progress["batchId"] == batch_id:
            return progress
    return None


def _controller_pids(driver_pid: int) -> list[int]:
    """Pids of the controllers the driver plugin of JVM `driver_pid` started (`--parent-pid` names the JVM)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--driver-link" in argv and argv[argv.index(b"--parent-pid") + 1] == str(driver_pid).encode():
                found.append(int(entry.name))
    return found


def _status(address: str) -> control_pb2.StatusReply:
    with auth.channel(address) as channel:
        return control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=5)


def test_a_java_application_replicates_and_fails_over_with_confs_alone(app: Path, tmp_path: Path) -> None:
    inputs, out, progress, stop = tmp_path / "in", tmp_path / "out", tmp_path / "progress.jsonl", tmp_path / "stop"
    inputs.mkdir()
    port, ui_port, metrics_port, secret = free_port(), free_port(), free_port(), "a-secret-the-test-knows"
    address = f"127.0.0.1:{port}"
    # The confs `statestore spark-conf controller_port=... secret=...` prints, as a user would paste them.
    printed = subprocess.run(
        [sys.executable, "-m", "statestore.cli", "spark-conf", f"controller_port={port}", f"secret={secret}",
         f"metrics_port={metrics_port}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    confs = [word for line in printed.splitlines() for word in line.rstrip(" \\").split(" ", 1)]
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master", "local-cluster[3,1,1024]",
        "--class", "StatefulCounts",
        *confs,
        "--conf", f"spark.sql.shuffle.partitions={PARTITIONS}",
        "--conf", f"spark.ui.port={ui_port}",
        str(app), str(inputs), str(out), str(progress), str(stop),
    ]  # fmt: skip
    home = tmp_path / "statestore-home"  # the controllers' registry (statestore.registry)
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "STATESTORE_HOME": str(home)}
    env.pop("PYSPARK_PYTHON", None)  # the controller's Python comes from the conf above
    log = open(tmp_path / "spark-submit.log", "wb")  # noqa: SIM115 (closed below)
    driver = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    auth.remember(address, secret)
    batches: list[list[dict]] = []

    def feed() -> int:
        rows = _batch(len(batches))
        batches.append(rows)
        staged = tmp_path / f"batch-{len(batches)}.json"
        staged.write_text("".join(json.dumps(row) + "\n" for row in rows))
        staged.replace(inputs / staged.name)
        batch_id = len(batches) - 1
        wait_for(
            lambda: driver.poll() is not None or _progress(progress, batch_id) is not None,
            180,
            f"micro-batch {batch_id}",
        )
        assert driver.poll() is None, (tmp_path / "spark-submit.log").read_text()[-6000:]
        return batch_id

    try:
        for _ in range(3):
            feed()

        def caught_up() -> bool:
            try:
                reply = _status(address)
            except grpc.RpcError:  # not serving (yet)
                return False
            return len(reply.partitions) == PARTITIONS and all(
                p.replicas and all(r.version_held == p.primary_version for r in p.replicas) for p in reply.partitions
            )

        wait_for(caught_up, 60, "every partition with a caught-up replica")
        # An operator on the driver host finds the application's controller without being told: in the registry
        # (its secret too), or through the Spark UI's REST API (the secret is redacted there: from the registry).
        operator_env = {k: v for k, v in env.items() if k != "STATESTORE_SECRET"}
        for where in ([], ["--spark-ui", f"http://127.0.0.1:{ui_port}"]):
            shown = subprocess.run(
                [sys.executable, "-m", "statestore.cli", "status", *where],
                capture_output=True, text=True, env=operator_env, timeout=60,
            )  # fmt: skip
            assert shown.returncode == 0 and "0/0/default" in shown.stdout, (where, shown.stderr)
        # The registration names the Spark application, as the driver's JVM announced it.
        (registration,) = (json.loads(p.read_text()) for p in (home / "controllers").glob("*.json"))
        assert registration["application_id"].startswith(("app-", "local-")), registration
        assert registration["spark_ui"].endswith(f":{ui_port}"), registration
        reply = _status(address)
        by_node: dict[str, list[str]] = defaultdict(list)
        for partition in reply.partitions:
            by_node[partition.primary_node].append(partition.store.store_id)
        victim = max(sorted(by_node), key=lambda node: len(by_node[node]))
        lost = by_node[victim]
        kill_executor(victim)
        wait_for(
            lambda: all(p.steered_to for p in _status(address).partitions if p.store.store_id in lost),
            60,
            f"the driver JVM steering the partitions of executor {victim} to their replicas",
        )
        after_kill = feed()
        sources = load_sources(_progress(progress, after_kill))
        # Nothing from the checkpoint location: the lost partitions (and any other Spark ran elsewhere) from replicas.
        assert sources["replica"] >= len(lost) and sources["checkpoint"] == 0, (victim, lost, sources)

        # The controller's Prometheus endpoint counted the failover and the loads from replicas.
        def scraped() -> dict[str, float]:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
                text = response.read().decode()
            return {
                name: float(value)
                for name, _, value in (line.rpartition(" ") for line in text.splitlines() if not line.startswith("#"))
            }

        wait_for(
            lambda: scraped().get('statestore_loads_total{source="replica"}', 0) >= len(lost),
            30,
            "the metrics counting the loads from replicas",
        )
        figures = scraped()
        assert figures["statestore_failovers_total"] == 1, figures
        assert figures["statestore_failover_partitions_total"] == len(lost), figures
        assert figures['statestore_nodes{state="alive"}'] >= 2, figures
        # The failover took the victim's replicas with it: the per-replica lag appears once new replicas are placed.
        wait_for(
            lambda: any(name.startswith("statestore_replica_lag_versions{") for name in scraped()),
            60,
            "the metrics showing each new replica's lag",
        )
        assert figures["statestore_shipped_bytes_total"] > 0, figures

        # The controller dies: the driver starts it again at the same address, and it learns the cluster again
        # from the nodes' heartbeats.
        (controller,) = _controller_pids(driver.pid)
        os.kill(controller, signal.SIGKILL)
        wait_for(lambda: _controller_pids(driver.pid) not in ([], [controller]), 60, "a new controller")
        wait_for(caught_up, 60, "the restarted controller knowing every partition and its replica again")
        for _ in range(2):
            feed()
    finally:
        stop.touch()
        try:
            driver.wait(timeout=120)
        finally:
            if driver.poll() is None:
                driver.kill()
            log.close()
    assert driver.returncode == 0, (tmp_path / "spark-submit.log").read_text()[-6000:]
    expected = _expected_outputs(batches)
    for batch_id, want in enumerate(expected):
        assert _output(out, batch_id) == want, f"micro-batch {batch_id}"


def test_a_driver_without_a_python_for_its_controller_fails_naming_the_settings(app: Path, tmp_path: Path) -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "statestore.cli", "spark-conf", "--python", "/nonexistent/python3"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    confs = [word for line in printed.splitlines() for word in line.rstrip(" \\").split(" ", 1)]
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME)}
    for variable in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(variable, None)
    ended = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", "local[1]", "--class", "StatefulCounts", *confs,
         str(app), str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "progress"), str(tmp_path / "stop")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert ended.returncode != 0
    log = ended.stdout + ended.stderr
    assert "the driver could not start the replica groups' controller" in log, log[-4000:]
    assert "/nonexistent/python3" in log and "spark.pyspark.python" in log, log[-4000:]
