"""Real Spark failover for `test_failover_spark.py`, the demo and the failover bench: executor JVMs found and
killed with SIGKILL, streaming queries over JSON file sources fed one file per micro-batch whose every batch's
output is recorded, the same query run on Spark's RocksDB provider for reference, and the load sources the
provider reports per batch. Holds no tests of its own."""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from test_replica_groups_spark_harness import wait_until

from spark_provider.file_feed import publish
from spark_provider.progress import files_processed
from spark_provider.settings import PROVIDER_CLASS
from statestore.checkpoint_location import CheckpointLocation

SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"


def reporting(store_ids: list[str]) -> list[str]:
    """The stores among `store_ids` whose metrics reach the query progress: a stream-stream join reports its
    keyWithIndexToValue stores' custom metrics only (one per side), not its keyToNumValues stores'."""
    return [s for s in store_ids if not s.endswith("-keyToNumValues")]


QueryBuilder = Callable[[Any, dict[str, Any]], Any]


def short_failure(batch_id: int, exc: Exception) -> RuntimeError:
    """A failed foreachBatch's error, printed whole to stderr and returned short for Spark.

    Spark's stream thread matches a foreachBatch error's message against a regular expression that recurses once
    per character (`StreamExecution.PROXY_ERROR`, to tell an interruption): a Py4JJavaError carrying a Java stack
    trace overflows the thread's stack there, and the query dies with no exception to report. A short message
    keeps the failure the query's own."""
    print(f"micro-batch {batch_id}'s foreachBatch failed: {exc}", file=sys.stderr, flush=True)
    first = next((line for line in str(exc).splitlines() if "Exception" in line or "Error" in line), str(exc))
    return RuntimeError(f"micro-batch {batch_id}'s collect failed: {first[:500]}")


@dataclass
class RecordedQuery:
    """A streaming query over one JSON file source per name, fed one file per micro-batch, whose every batch's
    output is recorded by foreachBatch (a re-run batch keeps its last output). `fail_batch(batch_id)` may raise
    inside foreachBatch to fail the query at that batch (its state was committed, its output not)."""

    spark: Any
    root: Path
    schemas: dict[str, str]
    build: QueryBuilder
    output_mode: str
    rows: Callable[[str, int], list[dict]]
    outputs: dict[int, list[tuple]] = field(default_factory=dict)
    fed: int = 0
    query: Any = None
    fail_batch: Callable[[int], None] | None = None
    stopped: bool = False  # by the test, or on its own (available-now)

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    def input_dir(self, name: str) -> Path:
        return self.root / "in" / name

    def feed(self, files: int = 1) -> None:
        """Write the next `files` input files of every source (each becomes one micro-batch)."""
        for _ in range(files):
            for name in self.schemas:
                self._write(name, self.fed, self.rows(name, self.fed))
            self.fed += 1

    def rewrite(self, index: int, rows: Callable[[str, int], list[dict]]) -> None:
        """Give input file `index` of every source other rows (Spark re-reads it when it re-runs that batch)."""
        for name in self.schemas:
            self._write(name, index, rows(name, index))

    def _write(self, name: str, index: int, rows: list[dict]) -> None:
        publish(self.input_dir(name), index, "".join(json.dumps(r) + "\n" for r in rows))

    def start(self, provider: str | None = None, available_now: bool = False) -> None:
        """Start (or restart) the query from its checkpoint, on `provider` ("statestore" or a class name) if given."""
        if provider is not None:
            self.spark.conf.set(PROVIDER_KEY, PROVIDER_CLASS if provider == "statestore" else provider)
        streams = {
            name: self.spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(self.input_dir(name)))
            for name, schema in self.schemas.items()
        }
        for name in self.schemas:
            self.input_dir(name).mkdir(parents=True, exist_ok=True)

        def record(batch: Any, batch_id: int) -> None:
            try:
                rows = sorted((tuple(r) for r in batch.collect()), key=repr)
            except Exception as exc:
                raise short_failure(batch_id, exc) from None
            if self.fail_batch is not None:
                self.fail_batch(batch_id)
            self.outputs[batch_id] = rows

        writer = (
            self.build(self.spark, streams)
            .writeStream.outputMode(self.output_mode)
            .foreachBatch(record)
            .option("checkpointLocation", str(self.checkpoint))
        )
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")
        self.stopped = available_now
        self.query = writer.start()

    def processed(self) -> int:
        """Input files processed so far."""
        self.raise_if_failed()
        return files_processed(self.query)

    def wait_processed(self, timeout: float = 120.0) -> None:
        """Wait until every file fed so far was processed."""
        wait_until(lambda: self.processed() >= self.fed, timeout, f"{self.fed} micro-batches processed", 0.2)

    def raise_if_failed(self) -> None:
        """Fail the test if the query failed, or stopped without a stop of the test's."""
        if self.query is None:
            return
        if self.query.exception() is not None:
            raise AssertionError(f"the streaming query failed: {self.query.exception()}")
        if not self.query.isActive and not self.stopped:
            raise AssertionError("the streaming query stopped without an exception (its stream thread died)")

    def progress_of(self, batch_id: int) -> dict[str, Any]:
        """The progress Spark reported for micro-batch `batch_id` (the last one reported for it)."""
        found = [p for p in self.query.recentProgress if p["batchId"] == batch_id]
        assert found, f"no progress for batch {batch_id}"
        return found[-1]

    def last_batch_id(self) -> int:
        """The id of the last micro-batch that had input."""
        return max(p["batchId"] for p in self.query.recentProgress if p["numInputRows"] > 0)

    def stop(self) -> None:
        self.stopped = True
        if self.query is not None:
            self.query.stop()

    def results(self) -> list[tuple[int, list[tuple]]]:
        """Every non-empty batch output, by batch id."""
        return [(b, rows) for b, rows in sorted(self.outputs.items()) if rows]

    def store_dirs(self) -> dict[str, Path]:
        """Store id -> checkpoint location of every state store partition of the query (`<op>/<part>/<store>`)."""
        found = {}
        state = self.checkpoint / "state"
        for operator in sorted(p for p in state.iterdir() if p.name.isdigit()) if state.is_dir() else []:
            for partition in sorted(p for p in operator.iterdir() if p.name.isdigit()):
                if any(partition.glob("*.increment")):
                    found[f"{operator.name}/{partition.name}/default"] = partition
                for store in sorted(p for p in partition.iterdir() if p.is_dir() and any(p.glob("*.increment"))):
                    found[f"{operator.name}/{partition.name}/{store.name}"] = store
        return found

    def last_versions(self) -> dict[str, int]:
        """Store id -> the latest version in the checkpoint location (the primary's last commit)."""
        return {s: CheckpointLocation(d, s).latest_version() for s, d in self.store_dirs().items()}


def reference_outputs(
    query: RecordedQuery, root: Path, partitions: int | None = None
) -> list[tuple[int, list[tuple]]]:
    """The same query on a copy of `query`'s input, run to the end on Spark's RocksDB provider.

    `partitions` runs the reference with that many shuffle partitions (a fresh checkpoint takes the session's
    value): a keyed operator's output rows per batch do not depend on how its keys are partitioned, and a
    reference of 200 partitions costs a minute on this machine where one of 8 costs seconds."""
    reference = RecordedQuery(query.spark, root, query.schemas, query.build, query.output_mode, query.rows)
    for name in query.schemas:
        shutil.copytree(query.input_dir(name), reference.input_dir(name))
    saved = query.spark.conf.get("spark.sql.shuffle.partitions")
    if partitions is not None:
        query.spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    try:
        reference.start(SPARK_ROCKSDB, available_now=True)
        reference.query.awaitTermination()
        reference.raise_if_failed()
    finally:
        reference.stop()
        query.spark.conf.set("spark.sql.shuffle.partitions", saved)
    return reference.results()


def inner_join_outputs(query: RecordedQuery) -> list[tuple[int, list[tuple]]]:
    """`inner_join`'s output per batch, recomputed from the files each of its two sources read in each batch
    (the checkpoint's offset log and the sources' file logs).

    A self-join of one streaming DataFrame has two file sources (0 is the left side, 1 the right), and each
    lists the directory on its own: a file published between the two listings goes to the left side in one
    batch and to the right in the next. A reference query run later on the same files would split them
    otherwise, so the join is checked against this exact recomputation of the batches the query did run."""
    checkpoint = query.checkpoint
    done = [0, 0]  # per source: file-log entries consumed so far

    def read(source: int, upto: int) -> list[dict]:
        rows = []
        for entry in range(done[source], upto):
            for line in file_log_entry(checkpoint / "sources" / str(source), entry):
                path = Path(json.loads(line)["path"].removeprefix("file://"))
                rows.extend(json.loads(row) for row in path.read_text().splitlines() if row.strip())
        done[source] = upto
        return rows

    left: dict[str, list[int]] = {}
    right: dict[str, list[int]] = {}
    outputs = []
    batches = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    for batch in batches:
        lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()[2:]  # after version and metadata
        offsets = [json.loads(line)["logOffset"] for line in lines]
        new_left = [r for r in read(0, offsets[0] + 1) if r["side"] == "L"]
        new_right = [r for r in read(1, offsets[1] + 1) if r["side"] == "R"]
        rows = []
        for r in new_left:  # new left rows with every right row seen so far, this batch's included
            matches = right.get(r["k"], []) + [n["v"] for n in new_right if n["k"] == r["k"]]
            rows.extend((r["k"], r["v"], rv) for rv in matches)
        for r in new_right:  # new right rows with the earlier left rows (pairs of two new rows are counted above)
            rows.extend((r["k"], lv, r["v"]) for lv in left.get(r["k"], []))
        for r in new_left:
            left.setdefault(r["k"], []).append(r["v"])
        for r in new_right:
            right.setdefault(r["k"], []).append(r["v"])
        outputs.append((batch, sorted(rows, key=repr)))
    return [(batch, rows) for batch, rows in outputs if rows]


def file_log_entry(log: Path, entry: int) -> list[str]:
    """The JSON lines of a file source's log entry `entry`: its own file, or its lines in the compacted file
    that took it in (Spark compacts the log every 10 entries into `<n>.compact`)."""
    plain = log / str(entry)
    if plain.exists():
        return plain.read_text().splitlines()[1:]
    compacted = sorted(int(p.name.split(".")[0]) for p in log.glob("*.compact"))
    holder = next(n for n in compacted if n >= entry)
    lines = (log / f"{holder}.compact").read_text().splitlines()[1:]
    return [line for line in lines if json.loads(line)["batchId"] == entry]


def assert_same_batches(ours: list[tuple[int, list[tuple]]], theirs: list[tuple[int, list[tuple]]]) -> None:
    """Every batch's output equals the reference's, batch by batch (the first difference is named)."""
    assert theirs, "the reference produced no output: the input exercises nothing"
    for (batch, rows), (their_batch, their_rows) in zip(ours, theirs, strict=False):
        assert batch == their_batch, f"batch ids differ: ours {batch}, reference {their_batch}"
        assert rows == their_rows, f"batch {batch}: {len(rows)} rows differ from the reference's {len(their_rows)}"
    assert len(ours) == len(theirs), f"ours has {len(ours)} batches with output, the reference {len(theirs)}"


# ----------------------------------------------------------------------------- workloads


def keyed_rows(keys: int, per_batch: int, salt: int = 0) -> Callable[[str, int], list[dict]]:
    """Rows `{k, v}` of source `name` for batch `index`: `per_batch` rows over `keys` keys, seeded by both."""

    def rows(name: str, index: int) -> list[dict]:
        rng = random.Random(f"{name}-{index}-{salt}")
        return [{"k": f"key{rng.randrange(keys):06d}", "v": rng.randrange(1000)} for _ in range(per_batch)]

    return rows


def aggregation(spark: Any, streams: dict[str, Any]) -> Any:
    """Per key: sum, count and max of v (update mode)."""
    from pyspark.sql import functions as F

    return streams["events"].groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("n"), F.max("v").alias("m"))


def deduplication(spark: Any, streams: dict[str, Any]) -> Any:
    """The first row of every key (append mode)."""
    return streams["events"].dropDuplicates(["k"])


def sided_rows(keys: int, per_batch: int) -> Callable[[str, int], list[dict]]:
    """Rows `{side, k, v}` for a stream-stream join fed through one source (so a micro-batch always holds both
    sides of the same file: two file sources fed one after the other could split a feeding over two batches)."""
    plain = keyed_rows(keys, per_batch)

    def rows(name: str, index: int) -> list[dict]:
        return [{"side": "L" if i % 2 else "R", **row} for i, row in enumerate(plain(name, index))]

    return rows


def inner_join(spark: Any, streams: dict[str, Any]) -> Any:
    """Left and right rows with the same key (append mode; four state stores per partition)."""
    events = streams["events"]
    left = events.where("side = 'L'").select("k", events.v.alias("lv"))
    right = events.where("side = 'R'").select("k", events.v.alias("rv"))
    return left.join(right, "k")


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """`wait_until` with a longer poll, for conditions that cost a status call."""
    return wait_until(condition, timeout, what, 0.25)


def elapsed_since(start: float) -> float:
    return time.monotonic() - start


def checkpoint_load_lines(spark: Any) -> list[str]:
    """The executors' log lines of loads from the checkpoint location past version 0, each with why the provider
    passed over its own directory and its node (local-cluster executors log into pyspark's work directory)."""
    import pyspark

    work = Path(pyspark.__file__).parent / "work" / spark.sparkContext.applicationId
    lines = []
    for log in sorted(work.glob("*/stderr")):
        for line in log.read_text(errors="replace").splitlines():
            if "statestore: loaded" in line and " from checkpoint " in line and " version 0 from" not in line:
                lines.append(f"executor {log.parent.name}: {line}")
    return lines

