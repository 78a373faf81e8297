"""The confs of `enable(spark_rocksdb=True)` and `statestore spark-conf --spark-rocksdb`: Spark's RocksDB provider
kept, the file layer's classes and class path set, conflicting input refused with what to do."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spark_provider.checkpoint_files import (
    ABSTRACT_FILE_SYSTEM_KEY,
    COPIES_DIR_KEY,
    FILE_SYSTEM_KEY,
    PROVIDER_CLASS_KEY,
    SPARK_ROCKSDB_PROVIDER,
    checkpoint_file_confs,
)
from spark_provider.settings import SettingError


def test_the_layer_keeps_sparks_provider_and_appends_its_jar_to_the_class_path() -> None:
    existing = {"spark.driver.extraClassPath": os.pathsep.join(["/opt/a.jar", "/x/layer.jar"])}
    confs = checkpoint_file_confs("/x/layer.jar", existing, "/var/lib/copies")
    assert confs[PROVIDER_CLASS_KEY] == SPARK_ROCKSDB_PROVIDER
    assert confs[FILE_SYSTEM_KEY] == "io.statestore.spark.ReplicaFileSystem"
    assert confs[ABSTRACT_FILE_SYSTEM_KEY] == "io.statestore.spark.ReplicaFs"
    assert confs["spark.driver.extraClassPath"] == os.pathsep.join(["/opt/a.jar", "/x/layer.jar"])
    assert confs["spark.executor.extraClassPath"] == "/x/layer.jar"
    assert confs[COPIES_DIR_KEY] == "/var/lib/copies"
    assert COPIES_DIR_KEY not in checkpoint_file_confs("/x/layer.jar", {})


def test_another_scheme_wraps_its_own_file_system_class() -> None:
    """A checkpoint location on s3a (or any scheme) gets the generic layer around the scheme's file system class: the
    one the application set as `fs.<scheme>.impl`, else the one its connector registers; file: stays unwrapped
    unless named."""
    confs = checkpoint_file_confs("/x/layer.jar", {}, None, ["s3a"])
    assert confs["spark.hadoop.fs.s3a.impl"] == "io.statestore.spark.ReplicaFilterFileSystem"
    assert confs["spark.hadoop.fs.AbstractFileSystem.s3a.impl"] == "io.statestore.spark.ReplicaDelegateFs"
    assert confs["spark.hadoop.statestore.replicaFiles.wrapped.s3a.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert FILE_SYSTEM_KEY not in confs
    own = checkpoint_file_confs("/x/layer.jar", {"spark.hadoop.fs.gs.impl": "com.example.MyGcs"}, None, "file,GS")
    assert own["spark.hadoop.statestore.replicaFiles.wrapped.gs.impl"] == "com.example.MyGcs"
    assert own[FILE_SYSTEM_KEY] == "io.statestore.spark.ReplicaFileSystem"
    # Enabling twice keeps the class first wrapped, never the layer around itself.
    again = checkpoint_file_confs("/x/layer.jar", {**confs}, None, ["s3a"])
    assert again["spark.hadoop.statestore.replicaFiles.wrapped.s3a.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    with pytest.raises(SettingError, match=r"no file system class is known for myfs: paths; set spark\.hadoop"):
        checkpoint_file_confs("/x/layer.jar", {}, None, ["myfs"])
    with pytest.raises(SettingError, match="'s3a://bucket' is not a URI scheme"):
        checkpoint_file_confs("/x/layer.jar", {}, None, ["s3a://bucket"])
    done = _layer_spark_conf("--checkpoint-scheme", "abfss")
    assert done.returncode == 0, done.stderr
    assert "--conf spark.hadoop.fs.abfss.impl=io.statestore.spark.ReplicaFilterFileSystem" in done.stdout


def test_another_provider_is_refused_naming_the_conf() -> None:
    with pytest.raises(SettingError, match=r"providerClass is .io\.statestore\.spark\.StatestoreProvider."):
        checkpoint_file_confs("/x/layer.jar", {PROVIDER_CLASS_KEY: "io.statestore.spark.StatestoreProvider"})


def test_enable_refuses_a_running_session_and_our_providers_settings() -> None:
    from pyspark.sql import SparkSession

    import spark_provider

    with pytest.raises(SettingError, match="write_buffer_size_mb configure the statestore provider"):
        spark_provider.enable(SparkSession.builder, jar="/x/layer.jar", spark_rocksdb=True, write_buffer_size_mb=2)
    with pytest.raises(SettingError, match="spark_rocksdb=True only"):
        spark_provider.enable(SparkSession.builder, jar="/x/layer.jar", replica_files_dir="/tmp/c")
    with pytest.raises(SettingError, match="spark_rocksdb=True only"):
        spark_provider.enable(SparkSession.builder, jar="/x/layer.jar", checkpoint_schemes=["s3a"])

    class RunningSession:  # what enable() tells a builder from: no getOrCreate
        pass

    with pytest.raises(SettingError, match=r"needs a SparkSession\.Builder"):
        spark_provider.enable(RunningSession(), jar="/x/layer.jar", spark_rocksdb=True)


def _layer_spark_conf(*arguments: str) -> subprocess.CompletedProcess[str]:
    """`statestore spark-conf --spark-rocksdb --jar /x/layer.jar ARGUMENTS...`, run."""
    return subprocess.run(
        [sys.executable, "-m", "statestore.cli", "spark-conf", "--spark-rocksdb", "--jar", "/x/layer.jar", *arguments],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_spark_conf_prints_the_layers_confs_for_spark_submit() -> None:
    done = _layer_spark_conf("--replica-files-dir", "/var/lib/copies")
    assert done.returncode == 0, done.stderr
    assert f"--conf {PROVIDER_CLASS_KEY}={SPARK_ROCKSDB_PROVIDER}" in done.stdout
    assert f"--conf {FILE_SYSTEM_KEY}=io.statestore.spark.ReplicaFileSystem" in done.stdout
    assert "--conf spark.executor.extraClassPath=/x/layer.jar" in done.stdout
    refused = _layer_spark_conf("sync=true")
    assert refused.returncode == 2 and "sync configure the statestore provider" in refused.stderr, refused.stderr
    # A class name with `$` stays one shell word, `$Secure` and all, when the lines are pasted into a shell.
    wasbs = _layer_spark_conf("--checkpoint-scheme", "wasbs")
    assert wasbs.returncode == 0, wasbs.stderr
    quoted = [line for line in wasbs.stdout.splitlines() if "$Secure" in line]
    assert quoted and all("'" in line for line in quoted), wasbs.stdout


def test_spark_conf_refuses_the_layers_options_without_spark_rocksdb() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "statestore.cli", "spark-conf", "--jar", "/x/p.jar", "--checkpoint-scheme", "s3a"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "apply with --spark-rocksdb only" in done.stderr, (done.stdout, done.stderr)


def test_replication_runs_the_nodes_and_controller_unless_turned_off() -> None:
    from pyspark.sql import SparkSession

    import spark_provider
    from spark_provider.settings import PLUGIN_CLASS, QUERY_LISTENER_CLASS, QUERY_LISTENERS_KEY

    replicated = spark_provider.enable(SparkSession.builder, jar="/x/layer.jar", spark_rocksdb=True)._options
    assert replicated["spark.plugins"] == PLUGIN_CLASS
    assert replicated[QUERY_LISTENERS_KEY] == QUERY_LISTENER_CLASS
    assert replicated["spark.sql.streaming.stateStore.statestore.replicationFactor"] == "1"
    assert replicated["spark.sql.streaming.stateStore.statestore.secret"], "our controller's calls carry a secret"
    assert replicated[PROVIDER_CLASS_KEY] == SPARK_ROCKSDB_PROVIDER
    assert not [k for k in replicated if k.endswith(("writeBufferSizeMB", "incrementCompression"))]
    local_only = spark_provider.enable(
        SparkSession.builder, jar="/x/layer.jar", spark_rocksdb=True, replication_factor=0
    )._options
    assert "spark.plugins" not in local_only and local_only[FILE_SYSTEM_KEY] == "io.statestore.spark.ReplicaFileSystem"
