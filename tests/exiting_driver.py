"""A driver that ends, for tests/test_driver_exit.py: it prints `LAST <unix time>` as its last line and returns,
and the test measures how long the process takes to exit after that.

    python tests/exiting_driver.py controller     # a driver with its controller sidecar only; exits once stdin closes
    python tests/exiting_driver.py spark ROOT     # a PySpark query on local-cluster, q=1; never calls spark.stop()
    python tests/exiting_driver.py attach ROOT    # enable() given a running session; stops it once stdin closes
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def controller_only() -> None:
    """Start a controller as the driver's JVM does (a sidecar that exits with its parent), print its address and
    pid, and end when stdin closes."""
    import subprocess
    import tempfile

    port_file = Path(tempfile.mkdtemp(prefix="exiting-driver-")) / "port"
    sidecar = subprocess.Popen(
        [sys.executable, "-m", "statestore.cli", "controller", "--listen", "127.0.0.1:0",
         "--parent-pid", str(os.getpid()), "--port-file", str(port_file)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not port_file.exists() and time.monotonic() < deadline and sidecar.poll() is None:
        time.sleep(0.05)
    print(f"ADDRESS 127.0.0.1:{port_file.read_text().strip()}", flush=True)
    print(f"CONTROLLER {sidecar.pid}", flush=True)
    sys.stdin.read()


def spark_without_stop(root: Path) -> None:
    """A stateful query with replication on local-cluster that runs a few micro-batches; the script then ends
    with its SparkSession still running, as many notebooks and scripts do."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark_provider import enable

    builder = SparkSession.builder.master("local-cluster[2,1,1024]").config("spark.sql.shuffle.partitions", "4")
    spark = enable(builder, replication_factor=1).getOrCreate()
    print(f"JVM {spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()}", flush=True)
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


def attach_to_running_session(root: Path) -> None:
    """A session started without our confs, then `enable(spark)`: its JVM starts the controller now. A stateful
    query runs a few micro-batches; the session stops when stdin closes, and the script waits for a line more."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from spark_provider import enable, status

    spark = SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "2").getOrCreate()
    enable(spark, replication_factor=1, local_dir=str(root / "local"))
    print(f"JVM {spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()}", flush=True)
    counts = spark.readStream.format("rate").option("rowsPerSecond", 20).load().groupBy(F.col("value") % 5).count()
    query = (
        counts.writeStream.outputMode("update").format("memory").queryName("attached")
        .option("checkpointLocation", str(root / "checkpoint")).start()
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while (query.lastProgress is None or query.lastProgress["batchId"] < 2) and time.monotonic() < deadline:
        query.awaitTermination(0.5)
    query.stop()
    print(f"PARTITIONS {len(status(spark=spark).partitions)}", flush=True)
    sys.stdin.readline()
    spark.stop()
    print("STOPPED", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    if sys.argv[1] == "controller":
        controller_only()
    elif sys.argv[1] == "attach":
        attach_to_running_session(Path(sys.argv[2]))
    else:
        spark_without_stop(Path(sys.argv[2]))
    print(f"LAST {time.time()}", flush=True)
