"""A driver of its own for a streaming aggregation on Spark's RocksDB provider, without our layer: the query a user
ran before turning the replica files on. Run as `python plain_aggregation_driver.py SOURCE CHECKPOINT PARTITIONS`:
it processes every CSV file in SOURCE, one per micro-batch, into CHECKPOINT, then stops.

A process of its own because Hadoop picks the `file:` file system once per JVM: a driver that has enabled the layer
cannot also run a query without it. `build` is the query; the test restarting it with the layer imports it from
here, so both runs plan the same query."""

from __future__ import annotations

import sys
from typing import Any

SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def build(spark: Any, source: str) -> Any:
    """Count and sum of `v` per key `k` over the CSV files in `source`, one file per micro-batch."""
    from pyspark.sql import functions as F

    events = spark.readStream.schema("k INT, v INT").option("maxFilesPerTrigger", 1).csv(source)
    return events.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))


def main(source: str, checkpoint: str, partitions: str) -> None:
    """Run the aggregation over every file now in `source` and stop."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("plain-aggregation")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", partitions)
        .config("spark.sql.streaming.stateStore.providerClass", SPARK_ROCKSDB)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
        .getOrCreate()
    )
    try:
        query = (
            build(spark, source).writeStream.outputMode("complete").format("noop")
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination()
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
