"""Shared fixtures for the Spark provider tests: one SparkSession per module and a query runner that
feeds a file source one file per micro-batch, stops, and restarts from the checkpoint."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import statestore  # noqa: F401  (before any test module loads grpc: it sets gRPC's fork setting)
from spark_provider.file_feed import publish

SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


JAVA_CHECKS = Path(__file__).resolve().parents[1] / "spark_provider" / "java_test" / "io" / "statestore" / "spark"


def java_check(tmp_path_factory: pytest.TempPathFactory, name: str, heap: str) -> list[str]:
    """The command line of the Java check `name` (spark_provider/java_test), compiled against the provider jar;
    skips the test without a JDK."""
    import shutil
    import subprocess

    from spark_provider.jar import provider_jar, pyspark_jars_dir

    if shutil.which("javac") is None:
        pytest.skip("needs a JDK")
    classes = tmp_path_factory.mktemp(name)
    classpath = f"{classes}:{provider_jar()}:{pyspark_jars_dir()}/*"
    source = JAVA_CHECKS / f"{name}.java"
    subprocess.run(["javac", "--release", "17", "-nowarn", "-cp", classpath, "-d", str(classes), str(source)],
                   check=True, capture_output=True, text=True)  # fmt: skip
    return ["java", f"-Xmx{heap}", "-cp", classpath, f"io.statestore.spark.{name}"]


def make_spark(master: str = "local[2]", app: str = "statestore-tests", **settings: object) -> Any:
    """A SparkSession on our provider (providers can be switched per query with `use_provider`)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_provider

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "2s")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "1g")
    )
    # A local dir of its own: the process's first session left its confs behind as the gateway JVM's system
    # properties, its local dir too, and a session sharing that dir would delete the earlier executors' dirs.
    settings.setdefault("local_dir", tempfile.mkdtemp(prefix="statestore-local-"))
    session = spark_provider.enable(builder, **settings).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for the whole test module, stopped at its end."""
    session = make_spark()
    yield session
    session.stop()


def use_provider(spark: Any, provider: str) -> None:
    """Make queries started from now on keep their state in `provider` ("statestore" or a class name)."""
    from spark_provider.settings import PROVIDER_CLASS

    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   PROVIDER_CLASS if provider == "statestore" else provider)


@dataclass
class StreamRun:
    """A streaming query over JSON file sources fed one file per micro-batch, restartable.

    `build(spark, streams)` gets one streaming DataFrame per source name and returns the query's
    DataFrame; `start_query` then writes it with foreachBatch so every batch's output is recorded.
    """

    spark: Any
    root: Path
    schemas: dict[str, str]
    build: Callable[[Any, dict[str, Any]], Any]
    output_mode: str
    provider: str
    outputs: list[tuple[int, list[tuple]]] = field(default_factory=list)
    fed: int = 0

    def feed(self, batches: list[dict[str, list[dict]]]) -> None:
        """Write one file per source for each batch (a source absent from a batch gets an empty file)."""
        for batch in batches:
            for name in self.schemas:
                text = "".join(json.dumps(r) + "\n" for r in batch.get(name, []))
                publish(self.root / "in" / name, self.fed, text, digits=4)
            self.fed += 1

    def run(self) -> None:
        """Start the query from its checkpoint and process every file fed so far, then stop."""
        use_provider(self.spark, self.provider)
        streams = {
            name: self.spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
            .json(str(self.root / "in" / name))
            for name, schema in self.schemas.items()
        }
        df = self.build(self.spark, streams)

        def record(batch_df: Any, batch_id: int) -> None:
            rows = sorted((tuple(r) for r in batch_df.collect()), key=repr)
            self.outputs.append((batch_id, rows))

        query = (df.writeStream.outputMode(self.output_mode).foreachBatch(record)
                 .option("checkpointLocation", str(self.root / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        if query.exception() is not None:
            raise query.exception()

    def results(self) -> list[tuple[int, list[tuple]]]:
        """Every non-empty batch output, by batch id (a re-run batch keeps its last output)."""
        by_batch = dict(self.outputs)
        return [(b, rows) for b, rows in sorted(by_batch.items()) if rows]


def run_with_restart(spark: Any, root: Path, provider: str, schemas: dict[str, str],
                     build: Callable[[Any, dict[str, Any]], Any], output_mode: str,
                     batches: list[dict[str, list[dict]]], restart_after: int) -> list[tuple[int, list[tuple]]]:
    """Run the query over `batches[:restart_after]`, stop, feed the rest, restart; return its outputs."""
    run = StreamRun(spark, root / provider.rsplit(".", 1)[-1], schemas, build, output_mode, provider)
    run.feed(batches[:restart_after])
    run.run()
    run.feed(batches[restart_after:])
    run.run()
    return run.results()


CHECKPOINT_FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"


@pytest.fixture(params=[1, 2], ids=["ckpt-v1", "ckpt-v2"])
def checkpoint_format(request: Any, spark: Any) -> Iterator[int]:
    """Spark's state checkpoint format for the queries a test starts: 1, or 2 (Spark then passes each version's
    unique checkpoint id to the provider and checks the ids it returns; from Spark 4.0 on)."""
    import pyspark

    if request.param == 2 and pyspark.__version__.startswith("3."):
        pytest.skip(f"Spark {pyspark.__version__} has no checkpoint format 2 (Spark 4.0 added it)")
    spark.conf.set(CHECKPOINT_FORMAT, str(request.param))
    yield request.param
    spark.conf.unset(CHECKPOINT_FORMAT)


@pytest.fixture
def equivalence(
    spark: Any, tmp_path: Path, checkpoint_format: int
) -> Callable[..., list[tuple[int, list[tuple]]]]:
    """Runs a query with a restart on our provider and on Spark's RocksDB provider, asserts identical
    per-batch outputs, and returns ours (with each checkpoint format: `checkpoint_format`)."""

    def check(schemas: dict[str, str], build: Callable[[Any, dict[str, Any]], Any], output_mode: str,
              batches: list[dict[str, list[dict]]], restart_after: int) -> list[tuple[int, list[tuple]]]:
        ours = run_with_restart(spark, tmp_path, "statestore", schemas, build, output_mode, batches,
                                restart_after)
        theirs = run_with_restart(spark, tmp_path, SPARK_ROCKSDB, schemas, build, output_mode, batches,
                                  restart_after)
        assert theirs, "the reference run produced no output: the test input exercises nothing"
        assert ours == theirs
        assert any(b >= restart_after for b, _ in ours), "no output after the restart"
        if checkpoint_format == 2:
            ids = checkpoint_ids(tmp_path / "statestore" / "checkpoint")
            assert ids and all(re.fullmatch("[0-9a-f]{32}", i) for i in ids), ids  # our lineages (formats.md 3.4)
        return ours

    return check


def checkpoint_ids(checkpoint: Path) -> list[str]:
    """Every state store checkpoint id in a query's commit log (checkpoint format v2)."""
    ids = []
    for commit in sorted(p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()):
        version, _, document = commit.read_text().partition("\n")
        assert version == "v2", f"{commit} is a commit log entry of format {version}"
        for per_partition in json.loads(document).get("stateUniqueIds", {}).values():
            ids += [i for store_ids in per_partition for i in store_ids]
    return ids


@pytest.fixture(scope="module")
def controller() -> Iterator[Any]:
    """A controller on a loopback port of its own, shared by a test module; nodes are never counted dead nor
    forgotten while it runs."""
    from statestore.controller.server import Controller

    server = Controller("127.0.0.1:0", dead_after=600.0, forget_after=600.0)
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=0.5)
