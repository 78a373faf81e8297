"""The Spark confs that keep Spark's own RocksDB provider and put our checkpoint file layer under it: the
`file:` scheme's Hadoop file systems become `io.statestore.spark.ReplicaFileSystem` and `ReplicaFs`, which keep a
local copy of each state file as Spark writes it and serve it to later loads on the same host, also to an
executor started after another died (README, "Under Spark's own provider").

For queries our provider cannot run: transformWithState, Real-Time Mode and offline repartition accept only Spark's
RocksDB provider by its class name, and a query already running on it keeps it for the life of its checkpoint."""

from __future__ import annotations

import os

from spark_provider.settings import SettingError

SPARK_ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER_CLASS_KEY = "spark.sql.streaming.stateStore.providerClass"
FILE_SYSTEM_KEY = "spark.hadoop.fs.file.impl"
ABSTRACT_FILE_SYSTEM_KEY = "spark.hadoop.fs.AbstractFileSystem.file.impl"
COPIES_DIR_KEY = "spark.hadoop.statestore.replicaFiles.dir"
CLASS_PATH_KEYS = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")


def checkpoint_file_confs(jar: str, existing: dict[str, str], copies_dir: str | None = None) -> dict[str, str]:
    """The confs to add to `existing` (the application's confs so far) for the layer: Spark's RocksDB provider
    (kept when already set; another provider is a CheckpointFilesError), the two file system classes, the jar on
    the driver's and the executors' class path (Hadoop loads file systems from there, before any task), and
    `copies_dir`, a directory on each host that outlives executors (default: the JVM's temporary directory)."""
    provider = existing.get(PROVIDER_CLASS_KEY)
    if provider and provider != SPARK_ROCKSDB_PROVIDER:
        raise SettingError(
            f"{PROVIDER_CLASS_KEY} is {provider!r}: the checkpoint file layer works under Spark's own RocksDB "
            f"provider ({SPARK_ROCKSDB_PROVIDER}) only; unset it, or use enable() without spark_rocksdb for ours"
        )
    confs = {
        PROVIDER_CLASS_KEY: SPARK_ROCKSDB_PROVIDER,
        FILE_SYSTEM_KEY: "io.statestore.spark.ReplicaFileSystem",
        ABSTRACT_FILE_SYSTEM_KEY: "io.statestore.spark.ReplicaFs",
    }
    for key in CLASS_PATH_KEYS:
        entries = [e for e in (existing.get(key) or "").split(os.pathsep) if e and e != jar]
        confs[key] = os.pathsep.join([*entries, jar])
    if copies_dir:
        confs[COPIES_DIR_KEY] = copies_dir
    return confs
