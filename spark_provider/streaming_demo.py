"""The main job: a real PySpark streaming stateful aggregation on the statestore provider.

A generated stream of sensor readings arrives as files, one per micro-batch; the query keeps per-sensor
count, sum and max in our provider. It runs a few micro-batches, stops, restarts from the checkpoint (a
fresh provider restores its state from the increments and snapshots it wrote), runs the rest, and finally
checks every sensor's figures against a batch recomputation over all the input.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options (defaults: a small embedded local run)."""
    parser.add_argument("--batches", type=int, default=6, help="micro-batches in total")
    parser.add_argument("--restart-after", type=int, default=3, help="stop and restart after this many")
    parser.add_argument("--rows", type=int, default=5000, help="rows per micro-batch")
    parser.add_argument("--sensors", type=int, default=2000, help="distinct sensors (state rows)")
    parser.add_argument("--workdir", default=None, help="keep input and checkpoint here (default: a temp dir)")


def _write_batch(folder: Path, index: int, rows: int, sensors: int) -> None:
    rng = random.Random(index)
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f'{{"sensor": "s{rng.randrange(sensors):05d}", "temp": {rng.gauss(20, 8):.2f}}}\n'
             for _ in range(rows)]
    tmp = folder / f".b{index:04d}.json.tmp"
    tmp.write_text("".join(lines))
    target = folder / f"b{index:04d}.json"
    tmp.rename(target)
    os.utime(target, (1_700_000_000 + index, 1_700_000_000 + index))  # file source order = feeding order


def _run_query(spark: Any, input_dir: Path, checkpoint: Path, latest: dict[str, tuple], total: int) -> None:
    from pyspark.sql import functions as F

    def keep_latest(df: Any, batch_id: int) -> None:
        for r in df.collect():
            latest[r["sensor"]] = (r["n"], round(r["total"], 6), r["hottest"])

    stream = spark.readStream.schema("sensor string, temp double").option("maxFilesPerTrigger", 1).json(
        str(input_dir))
    query = (stream.groupBy("sensor")
             .agg(F.count("*").alias("n"), F.sum("temp").alias("total"), F.max("temp").alias("hottest"))
             .writeStream.outputMode("update").foreachBatch(keep_latest)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    seen = 0
    while True:
        done = query.awaitTermination(0.5)
        progress = query.recentProgress
        for p in progress[seen:]:
            if p["numInputRows"] == 0:
                continue
            op = p["stateOperators"][0]
            custom = op.get("customMetrics", {})
            print(f"  batch {p['batchId'] + 1}/{total}: {p['numInputRows']} rows in "
                  f"{p['durationMs']['triggerExecution']} ms; state rows {op['numRowsTotal']}, "
                  f"updated {op['numRowsUpdated']}; commit {op['commitTimeMs']} ms, increment "
                  f"{custom.get('statestoreIncrementBytes', 0)} bytes", flush=True)
        seen = len(progress)
        if done:
            break
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def run_demo(args: argparse.Namespace) -> int:
    """Runs the demo; returns 0 when the streamed state equals the batch recomputation."""
    batches = getattr(args, "batches", 6)
    restart_after = min(getattr(args, "restart_after", 3), batches)
    rows = getattr(args, "rows", 5000)
    sensors = getattr(args, "sensors", 2000)
    workdir = getattr(args, "workdir", None)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_provider

    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="statestore-demo-"))
    input_dir, checkpoint = root / "input", root / "checkpoint"
    shutil.rmtree(input_dir, ignore_errors=True)
    shutil.rmtree(checkpoint, ignore_errors=True)
    print("starting Spark (local[2]) with the statestore provider; the provider jar is built on first use",
          flush=True)
    builder = (SparkSession.builder.master("local[2]").appName("statestore-demo")
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    spark = spark_provider.enable(builder, min_deltas_for_snapshot=2).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    latest: dict[str, tuple] = {}
    started = time.time()
    try:
        print(f"streaming {restart_after} micro-batches of {rows} sensor readings ...", flush=True)
        for i in range(restart_after):
            _write_batch(input_dir, i, rows, sensors)
        _run_query(spark, input_dir, checkpoint, latest, batches)
        print("query stopped; restarting it from the checkpoint (state restored by the provider) ...",
              flush=True)
        for i in range(restart_after, batches):
            _write_batch(input_dir, i, rows, sensors)
        _run_query(spark, input_dir, checkpoint, latest, batches)
        print("checking the streamed state against a batch recomputation over all input ...", flush=True)
        expected = {r["sensor"]: (r["n"], round(r["total"], 6), r["hottest"]) for r in
                    spark.read.schema("sensor string, temp double").json(str(input_dir)).groupBy("sensor")
                    .agg(F.count("*").alias("n"), F.sum("temp").alias("total"), F.max("temp").alias("hottest"))
                    .collect()}
    finally:
        spark.stop()
        if not workdir:
            shutil.rmtree(root, ignore_errors=True)
    mismatched = sorted(k for k in expected.keys() | latest.keys()
                        if k not in latest or k not in expected or latest[k][0] != expected[k][0]
                        or abs(latest[k][1] - expected[k][1]) > 1e-6 or latest[k][2] != expected[k][2])
    print(f"{len(expected)} sensors, {batches} micro-batches with a restart, {time.time() - started:.1f}s")
    if mismatched:
        print(f"MISMATCH for {len(mismatched)} sensors, e.g. {mismatched[:5]}")
        return 1
    print("OK: every sensor's count, sum and max equal the batch recomputation")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the demo standalone: `python -m spark_provider.streaming_demo`."""
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    return run_demo(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
