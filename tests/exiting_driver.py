"""A driver that ends, for tests/test_driver_exit.py: it prints `LAST <unix time>` as its last line and returns,
and the test measures how long the process takes to exit after that.

    python tests/exiting_driver.py controller     # a driver's controller only; exits once stdin closes
    python tests/exiting_driver.py spark ROOT     # a PySpark query on local-cluster, q=1; never calls spark.stop()
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def controller_only() -> None:
    """Start the driver's controller as `enable()` does, print its address, and end when stdin closes."""
    from spark_provider.driver_controller import start_driver_controller

    controller = start_driver_controller(1, "local[1]", None)
    print(f"ADDRESS {controller.address}", flush=True)
    sys.stdin.read()


def spark_without_stop(root: Path) -> None:
    """A stateful query with replication on local-cluster that runs a few micro-batches; the script then ends
    with its SparkSession still running, as many notebooks and scripts do."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark_provider import enable

    builder = SparkSession.builder.master("local-cluster[2,1,1024]").config("spark.sql.shuffle.partitions", "4")
    spark = enable(builder, replication_factor=1).getOrCreate()
    counts = spark.readStream.format("rate").option("rowsPerSecond", 50).load().groupBy(F.col("value") % 7).count()
    query = (
        counts.writeStream.outputMode("update")
        .format("memory")
        .queryName("exiting_driver")
        .option("checkpointLocation", str(root / "checkpoint"))
        .start()
    )
    deadline = time.monotonic() + 180
    while (query.lastProgress is None or query.lastProgress["batchId"] < 3) and time.monotonic() < deadline:
        query.awaitTermination(0.5)
    query.stop()
    print(f"BATCHES {query.lastProgress['batchId'] if query.lastProgress else -1}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "controller":
        controller_only()
    else:
        spark_without_stop(Path(sys.argv[2]))
    print(f"LAST {time.time()}", flush=True)
