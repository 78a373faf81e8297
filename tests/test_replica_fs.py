"""The checkpoint file system under Spark's own RocksDB provider (issue 29, its first layer): Hadoop's local file
system and FileContext, wrapped (`ReplicaFileSystem`, `ReplicaFs`), with the reads of the provider's state files
counted. A streaming aggregation on Spark's RocksDB provider with changelog checkpointing, restarted from its
checkpoint, gives the exact recomputation through it, and its load after the restart is counted as reads of
changelogs and snapshots from the checkpoint location."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import java_check

from spark_provider.jar import provider_jar

SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def test_state_files_are_recognised_by_path(tmp_path_factory: pytest.TempPathFactory) -> None:
    check = java_check(tmp_path_factory, "StateFilePathCheck", "256m")
    paths = [
        "file:/ck/state/0/3/SSTs/000008-6f1c2b3a-0d1e-4f5a-9b8c-7d6e5f4a3b2c.sst",
        "file:/ck/state/0/3/12.zip",
        "file:/ck/state/0/3/12_6f1c2b3a-0d1e-4f5a-9b8c-7d6e5f4a3b2c.changelog",
        "file:/ck/state/1/0/left-keyToNumValues/4.changelog",
        "file:/ck/state/0/3/.12.changelog.crc",
        "file:/ck/state/0/_metadata/metadata",
        "file:/ck/offsets/12",
        "file:/ck/commits/3",
    ]
    out = subprocess.run([*check, *paths], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [
        "SST /ck 0/3/default SSTs/000008-6f1c2b3a-0d1e-4f5a-9b8c-7d6e5f4a3b2c.sst",
        "SNAPSHOT /ck 0/3/default 12.zip",
        "CHANGELOG /ck 0/3/default 12_6f1c2b3a-0d1e-4f5a-9b8c-7d6e5f4a3b2c.changelog",
        "CHANGELOG /ck 1/0/left-keyToNumValues 4.changelog",
        "none",
        "none",
        "none",
        "none",
    ]


def _session(jar: str, copies: Path) -> Any:
    """Spark's RocksDB provider with changelog checkpointing, its checkpoint files through our wrappers."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName("statestore-replica-fs")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraClassPath", jar)
        .config("spark.executor.extraClassPath", jar)
        .config("spark.hadoop.fs.file.impl", "io.statestore.spark.ReplicaFileSystem")
        .config("spark.hadoop.fs.AbstractFileSystem.file.impl", "io.statestore.spark.ReplicaFs")
        .config("spark.sql.streaming.stateStore.providerClass", SPARK_ROCKSDB)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
        # Retention deletes old state files while the test runs: their copies must go with them.
        .config("spark.sql.streaming.minBatchesToRetain", "2")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "1s")
        .config("spark.hadoop.statestore.replicaFiles.dir", str(copies))
        .getOrCreate()
    )


def _overwrite_state_files_with_junk(checkpoint: Path) -> int:
    """Every SST, snapshot zip and changelog of the checkpoint overwritten in place by junk of the same length (as
    the probe in DESIGN.md section 8 did); returns how many."""
    doomed = [
        f
        for f in (checkpoint / "state").rglob("*")
        if f.is_file() and not f.name.startswith(".") and f.suffix in (".sst", ".zip", ".changelog")
    ]
    for f in doomed:
        f.write_bytes(b"\xa5" * f.stat().st_size)
    return len(doomed)


def _scenario(root: Path, jar: str, junk: bool) -> dict[str, Any]:
    """Four runs of an aggregation, then a fifth from the same checkpoint (a new query run: its providers load
    every partition through the file system), with every state file of the checkpoint overwritten by junk first when
    `junk`; what the last run saw and the reads counted before and after it."""
    from pyspark.sql import functions as F

    spark = _session(jar, root / "copies")
    reads = spark.sparkContext._jvm.io.statestore.spark.ReplicaFileSystem
    source, checkpoint = root / "in", root / "ck"
    source.mkdir()
    rows = []

    def feed(batch: int) -> None:
        lines = [f"{(batch * 37 + i) % 50},{i}" for i in range(400)]
        rows.extend([int(x) for x in line.split(",")] for line in lines)
        (source / f"{batch:03d}.csv").write_text("\n".join(lines) + "\n")

    def run() -> None:
        events = spark.readStream.schema("k INT, v INT").csv(str(source))
        counts = events.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
        query = (
            counts.writeStream.outputMode("complete").format("memory").queryName("replica_fs_counts")
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination()
        assert query.exception() is None

    for batch in range(4):
        feed(batch)
        run()
    # The stopped run's providers stay loaded until maintenance unloads them, and until then may upload a snapshot
    # and delete old versions while the next run loads (with two versions retained, under its feet: Spark's own
    # race, whatever the file system). A restart on a new driver has none: close them, as it would.
    spark.sparkContext._jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()
    kinds = ("changelog", "snapshot", "sst")

    def counters() -> dict[str, int]:
        return {
            **{kind: int(reads.checkpointBytesRead(kind)) for kind in kinds},
            **{f"copy_{kind}": int(reads.copyBytesRead(kind)) for kind in kinds},
        }

    junked = _overwrite_state_files_with_junk(checkpoint) if junk else 0
    before = counters()
    feed(4)
    run()
    after = counters()
    got = {r["k"]: [r["n"], r["s"]] for r in spark.sql("select * from replica_fs_counts").collect()}
    # Deletes through both layers, as Spark's retention makes them: the files' copies must go too.
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    doomed = sorted((checkpoint / "state" / "0" / "0").glob("*.changelog"))[0]
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(jvm.java.net.URI("file:///"), conf)
    assert context.delete(jvm.org.apache.hadoop.fs.Path(f"file:{doomed}"), False)
    ssts = sorted((checkpoint / "state").rglob("*.sst"))
    if ssts:
        file_system = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
        assert file_system.delete(jvm.org.apache.hadoop.fs.Path(f"file:{ssts[0]}"), False)
    spark.stop()
    state_files = [
        str(f.relative_to(checkpoint / "state")).split("/", 2)[-1].replace("/", "_")
        for f in (checkpoint / "state").rglob("*")
        if f.is_file() and f.suffix in (".sst", ".zip", ".changelog") and not f.name.startswith(".")
    ]
    copies = [
        f.name.split("-", 1)[1]
        for f in (root / "copies").rglob("*")
        if f.is_file() and "-" in f.name and not f.name.startswith(".") and f.suffix != ".index"
    ]
    indexed = sorted(f.name.removesuffix(".index") for f in (root / "copies").rglob("*.index"))
    return {
        "rows": rows,
        "got": {str(k): v for k, v in got.items()},
        "before": before,
        "after": after,
        "junked": junked,
        "state_files": state_files,
        "copies": copies,
        "indexed": indexed,
        "copy_names": sorted(f.name for f in (root / "copies").rglob("*") if f.is_file() and f.suffix != ".index"),
    }


def _run_scenario(tmp_path: Path, junk: bool) -> dict[str, Any]:
    # A JVM of its own: the wrappers must be on the driver's class path from its start, and Hadoop caches file
    # systems per JVM (the suite's other modules share one).
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path), str(provider_jar()), "junk" if junk else "clean"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    (tmp_path / "scenario.stderr").write_text(done.stderr)
    causes = [line for line in done.stderr.splitlines() if "Caused by" in line or "statestore-fs" in line]
    assert done.returncode == 0, "\n".join(causes[-20:]) + "\n" + done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    expected: dict[str, list[int]] = {}
    for k, v in seen["rows"]:
        n, s = expected.get(str(k), [0, 0])
        expected[str(k)] = [n + 1, s + v]
    assert seen["got"] == expected
    return seen


def test_an_aggregation_restarted_through_the_wrapper_is_exact_and_its_reload_is_counted(tmp_path: Path) -> None:
    seen = _run_scenario(tmp_path, junk=False)
    before, after = seen["before"], seen["after"]
    read = {k: after[k] - before[k] for k in after}
    assert sum(read.values()) > 0, f"the restarted run's loads read no state file through the wrappers: {seen}"


def test_a_reload_reads_the_local_copies_when_the_checkpoints_state_files_are_junk(tmp_path: Path) -> None:
    """The probe's experiment (DESIGN.md section 8), as a test: with every state file in the checkpoint overwritten
    by junk of the same length, the restarted run loads from the copies kept as the files were written, exactly,
    and reads no state file of the checkpoint location."""
    seen = _run_scenario(tmp_path, junk=True)
    before, after = seen["before"], seen["after"]
    read = {k: after[k] - before[k] for k in after}
    assert seen["junked"] > 0
    assert read["changelog"] == read["snapshot"] == read["sst"] == 0, read
    assert read["copy_changelog"] + read["copy_snapshot"] > 0, read
    # Every copy is of a state file the checkpoint still has: the deletes took their copies along.
    assert Counter(seen["copies"]) == Counter(seen["state_files"]), (seen["copies"], seen["state_files"])
    # Each copy has its index entry (what another JVM of the host finds it by), and no entry outlives its copy.
    assert seen["indexed"] == seen["copy_names"], (seen["indexed"], seen["copy_names"])


if __name__ == "__main__":
    print(json.dumps(_scenario(Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "junk")))
