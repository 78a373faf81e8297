"""The streaming aggregation the failover, migration and elasticity benchmarks run: per key a count, a sum and an
incompressible value, fed one JSON file per micro-batch, every micro-batch's output reduced to a digest that the
benchmarks compare between providers; the feeder, and where Spark's coordinator places each partition."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_provider.file_feed import publish
from spark_provider.progress import files_processed


def write_keys_file(folder: Path, index: int, keys: list[int]) -> None:
    """Input file `index`: one row per key, `{"k": key, "v": index}`, named and timed in feeding order."""
    publish(folder, index, "".join(f'{{"k": {k}, "v": {index}}}\n' for k in keys))


def start_digest_aggregation(spark: Any, root: Path, digests: dict[int, list], value_bytes: int) -> Any:
    """Per key: count, sum, and a `value_bytes`-byte incompressible value (SHA-256 digests of the key), over the
    files in `root/input`, checkpointed in `root/checkpoint`; each micro-batch's output reduced to
    [rows, sum of counts, sum of sums, sum of the values' CRCs] in `digests[batch id]`."""
    from pyspark.sql import functions as F

    key = F.col("k").cast("string")
    value = F.unhex(F.concat(*[F.sha2(F.concat(key, F.lit(f"-{i}")), 256) for i in range(value_bytes // 32)]))

    def digest(batch: Any, batch_id: int) -> None:
        row = batch.agg(F.count("*"), F.sum("n"), F.sum("s"), F.sum(F.crc32("p"))).collect()[0]
        digests[batch_id] = [None if x is None else int(x) for x in row]

    stream = spark.readStream.schema("k long, v long").option("maxFilesPerTrigger", 1).json(str(root / "input"))
    return (
        stream.groupBy("k")
        .agg(F.count("*").alias("n"), F.sum("v").alias("s"), F.max(value).alias("p"))
        .writeStream.outputMode("update")
        .foreachBatch(digest)
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )


def duration(progress: dict[str, Any]) -> int:
    """A micro-batch's duration (ms) from its progress report."""
    return int(progress["durationMs"]["triggerExecution"])


class KeyedFeeder:
    """Feeds the aggregation one input file per micro-batch and waits for it: a bulk load of keys 0..n-1, then
    update batches of `update_rows` random existing keys (an update's input depends only on its index, the same
    for every provider). `on_update(progress)` sees every update batch."""

    def __init__(
        self,
        query: Any,
        root: Path,
        keys: int,
        update_rows: int,
        label: str,
        on_update: Callable[[dict[str, Any]], None] = lambda _progress: None,
    ) -> None:
        self.query = query
        self.root = root
        self.keys = keys
        self.update_rows = update_rows
        self.label = label
        self.on_update = on_update
        self.fed = 0

    def load(self, keys: int, per_batch: int) -> None:
        """Keys 0..`keys`-1, `per_batch` a micro-batch, each waited for (progress on stdout)."""
        batches = -(-keys // per_batch)
        for b in range(batches):
            write_keys_file(self.root / "input", self.fed, list(range(b * per_batch, min(keys, (b + 1) * per_batch))))
            self.fed += 1
            started = time.monotonic()
            self.wait()
            print(f"[{time.strftime('%H:%M:%S')}] {self.label}: load batch {b + 1}/{batches} in "
                  f"{time.monotonic() - started:.1f}s", flush=True)  # fmt: skip

    def update(self) -> dict[str, Any]:
        """One update micro-batch, waited for; returns its progress report."""
        rng = random.Random(self.fed)
        write_keys_file(self.root / "input", self.fed, rng.sample(range(self.keys), self.update_rows))
        self.fed += 1
        progress = self.wait()
        self.on_update(progress)
        return progress

    def wait(self, timeout: float = 1800) -> dict[str, Any]:
        """Until every file fed is processed (the query's last progress), or the query failed."""
        deadline = time.monotonic() + timeout
        while True:
            if self.query.exception() is not None:
                raise RuntimeError(f"the streaming query failed: {self.query.exception()}")
            if files_processed(self.query) >= self.fed:
                return self.query.lastProgress
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.fed} micro-batches not processed within {timeout}s")
            time.sleep(0.05)


def _state_root(root: Path) -> str:
    return f"file:{(root / 'checkpoint').resolve()}/state"


def partition_locations(spark: Any, query: Any, root: Path, partitions: int) -> dict[int, tuple[str, str]]:
    """Partition -> (executor id, host) where Spark's StateStoreCoordinator places the aggregation's state store
    (through the provider jar's `Steering`, which must be on Spark's class path)."""
    steering = spark.sparkContext._jvm.io.statestore.spark.Steering
    found = {}
    for p in range(partitions):
        location = steering.location(_state_root(root), 0, p, "default", str(query.runId))
        if location:
            host, executor = location.split("_", 1)[1].rsplit("_", 1)
            found[p] = (executor, host)
    return found


def steer(spark: Any, query: Any, root: Path, partition: int, executor: str, host: str) -> None:
    """Report the partition's state store active on `executor` at `host`, so that Spark runs its next task there."""
    steering = spark.sparkContext._jvm.io.statestore.spark.Steering
    steering.steer(_state_root(root), 0, partition, "default", str(query.runId), host, executor)
