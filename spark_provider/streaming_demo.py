"""The main job: a real PySpark streaming aggregation on the statestore provider, surviving a lost executor.

A generated stream of sensor readings arrives as files, one per micro-batch; the query keeps per-sensor count,
sum and max in our provider on a local cluster of three executor JVMs, each with its state node, every
partition replicated once (q=1) on another executor's node. After a few micro-batches the demo kills the
executor holding the most partitions with SIGKILL. Spark reports it gone; the controller steers each of its
partitions to the executor holding its replica, where the provider loads the state from that replica instead
of the checkpoint location. The demo prints where each lost partition's state came from and how long its
load took, streams on, and checks every sensor's figures against a batch recomputation over all the input.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spark_provider.file_feed import publish
from spark_provider.progress import files_processed, load_sources

EXECUTORS = 3
PARTITIONS = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options (defaults: a small run on an embedded local cluster)."""
    parser.add_argument("--batches", type=int, default=6, help="micro-batches in total")
    parser.add_argument("--kill-after", type=int, default=3, help="kill an executor after this many micro-batches")
    parser.add_argument("--rows", type=int, default=5000, help="rows per micro-batch")
    parser.add_argument("--sensors", type=int, default=2000, help="distinct sensors (state rows)")
    parser.add_argument("--workdir", default=None, help="keep input, checkpoint and logs here (default: a temp dir)")


def _write_batch(folder: Path, index: int, rows: int, sensors: int) -> None:
    rng = random.Random(index)
    lines = [f'{{"sensor": "s{rng.randrange(sensors):05d}", "temp": {rng.gauss(20, 8):.2f}}}\n'
             for _ in range(rows)]
    publish(folder, index, "".join(lines), digits=4)


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point this process's stderr (fd 2) at `path` meanwhile: the Spark JVM started now inherits it, so its
    log goes there instead of the console."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _status(address: str) -> Any:
    from statestore import auth
    from statestore.rpc import control_pb2, control_pb2_grpc

    with auth.channel(address) as channel:
        return control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=5)


def _wait(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)
    return value


def _partition(store_id: str) -> str:
    return store_id.split("/")[1]


class _Stream:
    """The streaming query, fed one file per micro-batch, printing a line per batch."""

    def __init__(self, spark: Any, root: Path, total: int, rows: int, sensors: int) -> None:
        self.spark, self.root, self.total, self.rows, self.sensors = spark, root, total, rows, sensors
        self.latest: dict[str, tuple] = {}
        self.fed = 0
        self.printed = 0
        self.query: Any = None

    def start(self) -> None:
        from pyspark.sql import functions as F

        def keep_latest(df: Any, batch_id: int) -> None:
            for r in df.collect():
                self.latest[r["sensor"]] = (r["n"], round(r["total"], 6), r["hottest"])

        stream = (self.spark.readStream.schema("sensor string, temp double").option("maxFilesPerTrigger", 1)
                  .json(str(self.root / "input")))
        self.query = (stream.groupBy("sensor")
                      .agg(F.count("*").alias("n"), F.sum("temp").alias("total"), F.max("temp").alias("hottest"))
                      .writeStream.outputMode("update").foreachBatch(keep_latest)
                      .option("checkpointLocation", str(self.root / "checkpoint"))
                      .trigger(processingTime="0 seconds").start())

    def feed(self, batches: int) -> None:
        """Write `batches` more input files and wait until the query processed them, printing each batch."""
        for _ in range(batches):
            _write_batch(self.root / "input", self.fed, self.rows, self.sensors)
            self.fed += 1
        _wait(lambda: self._processed() >= self.fed, 300, f"{self.fed} micro-batches to be processed")
        self._print_progress()

    def _processed(self) -> int:
        if self.query.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {self.query.exception()}")
        self._print_progress()
        return files_processed(self.query)

    def _print_progress(self) -> None:
        batches = [p for p in self.query.recentProgress if p["numInputRows"] > 0]
        for p in batches[self.printed:]:
            op = p["stateOperators"][0]
            sources = ", ".join(f"{n} from {source}" for source, n in load_sources(p).items() if n)
            print(f"  batch {p['batchId'] + 1}/{self.total}: {p['numInputRows']} rows in "
                  f"{p['durationMs']['triggerExecution']} ms; state rows {op['numRowsTotal']}; "
                  f"partitions loaded: {sources or 'none'}", flush=True)
        self.printed = len(batches)


def run_demo(args: argparse.Namespace) -> int:
    """Runs the demo; returns 0 when the streamed state equals the batch recomputation."""
    batches = getattr(args, "batches", 6)
    kill_after = min(getattr(args, "kill_after", 3), batches)
    rows = getattr(args, "rows", 5000)
    sensors = getattr(args, "sensors", 2000)
    workdir = getattr(args, "workdir", None)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="statestore-demo-"))
    for sub in ("input", "checkpoint", "local"):
        shutil.rmtree(root / sub, ignore_errors=True)
    (root / "input").mkdir(parents=True)
    os.environ["STATESTORE_CONTROLLER_LOG"] = str(root / "controller.log")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_provider
    from spark_provider.local_cluster import executor_pids, kill_executor

    print(f"starting Spark on a local cluster of {EXECUTORS} executor JVMs (1 core each) with the statestore "
          "provider, one replica per state partition (q=1)", flush=True)
    print(f"  logs: Spark's in {root / 'spark.log'}, the controller's in {root / 'controller.log'}", flush=True)
    builder = (SparkSession.builder.master(f"local-cluster[{EXECUTORS},1,1024]").appName("statestore-demo")
               .config("spark.sql.shuffle.partitions", str(PARTITIONS)).config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "1g")
               .config("spark.sql.streaming.stateStore.maintenanceInterval", "2s"))
    with _stderr_to(root / "spark.log"):
        spark = spark_provider.enable(builder, replication_factor=1, local_dir=str(root / "local"),
                                      min_deltas_for_snapshot=2).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    address = spark.conf.get("spark.sql.streaming.stateStore.statestore.controller")
    started = time.time()
    stream = _Stream(spark, root, batches, rows, sensors)
    try:
        print(f"streaming {kill_after} micro-batches of {rows} sensor readings ...", flush=True)
        stream.start()
        stream.feed(kill_after)
        groups = _wait(lambda: _warm(address, stream), 120, "every partition to have a replica at its version")
        print("replica groups are warm (primary and replica at the same version, on two executors):")
        for store_id, (primary, version, replicas) in sorted(groups.items()):
            print(f"  partition {_partition(store_id)}: primary on executor {primary}, replica on executor "
                  f"{', '.join(replicas)}, both at version {version}")
        counts: dict[str, int] = {}
        for primary, _, _ in groups.values():
            counts[primary] = counts.get(primary, 0) + 1
        victim = max(sorted(counts), key=lambda e: counts[e])
        lost = sorted(s for s, (primary, _, _) in groups.items() if primary == victim)
        if victim not in executor_pids(spark.sparkContext.applicationId):
            raise RuntimeError(f"executor {victim} is not a JVM on this machine")
        pid = kill_executor(victim, app_id=spark.sparkContext.applicationId)
        print(f"kill -9 of executor {victim} (pid {pid}), primary of partition(s) "
              f"{', '.join(_partition(s) for s in lost)}", flush=True)
        steered = _wait(lambda: _steered(address, lost), 60, "Spark to report the executor lost")
        for store_id, to in sorted(steered.items()):
            print(f"  Spark removed executor {victim}; the controller steers partition {_partition(store_id)} to "
                  f"executor {to}, which holds its replica", flush=True)
        print(f"streaming {batches - kill_after} more micro-batches ...", flush=True)
        stream.feed(batches - kill_after)
        print("where the lost partitions' state came from:")
        loads = {p.store.store_id: p for p in _status(address).partitions}
        for store_id in lost:
            p = loads[store_id]
            load = p.last_load
            print(f"  partition {_partition(store_id)}: loaded version {load.version} on executor {p.primary_node} "
                  f"from its {load.source} (at version {load.from_version}, {load.versions_applied} increment(s) "
                  f"applied) in {load.millis} ms")
        print("checking the streamed state against a batch recomputation over all input ...", flush=True)
        expected = {r["sensor"]: (r["n"], round(r["total"], 6), r["hottest"]) for r in
                    spark.read.schema("sensor string, temp double").json(str(root / "input")).groupBy("sensor")
                    .agg(F.count("*").alias("n"), F.sum("temp").alias("total"), F.max("temp").alias("hottest"))
                    .collect()}
    finally:
        if stream.query is not None:
            stream.query.stop()
        with _stderr_to(root / "spark.log"):
            spark.stop()
        if not workdir:
            shutil.rmtree(root, ignore_errors=True)
    latest = stream.latest
    mismatched = sorted(k for k in expected.keys() | latest.keys()
                        if k not in latest or k not in expected or latest[k][0] != expected[k][0]
                        or abs(latest[k][1] - expected[k][1]) > 1e-6 or latest[k][2] != expected[k][2])
    print(f"{len(expected)} sensors, {batches} micro-batches, an executor killed, {time.time() - started:.1f}s")
    if mismatched:
        print(f"MISMATCH for {len(mismatched)} sensors, e.g. {mismatched[:5]}")
        return 1
    print("OK: every sensor's count, sum and max equal the batch recomputation")
    return 0


def _warm(address: str, stream: _Stream) -> dict[str, tuple[str, int, list[str]]] | None:
    """Store id -> (primary executor, version, replica executors) once every partition has its replica at its
    primary's version, else None."""
    reply = _status(address)
    groups = {}
    for p in reply.partitions:
        held = {r.node_id: r.version_held for r in p.replicas}
        if not held or any(v != p.primary_version for v in held.values()):
            return None
        groups[p.store.store_id] = (p.primary_node, p.primary_version, sorted(held))
    return groups if len(groups) == PARTITIONS else None


def _steered(address: str, lost: list[str]) -> dict[str, str] | None:
    """Store id -> the executor the controller steered it to, once every lost partition was steered."""
    found = {}
    for p in _status(address).partitions:
        if p.store.store_id in lost and p.steered_to:
            found[p.store.store_id] = p.steered_to.split()[1]
    return found if len(found) == len(lost) else None


def main(argv: list[str] | None = None) -> int:
    """Run the demo standalone: `python -m spark_provider.streaming_demo`."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    return run_demo(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
