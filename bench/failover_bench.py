"""Benchmark: an executor killed under a stateful streaming query, ours (q=1) against Spark's RocksDB provider.

    python bench/failover_bench.py [--quick] --out FILE.json

For each state size (quick: about 0.25 GB and 1 GB of state; full: also about 4 GB) and each provider (ours
with one replica per partition; Spark's RocksDB provider with changelog checkpointing), in a Spark
application of its own on local-cluster[3,1,1024] with four state partitions:

1. **load**: micro-batches of 100,000 new keys each until the state holds the size; every key's state is a
   count, a sum and a 1,024-byte incompressible value (32 SHA-256 digests of the key), so bytes on disk
   are bytes of state;
2. **steady**: micro-batches updating 20,000 random existing keys; their median duration;
3. for ours, wait until every partition's replica holds its primary's version;
4. **kill** -9 of the executor running the most partitions (the StateStoreCoordinator's locations), between
   batches, and at once the next update batch, as a stream with input waiting would;
5. **stall**: that batch's duration minus the steady median; **restore time per lost partition**: ours from
   the controller's report of each lost partition's load (`statestore status`), Spark's from the
   `Loading`/`Loaded` lines of its RocksDB store in the executors' logs (millisecond timestamps); where our
   lost partitions' state came from;
6. two more batches; steps 3 to 6 again once three executors run again (Spark starts one in place of the
   killed one), three kills in all (`--kills`), and the medians over the kills reported (this 2-core machine
   is noisy, and the replacement executor's start-up competes with the post-kill batch for CPU); every
   batch's output digest (row count, sums, CRC of the values) compared between the providers.

Prints a table with ratios, writes the JSON (`{"sizes": {"<state bytes>": {"ours_restore_ms",
"spark_restore_ms", "ours_stall_ms", "spark_stall_ms", "ours_source", "results_match", ...}}, ...}`) and a
PNG beside it (restore time and stall against state size, both providers).

With `FAILOVER_BENCH_EVENT_LOG=DIR` set, each application writes Spark's event log there: per task its
executor, locality and launch and finish times, which is how the stall's parts were found (README).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # as importing statestore does, before grpc loads

from aggregation_workload import start_digest_aggregation, write_keys_file  # noqa: E402
from bench_outputs import write_outputs  # noqa: E402
from text_table import print_table_rows  # noqa: E402

import statestore  # noqa: E402,F401  (gRPC settings first)
from spark_provider.local_cluster import executor_pids, kill_executor  # noqa: E402
from spark_provider.progress import files_processed  # noqa: E402
from statestore import auth  # noqa: E402

GB = 1 << 30
VALUE_BYTES = 1024
LOAD_KEYS_PER_BATCH = 100_000
UPDATE_ROWS = 20_000
STEADY_BATCHES = 5
AFTER_BATCHES = 2
PARTITIONS = 4  # --partitions sets it (Spark's default is 200)
EXECUTORS = 3
PROVIDERS = ("ours", "spark")
EXTRA_CONF: dict[str, str] = {}  # Spark confs a caller adds to every application (own_provider_bench's tuning)
# A directory on a slow remote store (bench/throttled_fs.py) that checkpoint locations go under, and how many bytes
# have been read from that store so far (own_provider_bench's remote half); None: checkpoints beside the run.
REMOTE_CHECKPOINTS: Path | None = None
REMOTE_READ_BYTES: Callable[[], int] | None = None
SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
TARGETS = {"restore_growth": 1.5, "restore_ratio_quick": 0.2, "restore_ratio_full": 0.05, "stall_ratio": 0.5}
# Executors log with milliseconds, so that a Spark RocksDB store's "Loading v" / "Loaded v" lines time its load.
LOG4J = """rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yyyy-MM-dd HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.state.name = org.apache.spark.sql.execution.streaming.state
logger.state.level = info
logger.statestore.name = io.statestore
logger.statestore.level = info
"""
_LOAD_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) INFO RocksDB StateStoreProviderId\[ storeId=StateStoreId\["
    r" operatorId=0, partitionId=(?P<p>\d+), storeName=default \].*?\]: (?P<what>Loading|Loaded) (?P<v>\d+)"
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Kill:
    """One kill -9 of an executor and what followed."""

    executor: str
    lost_partitions: list[int]
    replicas_caught_up: bool = True
    post_kill_ms: int = 0
    stall_ms: float = 0.0
    restore_ms: float = 0.0
    source: str = ""
    restore_detail: dict[str, Any] = field(default_factory=dict)
    max_versions_applied: int = 0  # ours: the most increments a lost partition's load applied on its replica
    from_replica: int = 0  # ours: lost partitions whose state came from a replica
    killed_at: str = ""  # when the kill was sent (the executors' log time format)
    post_kill_durations: dict[str, int] = field(default_factory=dict)
    after_ms: list[int] = field(default_factory=list)


@dataclass
class Run:
    """One provider at one state size, in one application, killed several times: the figures reported."""

    provider: str
    size_bytes: int
    keys: int
    load_batches: int = 0
    steady_ms: list[int] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    digests: dict[int, list] = field(default_factory=dict)
    sst_bytes: int = 0
    steady_durations: dict[str, int] = field(default_factory=dict)

    @property
    def stall_ms(self) -> float:
        """The median stall over the kills."""
        return statistics.median(k.stall_ms for k in self.kills)

    @property
    def post_kill_ms(self) -> float:
        """The median post-kill batch over the kills."""
        return statistics.median(k.post_kill_ms for k in self.kills)

    @property
    def restore_ms(self) -> float:
        """The median restore time per lost partition over the kills."""
        return statistics.median(k.restore_ms for k in self.kills)

    @property
    def source(self) -> str:
        return ",".join(sorted({s for k in self.kills for s in k.source.split(",") if s}))


# ----------------------------------------------------------------------------- the workload


def write_file(folder: Path, index: int, keys: list[int]) -> None:
    write_keys_file(folder, index, keys)


def start_query(spark: Any, root: Path, digests: dict[int, list]) -> Any:
    return start_digest_aggregation(spark, root, digests, VALUE_BYTES)


def processed(query: Any) -> int:
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    return files_processed(query)


def wait_processed(query: Any, fed: int, timeout: float = 1800) -> dict[str, Any]:
    """Wait until `fed` input files were processed; the last batch's progress."""
    deadline = time.monotonic() + timeout
    while processed(query) < fed:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{fed} micro-batches not processed within {timeout}s")
        time.sleep(0.2)
    return query.lastProgress


def metric(progress: dict[str, Any], name: str) -> int:
    return int(progress["stateOperators"][0].get("customMetrics", {}).get(name, 0))


# ----------------------------------------------------------------------------- one application


def start_spark(provider: str, root: Path) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    log4j = root / "log4j2.properties"
    log4j.write_text(LOG4J)
    from pyspark.sql import SparkSession

    import spark_provider

    builder = (
        SparkSession.builder.master(f"local-cluster[{EXECUTORS},1,1024]")
        .appName(f"failover-bench-{provider}")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.executor.memory", "1g")
        .config("spark.executor.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
    )
    events = os.environ.get("FAILOVER_BENCH_EVENT_LOG")  # a directory: Spark's event logs, to see where a stall goes
    if events:
        Path(events).mkdir(parents=True, exist_ok=True)
        builder = builder.config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", events)
    if provider == "ours":
        builder = spark_provider.enable(builder, replication_factor=1, local_dir=str(root / "local"))
    elif provider == "spark-files":  # Spark's provider with our checkpoint file layer (bench/own_provider_bench.py)
        builder = spark_provider.enable(
            builder.config("spark.jars", str(spark_provider.provider_jar())),
            spark_rocksdb=True, replica_files_dir=str(root / "copies"),
        ).config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    else:
        builder = (
            builder.config("spark.jars", str(spark_provider.provider_jar()))  # the coordinator helper
            .config("spark.sql.streaming.stateStore.providerClass", SPARK_ROCKSDB)
            .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        )
    for key, value in EXTRA_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def partition_executors(spark: Any, query: Any, root: Path) -> dict[int, str]:
    """Partition -> executor id where Spark's StateStoreCoordinator places its state store."""
    steering = spark.sparkContext._jvm.io.statestore.spark.Steering
    state_root = f"file:{(root / 'checkpoint').absolute()}/state"  # as given to Spark: a symlink stays one
    found = {}
    for p in range(PARTITIONS):
        location = steering.location(state_root, 0, p, "default", str(query.runId))
        if location:
            found[p] = location.rsplit("_", 1)[1]
    return found


def spark_load_times(spark: Any, since: datetime.datetime, partitions: list[int]) -> dict[int, int]:
    """Per lost partition, the milliseconds between Spark's RocksDB store's "Loading v" and "Loaded v" log lines
    of its first load after `since`, read from the executors' logs (local-cluster keeps them under
    `<pyspark>/work/<application id>/`)."""
    import pyspark

    work = Path(pyspark.__file__).resolve().parent / "work" / spark.sparkContext.applicationId
    starts: dict[tuple[int, str], datetime.datetime] = {}
    found: dict[int, int] = {}
    for stderr in sorted(work.glob("*/stderr")):
        for line in stderr.read_text(errors="replace").splitlines():
            match = _LOAD_LINE.match(line)
            if match is None:
                continue
            at = datetime.datetime.strptime(match["ts"], "%Y-%m-%d %H:%M:%S.%f")
            p = int(match["p"])
            if at < since or p not in partitions or p in found:
                continue
            if match["what"] == "Loading":
                starts[(p, match["v"])] = at
            elif (p, match["v"]) in starts:
                found[p] = round((at - starts[(p, match["v"])]).total_seconds() * 1000)
    return found


_FS_READ = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) INFO CheckpointReads: statestore-fs: 0/(?P<p>\d+)/\S+ read "
    r"(?P<n>\d+) bytes of (?P<kind>\S+) \S+ from (?P<where>its local copy|the checkpoint location)"
)
_COMMIT_STATS = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) INFO RocksDB StateStoreProviderId\[ storeId=StateStoreId\["
    r" operatorId=0, partitionId=(?P<p>\d+), .*?\]: Committed \d+, stats = (?P<stats>\{.*\})$"
)


def state_file_reads(spark: Any, since: datetime.datetime, partitions: list[int]) -> dict[str, int]:
    """What the loads after `since` read, from the executors' logs: with our checkpoint file layer, bytes of the
    lost partitions' state files from local copies and from the checkpoint location (and of those, SSTs); and,
    with or without it, the SST bytes Spark's RocksDB store reports copying in for each lost partition's load
    (`bytesCopied` in the stats of its first commit after `since`; a copy served by the layer counts there too)."""
    import pyspark

    work = Path(pyspark.__file__).resolve().parent / "work" / spark.sparkContext.applicationId
    found = {"copy_bytes": 0, "checkpoint_bytes": 0, "checkpoint_sst_bytes": 0, "spark_sst_copied_bytes": 0}
    committed: set[int] = set()
    for stderr in sorted(work.glob("*/stderr")):
        for line in stderr.read_text(errors="replace").splitlines():
            read = _FS_READ.match(line)
            if read and datetime.datetime.strptime(read["ts"], "%Y-%m-%d %H:%M:%S.%f") >= since:
                if int(read["p"]) in partitions:
                    where = "copy_bytes" if read["where"] == "its local copy" else "checkpoint_bytes"
                    found[where] += int(read["n"])
                    if where == "checkpoint_bytes" and read["kind"] == "sst":
                        found["checkpoint_sst_bytes"] += int(read["n"])
                continue
            commit = _COMMIT_STATS.match(line)
            if commit and datetime.datetime.strptime(commit["ts"], "%Y-%m-%d %H:%M:%S.%f") >= since:
                p = int(commit["p"])
                if p in partitions and p not in committed:
                    committed.add(p)
                    found["spark_sst_copied_bytes"] += int(json.loads(commit["stats"]).get("bytesCopied", 0))
    return found


def controller_status(spark: Any) -> Any:

    from statestore.rpc import control_pb2, control_pb2_grpc

    address = spark.conf.get("spark.sql.streaming.stateStore.statestore.controller")
    with auth.channel(address) as channel:
        return control_pb2_grpc.ControlStub(channel).Status(control_pb2.StatusRequest(), timeout=10)


def replicas_caught_up(spark: Any) -> bool:
    reply = controller_status(spark)
    return len(reply.partitions) == PARTITIONS and all(
        p.replicas and all(r.version_held == p.primary_version for r in p.replicas) for p in reply.partitions
    )


def executors_alive(spark: Any) -> int:
    """Executors registered with the driver (the driver itself not counted)."""
    return len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout}s")
        time.sleep(0.5)


def kill_once(
    provider: str, spark: Any, query: Any, root: Path, run: Run, update_batch: Any, settle: float, kill: int
) -> None:
    """Steps 3 to 6 once: replicas caught up, kill -9 of the busiest executor, the next batch at once, its stall
    and the lost partitions' restore times, then a few more batches. Appends a `Kill` to `run.kills`."""
    size = f"{run.size_bytes / GB:.2f} GB"
    # 3. warm replicas (after an earlier kill, re-replicating GBs onto the replacement executor's node takes a
    # while; if it does not finish in time the kill goes ahead and the record says so)
    caught_up = True
    if provider == "ours":
        try:
            wait_for(lambda: replicas_caught_up(spark), 900, "replicas caught up")
        except TimeoutError:
            caught_up = False
            log(f"{provider} {size}: kill {kill + 1}: not every replica caught up within 900s; killing anyway")
    # 4. kill the executor with the most partitions, and go on at once
    located = partition_executors(spark, query, root)
    counts: dict[str, int] = {}
    for executor in located.values():
        counts[executor] = counts.get(executor, 0) + 1
    victim = max(sorted(counts), key=lambda e: counts[e])
    record = Kill(victim, sorted(p for p, e in located.items() if e == victim), replicas_caught_up=caught_up)
    if victim not in executor_pids():
        raise RuntimeError(f"executor {victim} is not a JVM on this machine")
    killed_at = datetime.datetime.now()
    record.killed_at = killed_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    remote_before = REMOTE_READ_BYTES() if REMOTE_READ_BYTES else 0
    kill_executor(victim)
    log(f"{provider} {size}: kill {kill + 1}: executor {victim}, partitions {record.lost_partitions}")
    if settle:
        time.sleep(settle)  # --settle: let Spark's replacement executor start before the next batch
    progress = update_batch()
    record.post_kill_ms = progress["durationMs"]["triggerExecution"]
    record.post_kill_durations = progress["durationMs"]
    steady = statistics.median(run.steady_ms[-STEADY_BATCHES:])
    record.stall_ms = record.post_kill_ms - steady
    # 5. restore time per lost partition
    if provider == "ours":
        reply = controller_status(spark)
        loads = {int(p.store.store_id.split("/")[1]): p.last_load for p in reply.partitions}
        mine = {p: loads[p] for p in record.lost_partitions if p in loads}
        record.restore_ms = statistics.mean(load.millis for load in mine.values()) if mine else float("nan")
        record.source = ",".join(sorted({load.source for load in mine.values()}))
        record.max_versions_applied = max((load.versions_applied for load in mine.values()), default=0)
        record.from_replica = sum(load.source in ("replica", "peer") for load in mine.values())
        record.restore_detail = {
            str(p): {"source": load.source, "millis": load.millis, "from_version": load.from_version,
                     "versions_applied": load.versions_applied}
            for p, load in mine.items()
        }
    else:
        times = spark_load_times(spark, killed_at, record.lost_partitions)
        record.restore_ms = statistics.mean(times.values()) if times else float("nan")
        reads = state_file_reads(spark, killed_at, record.lost_partitions)
        record.source = "local copies" if reads["copy_bytes"] and not reads["checkpoint_bytes"] else "checkpoint"
        record.restore_detail = {str(p): {"source": record.source, "millis": ms} for p, ms in times.items()}
        record.restore_detail["reads"] = reads
    if REMOTE_READ_BYTES is not None:  # everything the kill's batch read from the remote store, whoever read it
        record.restore_detail["remote_read_bytes"] = REMOTE_READ_BYTES() - remote_before
    log(f"{provider} {size}: kill {kill + 1}: post-kill batch {record.post_kill_ms} ms (steady median "
        f"{steady:.0f} ms), restore per lost partition {record.restore_ms:.0f} ms from {record.source}")
    # 6. a few more batches
    for _ in range(AFTER_BATCHES):
        record.after_ms.append(update_batch()["durationMs"]["triggerExecution"])
    run.kills.append(record)


def run_one(
    provider: str, size_bytes: int, work: Path, load_keys: int, settle: float = 0.0, kills: int = 3
) -> Run:
    """One provider at one size, in its own Spark application."""
    keys = max(LOAD_KEYS_PER_BATCH, size_bytes // VALUE_BYTES)
    run = Run(provider, size_bytes, keys)
    root = work / f"{provider}-{size_bytes}"
    shutil.rmtree(root, ignore_errors=True)
    (root / "input").mkdir(parents=True)
    if REMOTE_CHECKPOINTS is not None:
        remote = REMOTE_CHECKPOINTS / root.name
        shutil.rmtree(remote, ignore_errors=True)
        remote.mkdir(parents=True)
        (root / "checkpoint").symlink_to(remote)
    spark = start_spark(provider, root)
    query = None
    fed = 0
    try:
        import random

        query = start_query(spark, root, run.digests)
        # 1. load
        batches = -(-keys // load_keys)
        for b in range(batches):
            write_file(root / "input", fed, list(range(b * load_keys, min(keys, (b + 1) * load_keys))))
            fed += 1
            started = time.monotonic()
            wait_processed(query, fed)
            took = time.monotonic() - started
            log(f"{provider} {size_bytes / GB:.2f} GB: load batch {b + 1}/{batches} in {took:.1f}s")
        run.load_batches = batches
        rng = random.Random(size_bytes)

        def update_batch() -> dict[str, Any]:
            nonlocal fed
            write_file(root / "input", fed, rng.sample(range(keys), UPDATE_ROWS))
            fed += 1
            return wait_processed(query, fed)

        # 2. steady
        for i in range(STEADY_BATCHES):
            progress = update_batch()
            run.steady_ms.append(progress["durationMs"]["triggerExecution"])
            log(f"{provider} {size_bytes / GB:.2f} GB: steady batch {i + 1}/{STEADY_BATCHES}: {run.steady_ms[-1]} ms")
        run.sst_bytes = metric(progress, "statestoreSstBytes" if provider == "ours" else "rocksdbSstFileSize")
        run.steady_durations = progress["durationMs"]
        for kill in range(kills):
            if kill:  # the cluster whole again: three executors, and for ours every replica caught up
                wait_for(lambda: executors_alive(spark) == EXECUTORS, 300, "a replacement executor")
                for _ in range(STEADY_BATCHES):
                    run.steady_ms.append(update_batch()["durationMs"]["triggerExecution"])
            kill_once(provider, spark, query, root, run, update_batch, settle, kill)
    finally:
        if query is not None:
            query.stop()
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
        if REMOTE_CHECKPOINTS is not None:  # a 4 GB run's checkpoint is tens of GB: free the disk for the next
            shutil.rmtree(REMOTE_CHECKPOINTS / root.name, ignore_errors=True)
    return run


# ----------------------------------------------------------------------------- report


def report(runs: dict[tuple[str, int], Run], sizes: list[int], quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": {}}
    for size in sizes:
        ours, spark = runs[("ours", size)], runs[("spark", size)]
        out["sizes"][str(size)] = {
            "ours_restore_ms": round(ours.restore_ms, 1),
            "spark_restore_ms": round(spark.restore_ms, 1),
            "ours_stall_ms": round(ours.stall_ms, 1),
            "spark_stall_ms": round(spark.stall_ms, 1),
            "ours_source": ours.source,
            "ours_max_versions_applied": max((k.max_versions_applied for k in ours.kills), default=0),
            "ours_lost_partitions": sum(len(k.lost_partitions) for k in ours.kills),
            "ours_lost_from_replica": sum(k.from_replica for k in ours.kills),
            "results_match": ours.digests == spark.digests,
            "restore_ratio": round(ours.restore_ms / spark.restore_ms, 4) if spark.restore_ms > 0 else None,
            "stall_ratio": round(ours.stall_ms / spark.stall_ms, 4) if spark.stall_ms > 0 else None,
            # The stall subtracts each provider's own steady batch; the post-kill batch itself is what the query
            # waits, and a provider with a faster steady batch shows a larger stall for the same post-kill batch.
            "ours_post_kill_ms": round(ours.post_kill_ms, 1),
            "spark_post_kill_ms": round(spark.post_kill_ms, 1),
            "post_kill_ratio": round(ours.post_kill_ms / spark.post_kill_ms, 4) if spark.post_kill_ms > 0 else None,
            "keys": ours.keys,
            "ours": run_json(ours),
            "spark": run_json(spark),
        }
    smallest, largest = out["sizes"][str(sizes[0])], out["sizes"][str(sizes[-1])]
    ratio_target = TARGETS["restore_ratio_quick" if quick else "restore_ratio_full"]
    growth = largest["ours_restore_ms"] / smallest["ours_restore_ms"] if smallest["ours_restore_ms"] > 0 else None
    out["verdict"] = {
        "ours_restore_growth": round(growth, 3) if growth else None,
        "restore_flat": growth is not None and growth < TARGETS["restore_growth"],
        "restore_ratio_at_largest": largest["restore_ratio"],
        "restore_ratio_target": ratio_target,
        "restore_ratio_met": largest["restore_ratio"] is not None and largest["restore_ratio"] <= ratio_target,
        "stall_ratio_met": all(
            s["stall_ratio"] is not None and s["stall_ratio"] <= TARGETS["stall_ratio"] for s in out["sizes"].values()
        ),
        "results_match": all(s["results_match"] for s in out["sizes"].values()),
    }
    out["targets"] = TARGETS
    out["workload"] = {
        "master": f"local-cluster[{EXECUTORS},1,1024]", "partitions": PARTITIONS, "value_bytes": VALUE_BYTES,
        "load_keys_per_batch": LOAD_KEYS_PER_BATCH, "update_rows": UPDATE_ROWS, "steady_batches": STEADY_BATCHES,
        "spark_provider": SPARK_ROCKSDB + " (changelog checkpointing)", "ours": "statestore, q=1",
        "quick": quick,
    }
    return out


def run_json(run: Run) -> dict[str, Any]:
    return {
        "steady_ms": run.steady_ms, "sst_bytes": run.sst_bytes, "load_batches": run.load_batches,
        "steady_duration_parts_ms": run.steady_durations,
        "kills": [asdict(k) for k in run.kills],
        "stalls_ms": [k.stall_ms for k in run.kills], "restores_ms": [k.restore_ms for k in run.kills],
    }


def print_table(result: dict[str, Any]) -> None:
    header = ("state", "restore/lost part. ours", "Spark", "ratio", "stall ours", "Spark", "ratio",
              "post-kill batch ratio", "source", "match")
    rows = []
    for size, s in result["sizes"].items():
        rows.append((f"{int(size) / GB:.2f} GB", f"{s['ours_restore_ms']:.0f} ms", f"{s['spark_restore_ms']:.0f} ms",
                     f"{s['restore_ratio']}", f"{s['ours_stall_ms']:.0f} ms", f"{s['spark_stall_ms']:.0f} ms",
                     f"{s['stall_ratio']}", f"{s.get('post_kill_ratio')}", s["ours_source"],
                     str(s["results_match"])))
    print_table_rows(header, rows)
    print(json.dumps(result["verdict"]))


def write_png(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(s) / GB for s in result["sizes"]]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title in ((axes[0], "restore_ms", "restore time per lost partition"), (axes[1], "stall_ms",
                           "post-kill batch minus steady median")):
        for provider, label, style in (("ours", "statestore (q=1, from replica)", "o-"),
                                       ("spark", "Spark RocksDB (changelog)", "s--")):
            ax.plot(sizes, [s[f"{provider}_{key}"] for s in result["sizes"].values()], style, label=label)
        ax.set_xlabel("state (GB)")
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"executor killed between batches, local-cluster[3,1,1024], {PARTITIONS} state partitions")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def run_isolated(provider: str, size_bytes: int, work: Path, load_keys: int, settle: float, kills: int) -> Run:
    """`run_one` in a driver process of its own: a second application in the driver JVM of a first, after it killed
    executors, failed at its start here (`Store broadcast broadcast_0 fail` in the driver, then the query died), and
    each provider's figures must not depend on the other having run first."""
    job = work / f"{provider}-{size_bytes}.job.json"
    result = job.with_suffix(".pkl")
    result.unlink(missing_ok=True)
    job.write_text(json.dumps({
        "partitions": PARTITIONS, "extra_conf": EXTRA_CONF,
        "remote": str(REMOTE_CHECKPOINTS) if REMOTE_CHECKPOINTS is not None else None,
        "run": [provider, size_bytes, str(work), load_keys, settle, kills], "result": str(result),
    }))  # fmt: skip
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--isolated-run", str(job)], check=True)
    return pickle.loads(result.read_bytes())  # written by this script's own `_isolated_run`, just now


def _isolated_run(job_file: Path) -> int:
    """The child side of `run_isolated`."""
    global PARTITIONS, REMOTE_CHECKPOINTS
    job = json.loads(job_file.read_text())
    PARTITIONS = job["partitions"]
    EXTRA_CONF.update(job["extra_conf"])
    REMOTE_CHECKPOINTS = Path(job["remote"]) if job["remote"] else None
    provider, size_bytes, work, load_keys, settle, kills = job["run"]
    run = run_one(provider, size_bytes, Path(work), load_keys, settle, kills)
    Path(job["result"]).write_bytes(pickle.dumps(run))
    return 0


def main(argv: list[str] | None = None) -> int:
    global PARTITIONS
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--isolated-run"]:
        return _isolated_run(Path(argv[1]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="0.25 GB and 1 GB of state (the full run adds 4 GB)")
    parser.add_argument("--out", required=True, type=Path, help="the JSON to write (a PNG is written beside it)")
    parser.add_argument("--sizes-gb", type=float, nargs="*", help="state sizes to run instead of the defaults")
    parser.add_argument("--workdir", type=Path, default=None, help="where to put checkpoints (default: a temp dir)")
    parser.add_argument(
        "--partitions", type=int, default=PARTITIONS, help=f"state partitions (default {PARTITIONS}; Spark's own: 200)"
    )
    parser.add_argument(
        "--kills", type=int, default=3, help="executors killed one after another in each run (medians reported)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait this long after the kill before the next batch (an experiment: how much of the stall is the "
        "replacement executor starting meanwhile); 0, the default, measures a stream with input waiting",
    )
    args = parser.parse_args(argv)
    PARTITIONS = args.partitions
    sizes_gb = args.sizes_gb or ([0.25, 1.0] if args.quick else [0.25, 1.0, 4.0])
    sizes = [int(s * GB) for s in sizes_gb]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="failover-bench-"))
    runs: dict[tuple[str, int], Run] = {}
    for size in sizes:
        for provider in PROVIDERS:
            log(f"=== {provider} at {size / GB:.2f} GB of state")
            runs[(provider, size)] = run_isolated(provider, size, work, LOAD_KEYS_PER_BATCH, args.settle, args.kills)
    write_outputs(report(runs, sizes, args.quick), args.out, write_png, print_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
