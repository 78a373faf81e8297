"""A Spark Connect client for tests/test_spark_connect.py that imports nothing of ours: an import hook refuses
this project's packages, so the run proves a client needs only pyspark's client libraries.

    python tests/connect_client.py sc://HOST:PORT WORK_DIR

It runs the same streaming aggregation twice on the same input files, first on our provider (a runtime conf of
its session), then on Spark's RocksDB provider. Its first line is `CONTROLLER <address>` (the server's conf, read
with `spark.conf.get`); after three micro-batches of ours it prints `KILL` and waits for a line on stdin (the test
kills an executor meanwhile). Its last line is `RESULT <json>`: per provider, each micro-batch's output and the
load sources of ours after the kill (from the client's query progress).
"""

from __future__ import annotations

import importlib.abc
import json
import sys
import time
from pathlib import Path

OURS = ("statestore", "spark_provider", "handover", "placement")


class _RefuseOurs(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name.split(".")[0] in OURS:
            raise ImportError(f"a Spark Connect client must not need {name}")
        return None


sys.meta_path.insert(0, _RefuseOurs())
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent.parent]

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

PREFIX = "spark.sql.streaming.stateStore."
PROVIDERS = {
    "ours": "io.statestore.spark.StatestoreProvider",
    "spark": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
BATCHES = 6
KILL_AFTER = 3


def _progress_of(query: object, batch_id: int) -> dict | None:
    for progress in query.recentProgress:
        parsed = json.loads(progress.json) if hasattr(progress, "json") else progress
        if parsed["batchId"] == batch_id:
            return parsed
    return None


def _run(spark: SparkSession, provider: str, work: Path, files: list[Path]) -> tuple[list[dict], dict]:
    spark.conf.set(PREFIX + "providerClass", PROVIDERS[provider])
    inputs, out = work / f"in-{provider}", work / f"out-{provider}"
    inputs.mkdir()
    counts = (
        spark.readStream.schema("key STRING, value LONG")
        .option("maxFilesPerTrigger", 1)
        .json(str(inputs))
        .groupBy("key")
        .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
    )

    def write(batch, batch_id: int) -> None:  # runs in the server's Python worker
        batch.write.mode("overwrite").json(f"{out}/{batch_id}")

    query = (
        counts.writeStream.outputMode("update")
        .option("checkpointLocation", str(work / f"checkpoint-{provider}"))
        .foreachBatch(write)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    after_kill: dict = {}
    try:
        for batch_id, file in enumerate(files):
            (inputs / file.name).write_bytes(file.read_bytes())
            deadline = time.monotonic() + 180
            while _progress_of(query, batch_id) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{provider}: micro-batch {batch_id} did not run in 180 s")
                time.sleep(0.2)
            if provider == "ours" and batch_id == KILL_AFTER - 1:
                print("KILL", flush=True)
                sys.stdin.readline()
            if provider == "ours" and batch_id == KILL_AFTER:
                metrics = {}
                for operator in _progress_of(query, batch_id)["stateOperators"]:
                    for name, value in operator.get("customMetrics", {}).items():
                        if name.startswith("statestoreLoadSource"):
                            metrics[name] = metrics.get(name, 0) + int(value)
                after_kill = metrics
    finally:
        query.stop()
    outputs = []
    for batch_id in range(len(files)):
        rows = {}
        for part in sorted((out / str(batch_id)).glob("part-*")):
            for line in part.read_text().splitlines():
                row = json.loads(line)
                rows[row["key"]] = [row["n"], row["total"]]
        outputs.append(rows)
    return outputs, after_kill


def main(remote: str, work: Path) -> None:
    spark = SparkSession.builder.remote(remote).getOrCreate()
    print(f"CONTROLLER {spark.conf.get(PREFIX + 'statestore.controller')}", flush=True)
    spark.conf.set("spark.sql.shuffle.partitions", "6")
    files = sorted((work / "batches").glob("*.json"))
    ours, after_kill = _run(spark, "ours", work, files)
    theirs, _ = _run(spark, "spark", work, files)
    print("RESULT " + json.dumps({"ours": ours, "spark": theirs, "after_kill": after_kill}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
