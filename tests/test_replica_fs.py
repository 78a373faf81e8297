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
import time
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


def _file_system_manager() -> str:
    """Spark's FileSystem-based checkpoint file manager class, whose package moved in Spark 4."""
    import pyspark

    package = "streaming" if pyspark.__version__.startswith("3.") else "streaming.checkpointing"
    return f"org.apache.spark.sql.execution.{package}.FileSystemBasedCheckpointFileManager"


# A checkpoint location of another scheme than file: Hadoop's view file system, its mount table's `/ck` on the local
# directory the test reads (a real FileSystem and AbstractFileSystem pair of its own scheme, as s3a or hdfs are).
VIEWFS_MOUNT = "ckpt"


def _viewfs_confs(jar: str, root: Path) -> dict[str, str]:
    """The layer for `viewfs:` alone, as `checkpoint_file_confs` makes it for a user (file: stays Hadoop's own)."""
    from spark_provider.checkpoint_files import checkpoint_file_confs

    confs = checkpoint_file_confs(jar, {}, None, ["viewfs"])
    # A mount's target must exist: Hadoop 3.3's view file system (Spark 3.5's) refuses to create a mount point.
    (root / "ck").mkdir(exist_ok=True)
    confs[f"spark.hadoop.fs.viewfs.mounttable.{VIEWFS_MOUNT}.link./ck"] = (root / "ck").absolute().as_uri()
    return confs


def _session(jar: str, copies: Path, layer: bool = True, conf: dict[str, str] | None = None) -> Any:
    """Spark's RocksDB provider with changelog checkpointing, its checkpoint files through our wrappers (when
    `layer`; for `file:` unless `conf` puts them on another scheme)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]")
    if layer and not any(key.startswith("spark.hadoop.statestore.replicaFiles.wrapped.") for key in conf or {}):
        builder = (
            builder.config("spark.driver.extraClassPath", jar)
            .config("spark.executor.extraClassPath", jar)
            .config("spark.hadoop.fs.file.impl", "io.statestore.spark.ReplicaFileSystem")
            .config("spark.hadoop.fs.AbstractFileSystem.file.impl", "io.statestore.spark.ReplicaFs")
        )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return (
        builder.appName("statestore-replica-fs")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.streaming.stateStore.providerClass", SPARK_ROCKSDB)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
        # Retention deletes old state files while the test runs: their copies must go with them.
        .config("spark.sql.streaming.minBatchesToRetain", "2")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "1s")
        .config("spark.hadoop.statestore.replicaFiles.dir", str(copies))
        .getOrCreate()
    )


def overwrite_state_files_with_junk(checkpoint: Path) -> int:
    """Every SST, snapshot zip and changelog of the checkpoint overwritten in place by junk of the same length (as
    the probe in DESIGN.md section 8 did), keeping its modification time: the junk stands for bytes no load may
    read, not for a later write of the file (which the layer tells by that time, and serves no copy of); returns
    how many."""
    doomed = [
        f
        for f in (checkpoint / "state").rglob("*")
        if f.is_file() and not f.name.startswith(".") and f.suffix in (".sst", ".zip", ".changelog")
    ]
    for f in doomed:
        status = f.stat()
        f.write_bytes(b"\xa5" * status.st_size)
        os.utime(f, ns=(status.st_atime_ns, status.st_mtime_ns))
    return len(doomed)


class _Aggregation:
    """A streaming aggregation over CSV files, one file per batch, run to the end of its input each time (a new
    query run from the same checkpoint)."""

    KINDS = ("changelog", "snapshot", "sst")

    def __init__(self, spark: Any, root: Path, location: str | None = None) -> None:
        self.spark = spark
        self.source, self.checkpoint = root / "in", root / "ck"
        # The checkpoint location Spark is given: the local directory, or a URI of another scheme over it.
        self.location = location or str(self.checkpoint)
        self.source.mkdir(exist_ok=True)
        self.rows: list[list[int]] = []

    def uri_of(self, local: Path) -> str:
        """The URI Spark knows the checkpoint's file `local` by."""
        if self.location == str(self.checkpoint):
            return f"file:{local}"
        return f"{self.location}/{local.relative_to(self.checkpoint)}"

    def feed(self, batch: int) -> None:
        """Batch `batch`'s file (kept if an earlier process wrote it) and its rows."""
        lines = [f"{(batch * 37 + i) % 50},{i}" for i in range(400)]
        self.rows.extend([int(x) for x in line.split(",")] for line in lines)
        target = self.source / f"{batch:03d}.csv"
        if not target.exists():
            target.write_text("\n".join(lines) + "\n")

    def run(self) -> None:
        from pyspark.sql import functions as F

        events = self.spark.readStream.schema("k INT, v INT").csv(str(self.source))
        counts = events.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
        query = (
            counts.writeStream.outputMode("complete").format("memory").queryName("replica_fs_counts")
            .option("checkpointLocation", self.location).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination()
        assert query.exception() is None

    def counters(self) -> dict[str, int]:
        """Bytes of state files this JVM read, per kind, from the checkpoint location and from copies."""
        reads = self.spark.sparkContext._jvm.io.statestore.spark.ReplicaFileSystem
        return {
            **{kind: int(reads.checkpointBytesRead(kind)) for kind in self.KINDS},
            **{f"copy_{kind}": int(reads.copyBytesRead(kind)) for kind in self.KINDS},
        }

    def got(self) -> dict[str, list[int]]:
        return {str(r["k"]): [r["n"], r["s"]] for r in self.spark.sql("select * from replica_fs_counts").collect()}

    def close_stopped_runs(self) -> None:
        """The stopped run's providers stay loaded until maintenance unloads them, and until then may upload a
        snapshot and delete old versions while the next run loads (with two versions retained, under its feet:
        Spark's own race, whatever the file system). A restart on a new driver has none: close them, as it would."""
        self.spark.sparkContext._jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()


def rewrite_versions_later(checkpoint: Path) -> int:
    """Every changelog and snapshot zip of the checkpoint written again under its name, with the same bytes and a
    later modification time, through a temporary file renamed over it, as a batch re-run on another host rewrites
    it (checkpoint format 1); returns how many."""
    rewritten = 0
    for changelog in sorted(f for f in (checkpoint / "state").rglob("*") if f.suffix in (".changelog", ".zip")):
        staging = changelog.with_name(f".{changelog.name}.rewrite.tmp")
        staging.write_bytes(changelog.read_bytes())
        later = changelog.stat().st_mtime_ns + 5_000_000_000
        os.utime(staging, ns=(later, later))
        os.replace(staging, changelog)
        rewritten += 1
    return rewritten


def _scenario(
    root: Path, jar: str, junk: bool | str, conf: dict[str, str] | None = None, location: str | None = None
) -> dict[str, Any]:
    """Four runs of an aggregation, then a fifth from the same checkpoint (a new query run: its providers load
    every partition through the file system), with every state file of the checkpoint overwritten by junk first when
    `junk`, or every changelog written again when it is "rewrite"; what the last run saw and the reads counted
    before and after it. `location`: the checkpoint location's URI when not the local directory."""
    spark = _session(jar, root / "copies", conf=conf)
    job = _Aggregation(spark, root, location)
    checkpoint = job.checkpoint
    for batch in range(4):
        job.feed(batch)
        job.run()
    job.close_stopped_runs()
    counters = job.counters
    if junk == "rewrite":
        junked = rewrite_versions_later(checkpoint)
    else:
        junked = overwrite_state_files_with_junk(checkpoint) if junk else 0
    before = counters()
    job.feed(4)
    job.run()
    after = counters()
    got = job.got()
    # Deletes through both layers, as Spark's retention makes them: the files' copies must go too.
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    doomed = sorted((checkpoint / "state" / "0" / "0").glob("*.changelog"))[0]
    root_uri = jvm.java.net.URI(job.uri_of(checkpoint))
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(root_uri, conf)
    assert context.delete(jvm.org.apache.hadoop.fs.Path(job.uri_of(doomed)), False)
    ssts = sorted((checkpoint / "state").rglob("*.sst"))
    if ssts:
        file_system = jvm.org.apache.hadoop.fs.FileSystem.get(root_uri, conf)
        assert file_system.delete(jvm.org.apache.hadoop.fs.Path(job.uri_of(ssts[0])), False)
    spark.stop()

    def listed() -> tuple[list[str], list[str]]:
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
        return state_files, copies

    # The maintenance thread may still upload a snapshot as the context stops: its copy is published just after
    # its rename, so the two listings agree once nothing is in flight.
    deadline = time.monotonic() + 20
    state_files, copies = listed()
    while Counter(state_files) != Counter(copies) and time.monotonic() < deadline:
        time.sleep(0.2)
        state_files, copies = listed()
    indexed = sorted(f.name.removesuffix(".index") for f in (root / "copies").rglob("*.index"))
    return {
        "rows": job.rows,
        "got": got,
        "before": before,
        "after": after,
        "junked": junked,
        "state_files": state_files,
        "copies": copies,
        "indexed": indexed,
        # Not staging files or the host's lock (`.`): copies only.
        "copy_names": sorted(
            f.name for f in (root / "copies").rglob("*") if f.is_file() and f.suffix != ".index" and f.name[0] != "."
        ),
    }


def _scenario_before_the_layer(root: Path) -> dict[str, Any]:
    """Four runs of the aggregation on Spark's provider without the layer (a query that ran before it was on)."""
    spark = _session("", root / "copies", layer=False)
    job = _Aggregation(spark, root)
    for batch in range(4):
        job.feed(batch)
        job.run()
    spark.stop()
    return {"rows": job.rows}


def _scenario_read_through(root: Path, jar: str) -> dict[str, Any]:
    """The query of `_scenario_before_the_layer` restarted with the layer on: its first run loads state files no
    copy exists of, from the checkpoint location, keeping copies as it reads them; then, with every state file in
    the checkpoint junked, one more run."""
    spark = _session(jar, root / "copies")
    job = _Aggregation(spark, root)
    for batch in range(4):
        job.feed(batch)
    start = job.counters()
    job.feed(4)
    job.run()
    first = job.counters()
    job.close_stopped_runs()
    junked = overwrite_state_files_with_junk(job.checkpoint)
    job.feed(5)
    job.run()
    return {"rows": job.rows, "got": job.got(), "start": start, "first": first, "after": job.counters(),
            "junked": junked}  # fmt: skip


def _run_scenario(tmp_path: Path, junk: bool | str) -> dict[str, Any]:
    # A JVM of its own: the wrappers must be on the driver's class path from its start, and Hadoop caches file
    # systems per JVM (the suite's other modules share one).
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path), str(provider_jar()),
         junk if isinstance(junk, str) else "junk" if junk else "clean"],
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


@pytest.mark.parametrize("manager", ["file context", "file system", "viewfs", "viewfs file system"])
def test_a_reload_reads_the_local_copies_when_the_checkpoints_state_files_are_junk(
    tmp_path: Path, manager: str
) -> None:
    """The probe's experiment (DESIGN.md section 8), as a test: with every state file in the checkpoint overwritten
    by junk of the same length, the restarted run loads from the copies kept as the files were written, exactly,
    and reads no state file of the checkpoint location; with Spark's default checkpoint file manager (FileContext)
    and with its FileSystem-based one (changelogs and zips then renamed through the FileSystem wrapper). The viewfs
    cases put the checkpoint location on another scheme than file: (`viewfs://ckpt/ck`), where the layer wraps the
    scheme's own file system class as it would s3a's or hdfs's: temporary files are copied as they are written and
    published by their rename, SSTs are copied as `copyFromLocalFile` uploads them."""
    mode = {"file context": True, "file system": "junk-file-system-manager"}.get(manager, manager.replace(" ", "-"))
    seen = _run_scenario(tmp_path, junk=mode)
    before, after = seen["before"], seen["after"]
    read = {k: after[k] - before[k] for k in after}
    assert seen["junked"] > 0
    assert read["changelog"] == read["snapshot"] == read["sst"] == 0, read
    assert read["copy_changelog"] + read["copy_snapshot"] > 0, read
    # Every copy is of a state file the checkpoint still has: the deletes took their copies along.
    assert Counter(seen["copies"]) == Counter(seen["state_files"]), (seen["copies"], seen["state_files"])
    # Each copy has its index entry (what another JVM of the host finds it by), and no entry outlives its copy.
    assert seen["indexed"] == seen["copy_names"], (seen["indexed"], seen["copy_names"])


def test_a_copy_of_a_file_written_again_since_is_not_served(tmp_path: Path) -> None:
    """A batch re-run on another host writes a changelog or snapshot zip again under its name (checkpoint format 1),
    maybe at the same size (here with the same bytes): this host's copy is of the earlier write, and the checkpoint
    file's modification time, kept with the copy, tells it. The restarted run reads the rewritten files it needs
    from the checkpoint location, none from the stale copies (removed as found), keeps copies of them as they are
    now, and is exact."""
    seen = _run_scenario(tmp_path, "rewrite")
    before, after = seen["before"], seen["after"]
    read = {k: after[k] - before[k] for k in after}
    assert seen["junked"] > 0
    assert read["changelog"] + read["snapshot"] > 0, read
    assert read["copy_changelog"] == read["copy_snapshot"] == 0, read
    # What the reads kept instead: copies of the files as they are now, with the later modification time.
    fresh = []
    for index in (tmp_path / "copies").rglob("*.index"):
        lines = index.read_text().splitlines()
        checkpoint_file = Path(lines[0])
        if checkpoint_file.suffix in (".changelog", ".zip") and checkpoint_file.exists():
            now = checkpoint_file.stat().st_mtime_ns // 1_000_000
            fresh += [line for line in lines[3:] if line == f"modified {now}"]
    assert fresh, "no copy was kept of a rewritten file as the restarted run read it"


def test_a_query_that_ran_before_the_layer_gets_copies_as_its_first_load_reads_the_checkpoint(tmp_path: Path) -> None:
    """A query already running on Spark's provider (its files written without the layer) is restarted with the
    layer on: its first load reads those files from the checkpoint location and keeps copies of them as it reads;
    with every state file then junked, the next run loads from the copies alone, exactly."""
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path), "", "before"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = _run_scenario(tmp_path, "read-through")
    start, first, after = seen["start"], seen["first"], seen["after"]
    assert sum(first[k] - start[k] for k in ("changelog", "snapshot")) > 0, (start, first)
    assert seen["junked"] > 0
    assert all(after[k] == first[k] for k in ("changelog", "snapshot", "sst")), (first, after)
    assert sum(after[f"copy_{k}"] - first[f"copy_{k}"] for k in ("changelog", "snapshot", "sst")) > 0, (first, after)


if __name__ == "__main__":
    mode = sys.argv[3]
    if mode == "before":
        result = _scenario_before_the_layer(Path(sys.argv[1]))
    elif mode == "read-through":
        result = _scenario_read_through(Path(sys.argv[1]), sys.argv[2])
    elif mode == "junk-file-system-manager":
        manager = {"spark.sql.streaming.checkpointFileManagerClass": _file_system_manager()}
        result = _scenario(Path(sys.argv[1]), sys.argv[2], True, manager)
    elif mode.startswith("viewfs"):
        viewfs = _viewfs_confs(sys.argv[2], Path(sys.argv[1]))
        if mode == "viewfs-file-system":
            viewfs["spark.sql.streaming.checkpointFileManagerClass"] = _file_system_manager()
        result = _scenario(Path(sys.argv[1]), sys.argv[2], True, viewfs, f"viewfs://{VIEWFS_MOUNT}/ck")
    else:
        result = _scenario(Path(sys.argv[1]), sys.argv[2], "rewrite" if mode == "rewrite" else mode == "junk")
    print(json.dumps(result))
