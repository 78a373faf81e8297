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
# Our settings that apply under Spark's provider: the state nodes and the controller that replicate the copies to
# other hosts and steer lost partitions to them, and Spark's own snapshot interval and retention. The rest configure
# our provider's store and say nothing to Spark's.
FILE_LAYER_SETTINGS = frozenset(
    {
        "replication_factor",
        "node_socket",
        "controller",
        "secret",
        "tls_cert",
        "tls_key",
        "tls_ca",
        "node_port",
        "controller_port",
        "metrics_port",
        "local_dir",
        "forget_after_seconds",
        "rereplication_delay_seconds",
        "min_deltas_for_snapshot",
        "min_batches_to_retain",
    }
)


def refused_settings(names: set[str] | list[str]) -> None:
    """Raise a SettingError naming the settings among `names` that do not apply under Spark's provider."""
    refused = sorted(set(names) - FILE_LAYER_SETTINGS)
    if refused:
        raise SettingError(
            f"settings {', '.join(refused)} configure the statestore provider; with Spark's RocksDB provider "
            f"(spark_rocksdb=True, --spark-rocksdb) only {', '.join(sorted(FILE_LAYER_SETTINGS))} apply"
        )


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
