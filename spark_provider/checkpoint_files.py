"""The Spark confs that keep Spark's own RocksDB provider and put our checkpoint file layer under it: the
`file:` scheme's Hadoop file systems become `io.statestore.spark.ReplicaFileSystem` and `ReplicaFs`, which keep a
local copy of each state file as Spark writes it and serve it to later loads on the same host, also to an
executor started after another died (README, "Under Spark's own provider"). Any other scheme of a checkpoint location
(`s3a`, `abfss`, `gs`, `hdfs`, `viewfs`...) gets `ReplicaFilterFileSystem` and `ReplicaDelegateFs`, the same layer
around the scheme's own file system class.

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
WRAPPED_KEY = "spark.hadoop.statestore.replicaFiles.wrapped.{scheme}.impl"
# The file system class Hadoop (or the store's connector) uses for a scheme when `fs.<scheme>.impl` is not set: what
# the layer wraps unless the application names its own class there.
KNOWN_FILE_SYSTEMS = {
    "s3a": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    "abfs": "org.apache.hadoop.fs.azurebfs.AzureBlobFileSystem",
    "abfss": "org.apache.hadoop.fs.azurebfs.SecureAzureBlobFileSystem",
    "gs": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
    "hdfs": "org.apache.hadoop.hdfs.DistributedFileSystem",
    "viewfs": "org.apache.hadoop.fs.viewfs.ViewFileSystem",
    "wasbs": "org.apache.hadoop.fs.azure.NativeAzureFileSystem$Secure",
    "oss": "org.apache.hadoop.fs.aliyun.oss.AliyunOSSFileSystem",
}
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


def checkpoint_file_confs(
    jar: str, existing: dict[str, str], copies_dir: str | None = None, schemes: tuple[str, ...] | list[str] = ("file",)
) -> dict[str, str]:
    """The confs to add to `existing` (the application's confs so far) for the layer: Spark's RocksDB provider
    (kept when already set; another provider is a SettingError), the two file system classes of each of `schemes`
    (the checkpoint locations' URI schemes), the jar on the driver's and the executors' class path (Hadoop loads file
    systems from there, before any task), and `copies_dir`, a directory on each host that outlives executors
    (default: the JVM's temporary directory).

    A scheme other than `file` is wrapped around the class `existing` names as its `spark.hadoop.fs.<scheme>.impl`,
    else the one its connector registers (`KNOWN_FILE_SYSTEMS`); a scheme with neither is a SettingError."""
    provider = existing.get(PROVIDER_CLASS_KEY)
    if provider and provider != SPARK_ROCKSDB_PROVIDER:
        raise SettingError(
            f"{PROVIDER_CLASS_KEY} is {provider!r}: the checkpoint file layer works under Spark's own RocksDB "
            f"provider ({SPARK_ROCKSDB_PROVIDER}) only; unset it, or use enable() without spark_rocksdb for ours"
        )
    confs = {PROVIDER_CLASS_KEY: SPARK_ROCKSDB_PROVIDER}
    for scheme in scheme_list(schemes):
        confs.update(_scheme_confs(scheme, existing))
    for key in CLASS_PATH_KEYS:
        entries = [e for e in (existing.get(key) or "").split(os.pathsep) if e and e != jar]
        confs[key] = os.pathsep.join([*entries, jar])
    if copies_dir:
        confs[COPIES_DIR_KEY] = copies_dir
    return confs


def scheme_list(schemes: tuple[str, ...] | list[str] | str) -> list[str]:
    """`schemes` (a sequence, or one comma-separated string) as lower-case URI schemes, checked: a SettingError names
    one that is not a scheme."""
    names = [s.strip().lower() for s in (schemes.split(",") if isinstance(schemes, str) else schemes)]
    for name in names:
        if not name or not name[0].isalpha() or not all(c.isalnum() or c in "+-." for c in name):
            raise SettingError(
                f"checkpoint_schemes: {name!r} is not a URI scheme (the part of a checkpoint location before '://', "
                "such as file, s3a, abfss, gs, hdfs)"
            )
    if not names:
        raise SettingError("checkpoint_schemes is empty: name at least one scheme (file, s3a, abfss, gs, hdfs...)")
    return list(dict.fromkeys(names))


def _scheme_confs(scheme: str, existing: dict[str, str]) -> dict[str, str]:
    if scheme == "file":
        return {
            FILE_SYSTEM_KEY: "io.statestore.spark.ReplicaFileSystem",
            ABSTRACT_FILE_SYSTEM_KEY: "io.statestore.spark.ReplicaFs",
        }
    impl_key = f"spark.hadoop.fs.{scheme}.impl"
    ours = "io.statestore.spark.ReplicaFilterFileSystem"
    configured = existing.get(impl_key, "")
    wrapped = existing.get(WRAPPED_KEY.format(scheme=scheme)) or (configured if configured != ours else "")
    wrapped = wrapped or KNOWN_FILE_SYSTEMS.get(scheme, "")
    if not wrapped:
        raise SettingError(
            f"checkpoint_schemes: no file system class is known for {scheme}: paths; set {impl_key} to the class "
            "the checkpoint layer should wrap"
        )
    return {
        impl_key: ours,
        f"spark.hadoop.fs.AbstractFileSystem.{scheme}.impl": "io.statestore.spark.ReplicaDelegateFs",
        WRAPPED_KEY.format(scheme=scheme): wrapped,
    }
