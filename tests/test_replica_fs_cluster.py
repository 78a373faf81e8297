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
from urllib.parse import urlparse

import pytest
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from test_replica_fs import overwrite_state_files_with_junk

from spark_provider.checkpoint_files import COPIES_DIR_KEY
from spark_provider.local_cluster import executor_pids, kill_executor

PARTITIONS = 4
PROGRESS_TIMEOUT = 180.0


@pytest.fixture(scope="module")
def host_copies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host directory the executors keep copies in (`replica_files_dir`)."""
    return tmp_path_factory.mktemp("host-copies")


@pytest.fixture(scope="module")
def viewfs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local directory behind `viewfs://cluster/runs`: checkpoint locations of another scheme than file:, whose
    file systems the layer wraps as it would s3a's or hdfs's."""
    return tmp_path_factory.mktemp("viewfs-runs")


@pytest.fixture(scope="module")
def spark(host_copies: Path, viewfs_root: Path) -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_provider

    copies = host_copies
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
        .config("spark.hadoop.fs.viewfs.mounttable.cluster.link./runs", viewfs_root.as_uri())
    )
    session = spark_provider.enable(
        builder, spark_rocksdb=True, replica_files_dir=str(copies), checkpoint_schemes=("file", "viewfs")
    ).getOrCreate()
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


def _linked_ssts(log: str) -> list[str]:
    """The store ids of the SSTs this executor's loads were served as hard links to local copies."""
    return re.findall(r"statestore-fs: (\S+) read \d+ bytes of sst \S+ from its local copy[^,\n]*, as a hard link", log)


def _current_holders(logs: dict[str, str], run_id: str) -> dict[int, str]:
    """Partition -> the executor whose provider last reported it active for query run `run_id` (each executor's
    INFO log names the partitions it loads, with the second). A partition Spark ran on one executor and later on
    another is the later one's: only its state goes with that executor."""
    pattern = re.compile(
        r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) INFO StateStore: Reported that the loaded instance StateStoreProviderId\[ "
        r"storeId=StateStoreId\[ operatorId=0, partitionId=(\d+), storeName=default \], queryRunId="
        + re.escape(run_id),
        re.MULTILINE,
    )
    latest: dict[int, tuple[str, str]] = {}
    for executor, log in logs.items():
        for when, partition in pattern.findall(log):
            if int(partition) not in latest or when >= latest[int(partition)][0]:
                latest[int(partition)] = (when, executor)
    return {partition: executor for partition, (_, executor) in latest.items()}


def _copies_settled(checkpoint: Path, location: str, copies: Path) -> bool:
    """Whether every state file of the checkpoint (`location`, its local directory `checkpoint`) has its copy's
    index entry in the host's directory: no snapshot upload of the maintenance thread is between the checkpoint's
    rename and its copy's publication (a kill there leaves a file no copy holds, which a load must read from the
    checkpoint location)."""
    root = urlparse(location).path or location  # what the index keys by: the path part of the URI
    state = checkpoint / "state"
    files = [
        str(f.relative_to(state))
        for f in state.rglob("*")
        if f.is_file() and not f.name.startswith(".") and f.suffix in (".sst", ".zip", ".changelog")
    ]
    indexed = []
    for index in copies.rglob("*.index"):
        try:
            indexed.append(index.read_text(errors="replace").split("\n", 1)[0])
        except OSError:
            continue
    keys = set(indexed)
    return all(f"{root.rstrip('/')}/state/{name}" in keys for name in files)


def _snapshots_uploaded(logs: dict[str, str], run_id: str, checkpoint: Path) -> bool:
    """Whether, for each partition of query run `run_id`, the newest snapshot its executors' RocksDB logged creating
    (at a commit; the maintenance thread uploads it later) is in the checkpoint as `<version>.zip`. A CI run: the
    copies were all published, then the maintenance thread uploaded 4.zip and the kill came before its copy was."""
    pattern = re.compile(
        r"partitionId=(\d+), storeName=default \], queryRunId=" + re.escape(run_id)
        + r" \]: RocksDB file mapping after creating snapshot file mapping for version (\d+):"
    )  # fmt: skip
    newest: dict[int, int] = {}
    for log in logs.values():
        for partition, version in pattern.findall(log):
            newest[int(partition)] = max(newest.get(int(partition), 0), int(version))
    return all((checkpoint / "state" / "0" / str(p) / f"{v}.zip").is_file() for p, v in newest.items())


def _wait(condition: Any, what: str, timeout: float = PROGRESS_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f}s for {what}")
        time.sleep(0.2)


def _aggregation(events: Any) -> Any:
    from pyspark.sql import functions as F

    return events.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))


def _running_totals(events: Any) -> Any:
    # Defined here, not at module level, so that it is pickled by value: the executors' Python cannot import a
    # test module.
    class RunningTotals(StatefulProcessor):
        """Per key, the count and sum of `v` so far in a value state, emitted for each key of a batch."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.totals = handle.getValueState("totals", "n LONG, s LONG")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            import pandas as pd

            n, s = self.totals.get() if self.totals.exists() else (0, 0)
            for frame in rows:
                n, s = n + len(frame), s + int(frame["v"].sum())
            self.totals.update((n, s))
            yield pd.DataFrame({"k": [int(key[0])], "n": [n], "s": [s]})

        def close(self) -> None:
            pass

    return events.groupBy("k").transformWithStateInPandas(
        statefulProcessor=RunningTotals(), outputStructType="k INT, n LONG, s LONG", outputMode="Update",
        timeMode="None",
    )  # fmt: skip


def _kill_and_reload(
    spark: Any, tmp_path: Path, name: str, stateful: Any, mode: str, damage: Any, viewfs_root: Path | None = None
) -> tuple[set[int], list[tuple[str, str]]]:
    """Four batches; the executor holding the most partitions' state is killed with SIGKILL and `damage(checkpoint,
    lost partitions)` done; two more batches. Each batch's output must equal an exact recomputation (the
    aggregation's whole result, or each batch's keys with their running totals). Returns the partitions the dead
    executor held and the state file reads (store id, where from) the other executors logged after the kill. With
    `viewfs_root`, the checkpoint location is `viewfs://cluster/runs/<name>` (that directory's `<name>`)."""
    source, checkpoint = tmp_path / "in", tmp_path / "ck"
    location = str(checkpoint)
    if viewfs_root is not None:
        checkpoint = viewfs_root / name
        location = f"viewfs://cluster/runs/{name}"
    source.mkdir()
    batches: list[list[tuple[int, int]]] = []
    outputs: dict[int, list[tuple[int, int, int]]] = {}

    def feed(batch: int) -> None:
        lines = [f"{(batch * 31 + i) % 60},{i}" for i in range(600)]
        batches.append([(int(k), int(v)) for k, v in (line.split(",") for line in lines)])
        (source / f"{batch:03d}.csv").write_text("\n".join(lines) + "\n")

    def record(frame: Any, batch_id: int) -> None:
        outputs[batch_id] = sorted((r["k"], r["n"], r["s"]) for r in frame.collect())

    events = spark.readStream.schema("k INT, v INT").option("maxFilesPerTrigger", 1).csv(str(source))
    query = (
        stateful(events).writeStream.outputMode(mode).foreachBatch(record).queryName(name)
        .option("checkpointLocation", location).trigger(processingTime="200 milliseconds").start()
    )  # fmt: skip

    def processed(count: int) -> bool:
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        return count - 1 in outputs

    def exact(batch: int) -> None:
        totals: dict[int, tuple[int, int]] = {}
        for rows in batches[: batch + 1]:
            for k, v in rows:
                n, s = totals.get(k, (0, 0))
                totals[k] = (n + 1, s + v)
        shown = totals if mode == "complete" else {k: totals[k] for k, _ in batches[batch]}
        assert outputs[batch] == sorted((k, n, s) for k, (n, s) in shown.items()), f"batch {batch}"

    try:
        for batch in range(4):
            feed(batch)
            _wait(lambda b=batch: processed(b + 1), f"batch {batch}")
            exact(batch)
        copies = Path(spark.sparkContext.getConf().get(COPIES_DIR_KEY))
        _wait(
            lambda: _snapshots_uploaded(_executor_logs(spark), str(query.runId), checkpoint)
            and _copies_settled(checkpoint, location, copies),
            "every snapshot created to be uploaded and every state file's copy to be published",
        )
        before = _executor_logs(spark)
        # The executor holding the most partitions' state dies.
        holders = _current_holders(before, str(query.runId))
        held = {e: {p for p, holder in holders.items() if holder == e} for e in before}
        victim = max(sorted(executor_pids()), key=lambda e: (len(held.get(e, ())), e))
        lost = held.get(victim, set())
        assert lost, f"executor {victim} held no partition's state: {held}"
        kill_executor(victim)
        damage(checkpoint, lost)
        for batch in range(4, 6):
            feed(batch)
            _wait(lambda b=batch: processed(b + 1), f"batch {batch} after executor {victim} was killed")
            exact(batch)
    finally:
        query.stop()

    after = _executor_logs(spark)
    reads = [
        read
        for executor, log in after.items()
        if executor != victim
        for read in _state_reads(log[len(before.get(executor, "")):])
    ]
    return lost, reads


@pytest.mark.parametrize(
    ("name", "stateful", "mode", "on_viewfs"),
    [
        ("aggregation", _aggregation, "complete", False),
        ("transform_with_state_in_pandas", _running_totals, "update", False),
        ("aggregation_on_viewfs", _aggregation, "complete", True),
    ],
)
def test_a_killed_executors_partitions_load_from_the_copies_it_kept_on_the_host(
    spark: Any, tmp_path: Path, viewfs_root: Path, name: str, stateful: Any, mode: str, on_viewfs: bool
) -> None:
    """With every state file of the checkpoint junked after the kill, every partition the dead executor held
    reloads elsewhere from its local copies, none from the checkpoint location, and every batch is exact; also with
    the checkpoint location on another scheme than file: (viewfs, the layer around the scheme's own file system)."""

    def junk(checkpoint: Path, lost: set[int]) -> None:
        assert overwrite_state_files_with_junk(checkpoint) > 0

    lost, reads = _kill_and_reload(
        spark, tmp_path, name, stateful, mode, junk, viewfs_root if on_viewfs else None
    )
    assert not [r for r in reads if r[1] == "the checkpoint location"], reads
    reloaded = {f"0/{p}/default" for p in lost}
    assert reloaded <= {store for store, where in reads if where == "its local copy"}, (lost, reads)
    # Spark's file manager copies each SST into RocksDB's directory: the layer hard-links the copy instead.
    linked = {store for executor, log in _executor_logs(spark).items() for store in _linked_ssts(log)}
    assert linked & reloaded, f"no SST of a reloaded partition {sorted(reloaded)} was served as a hard link"


def test_a_corrupt_copy_fails_the_load_and_its_retry_reads_the_checkpoint(
    spark: Any, tmp_path: Path, host_copies: Path
) -> None:
    """Every local copy of the lost partitions' state files overwritten by junk of the same length after the kill:
    the copies are still trusted (their sizes match), and their checksums fail: an SST's as it is hard-linked (the
    link is removed, and the copy read from the checkpoint location instead), a changelog's or zip's as the load
    reads it (the load fails, and Spark's retry of the task reads the checkpoint location). Either way the
    partition's copies are removed, and every batch is exact."""
    damaged: list[str] = []

    def corrupt_copies(checkpoint: Path, lost: set[int]) -> None:
        for index in host_copies.rglob("*.index"):
            of = index.read_text().splitlines()[0]
            if of.startswith(f"{checkpoint}/state/") and any(f"/state/0/{p}/" in of for p in lost):
                copy = index.with_suffix("")
                copy.write_bytes(b"\xa5" * copy.stat().st_size)
                damaged.append(of)
        assert damaged, "no copy of the lost partitions' state files to corrupt"

    lost, reads = _kill_and_reload(spark, tmp_path, "corrupt_copies", _aggregation, "complete", corrupt_copies)
    reloaded = {f"0/{p}/default" for p in lost}
    assert reloaded <= {store for store, where in reads if where == "the checkpoint location"}, (lost, reads)
    corrupt = [line for log in _executor_logs(spark).values() for line in log.splitlines() if "is corrupt (" in line]
    assert corrupt, "no executor reported a corrupt copy"
