"""The streaming aggregation the failover and migration benchmarks run: per key a count, a sum and an
incompressible value, fed one JSON file per micro-batch, every micro-batch's output reduced to a digest that the
benchmarks compare between providers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_provider.file_feed import publish


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
