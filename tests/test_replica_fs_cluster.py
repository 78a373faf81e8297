"""Spark's own RocksDB provider with our checkpoint file layer (`enable(spark_rocksdb=True)`) on a real
local-cluster: an executor killed with SIGKILL, its partitions load on the other executors of the host from the
copies the dead one kept, found by their index entries in the host's shared directory (the dead JVM's memory is
gone). The checkpoint's state files are overwritten by junk first, so a read of one from the checkpoint location
fails the query (`CANNOT_LOAD_STATE_STORE`, as without the layer): the results stay exact only if every reload
read copies."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from spark_provider.local_cluster import executor_pids, kill_executor

PARTITIONS = 4
PROGRESS_TIMEOUT = 180.0


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_provider

    copies = tmp_path_factory.mktemp("host-copies")
    builder = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("replica-fs-cluster")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "1g")
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "1s")
    )
    session = spark_provider.enable(builder, spark_rocksdb=True, replica_files_dir=str(copies)).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _executor_logs(spark: Any) -> dict[str, str]:
    import pyspark

    work = Path(pyspark.__file__).parent / "work" / spark.sparkContext.applicationId
    return {log.parent.name: log.read_text(errors="replace") for log in sorted(work.glob("*/stderr"))}


def _state_reads(log: str) -> list[tuple[str, str]]:
    """(store id, "its local copy" or "the checkpoint location") of each state file read this executor logged."""
    return re.findall(r"statestore-fs: (\S+) read \d+ bytes of \S+ \S+ from (its local copy|the checkpoint location)",
                      log)  # fmt: skip


def _loaded_partitions(log: str) -> set[int]:
    """The partitions whose state Spark's provider loaded on this executor (its INFO log names each)."""
    found = re.findall(r"Reported that the loaded instance StateStoreProviderId\[ storeId=StateStoreId\[ "
                       r"operatorId=0, partitionId=(\d+)", log)  # fmt: skip
    return {int(p) for p in found}


def _junk_state_files(checkpoint: Path) -> int:
    doomed = [
        f
        for f in (checkpoint / "state").rglob("*")
        if f.is_file() and not f.name.startswith(".") and f.suffix in (".sst", ".zip", ".changelog")
    ]
    for f in doomed:
        f.write_bytes(b"\xa5" * f.stat().st_size)
    return len(doomed)


def _wait(condition: Any, what: str, timeout: float = PROGRESS_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f}s for {what}")
        time.sleep(0.2)


def test_a_killed_executors_partitions_load_from_the_copies_it_kept_on_the_host(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    source, checkpoint = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    rows: list[tuple[int, int]] = []

    def feed(batch: int) -> None:
        lines = [f"{(batch * 31 + i) % 60},{i}" for i in range(600)]
        rows.extend((int(k), int(v)) for k, v in (line.split(",") for line in lines))
        (source / f"{batch:03d}.csv").write_text("\n".join(lines) + "\n")

    events = spark.readStream.schema("k INT, v INT").option("maxFilesPerTrigger", 1).csv(str(source))
    counts = events.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
    query = (
        counts.writeStream.outputMode("complete").format("memory").queryName("replica_fs_cluster")
        .option("checkpointLocation", str(checkpoint)).trigger(processingTime="200 milliseconds").start()
    )  # fmt: skip

    def processed(batches: int) -> bool:
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        progress = query.lastProgress
        return progress is not None and progress["batchId"] >= batches - 1 and progress["numInputRows"] > 0

    def exact() -> None:
        expected: dict[int, list[int]] = {}
        for k, v in rows:
            n, s = expected.get(k, [0, 0])
            expected[k] = [n + 1, s + v]
        got = {r["k"]: [r["n"], r["s"]] for r in spark.sql("select * from replica_fs_cluster").collect()}
        assert got == expected

    try:
        for batch in range(4):
            feed(batch)
            _wait(lambda b=batch: processed(b + 1), f"batch {batch}")
            exact()
        before = _executor_logs(spark)
        # The executor holding the most partitions' state dies.
        held = {e: _loaded_partitions(log) for e, log in before.items()}
        victim = max(sorted(executor_pids()), key=lambda e: (len(held.get(e, ())), e))
        lost = held.get(victim, set())
        assert lost, f"executor {victim} held no partition's state: {held}"
        kill_executor(victim)
        assert _junk_state_files(checkpoint) > 0
        for batch in range(4, 6):
            feed(batch)
            _wait(lambda b=batch: processed(b + 1), f"batch {batch} after executor {victim} was killed")
            exact()
    finally:
        query.stop()

    after = _executor_logs(spark)
    reads = [
        read
        for executor, log in after.items()
        if executor != victim
        for read in _state_reads(log[len(before.get(executor, "")):])
    ]
    assert not [r for r in reads if r[1] == "the checkpoint location"], reads
    # Every partition the dead executor held was reloaded elsewhere, from copies.
    reloaded = {f"0/{p}/default" for p in lost}
    assert reloaded <= {store for store, where in reads if where == "its local copy"}, (lost, reads)
