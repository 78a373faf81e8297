"""Spark's state data source on our checkpoints, against Spark's RocksDB provider with changelog checkpointing on
the same input: the state at a batch, the change feed (`readChangeFeed` with `changeStartBatchId` and
`changeEndBatchId`) and the state replayed from a snapshot (`snapshotStartBatchId` with `snapshotPartitionId`),
for an aggregation, dropDuplicates and a stream-stream join (its four stores, and its sides read with `joinSide`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SPARK_ROCKSDB, StreamRun, make_spark
from tests.test_provider_operators import EVENTS, JOIN_SCHEMAS, _join, events, join_batches

JOIN_STORES = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues",
               "right-keyWithIndexToValue"]
PARTITIONS = 2


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """One local[2] session; Spark's RocksDB provider writes changelogs (its change feed needs them) and both
    providers snapshot every second version, so that replays from a snapshot have several to start from."""
    session = make_spark()
    session.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    session.conf.set("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
    yield session
    session.stop()


def _run(spark: Any, root: Path, provider: str, schemas: dict[str, str], build: Any, mode: str,
         batches: list[dict]) -> Path:
    """Runs the query over every batch (one micro-batch each); returns its checkpoint location."""
    run = StreamRun(spark, root / provider.rsplit(".", 1)[-1], schemas, build, mode, provider)
    run.feed(batches)
    run.run()
    return run.root / "checkpoint"


def _plain(value: Any) -> Any:
    """A collected value as nested tuples (rows of structs compare by content)."""
    if hasattr(value, "asDict"):
        return tuple(_plain(v) for v in value)
    return value


def _read(spark: Any, checkpoint: Path, **options: Any) -> list[tuple]:
    """The state data source's rows, sorted."""
    return sorted(_read_in_order(spark, checkpoint, **options), key=repr)


def _read_in_order(spark: Any, checkpoint: Path, **options: Any) -> list[tuple]:
    """The state data source's rows in its order (a change feed: per partition, in the order of the changes)."""
    reader = spark.read.format("statestore")
    for k, v in options.items():
        reader = reader.option(k, v)
    return [_plain(r) for r in reader.load(str(checkpoint)).collect()]


def _net_changes(rows: list[tuple]) -> list[tuple]:
    """A change feed reduced to each batch's last change per key and partition (Spark's changelog records every
    call; an increment the batch's net change), in the feed's order. Rows are (batch_id, change_type, key, value,
    partition_id)."""
    last: dict[tuple, tuple] = {}
    for row in rows:
        last[(row[0], row[2], row[4])] = row
    return sorted(last.values(), key=repr)


def _snapshot_batches(store_dir: Path, provider: str) -> set[int]:
    """Batch ids (version - 1) with a complete snapshot of one store partition, of either provider."""
    if provider == "statestore":
        return {int(d.name.split(".")[0]) - 1 for d in store_dir.glob("*.snapshot") if (d / "MANIFEST.json").exists()}
    return {int(f.name.split(".")[0].split("_")[0]) - 1 for f in store_dir.glob("*.zip")}


def _wait_for_snapshot(store_dir: Path, provider: str, at_most: int, timeout: float = 60) -> int:
    """The oldest batch up to `at_most` with a complete snapshot, waiting for the background uploads."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [b for b in _snapshot_batches(store_dir, provider) if 0 <= b <= at_most]
        if found:
            return min(found)
        time.sleep(0.2)
    raise AssertionError(f"no snapshot of a batch up to {at_most} appeared in {store_dir}: "
                         f"{sorted(p.name for p in store_dir.iterdir())}")


def _compare(spark: Any, ours: Path, theirs: Path, last_batch: int, store: str = "default",
             row_for_row: bool = False) -> None:
    """The change feed, the state at the last batch and the state replayed from a snapshot, ours against
    Spark's RocksDB provider, for one store of operator 0. `row_for_row`: the operator writes each key at most
    once per batch, so the feeds must be equal row for row, not only in their net changes."""
    name = {"storeName": store}
    # The whole feed, and a window of it.
    for start, end in [(0, last_batch), (2, last_batch - 1)]:
        feed_options = {**name, "readChangeFeed": True, "changeStartBatchId": start, "changeEndBatchId": end}
        our_feed = _read_in_order(spark, ours, **feed_options)
        their_feed = _read_in_order(spark, theirs, **feed_options)
        assert their_feed, f"Spark's change feed of {store} from batch {start} is empty: the input exercises nothing"
        assert {r[0] for r in our_feed} <= set(range(start, end + 1))
        assert _net_changes(our_feed) == _net_changes(their_feed), store
        if row_for_row:
            assert sorted(our_feed, key=repr) == sorted(their_feed, key=repr), store
    assert {r[1] for r in _read(spark, ours, **name, readChangeFeed=True, changeStartBatchId=0)} >= {"update"}

    state = _read(spark, ours, **name, batchId=last_batch)
    assert state == _read(spark, theirs, **name, batchId=last_batch), store
    for partition in range(PARTITIONS):
        from_snapshot = {}
        for checkpoint, provider in [(ours, "statestore"), (theirs, SPARK_ROCKSDB)]:
            store_dir = checkpoint / "state" / "0" / str(partition) / ("" if store == "default" else store)
            # Ours snapshots every second version as it commits: replay increments after an older one. Spark's
            # RocksDB provider snapshots in its maintenance, often only the last version.
            at_most = last_batch - 2 if provider == "statestore" else last_batch
            snapshot = _wait_for_snapshot(store_dir, provider, at_most)
            from_snapshot[provider] = _read(spark, checkpoint, **name, batchId=last_batch,
                                            snapshotStartBatchId=snapshot, snapshotPartitionId=partition)
        expected = [r for r in state if r[-1] == partition]
        assert from_snapshot["statestore"] == expected, (store, partition)
        assert from_snapshot[SPARK_ROCKSDB] == expected, (store, partition)


def _both(spark: Any, tmp_path: Path, schemas: dict[str, str], build: Any, mode: str,
          batches: list[dict]) -> tuple[Path, Path]:
    ours = _run(spark, tmp_path, "statestore", schemas, build, mode, batches)
    theirs = _run(spark, tmp_path, SPARK_ROCKSDB, schemas, build, mode, batches)
    return ours, theirs


def test_aggregation(spark: Any, tmp_path: Path, checkpoint_format: int) -> None:
    """With either checkpoint format (with format v2 Spark names the version's checkpoint id it reads)."""
    import pyspark
    from pyspark.sql import functions as F

    if checkpoint_format == 2 and pyspark.__version__.startswith("4.0."):
        pytest.skip("Spark 4.0's state data source reads no checkpoint format 2 (its own RocksDB provider fails too)")

    def build(spark: Any, s: dict[str, Any]) -> Any:
        return s["events"].groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("n"))

    batches = events(11)
    ours, theirs = _both(spark, tmp_path, {"events": EVENTS}, build, "update", batches)
    _compare(spark, ours, theirs, len(batches) - 1, row_for_row=True)


def test_drop_duplicates(spark: Any, tmp_path: Path) -> None:
    def build(spark: Any, s: dict[str, Any]) -> Any:
        return s["events"].withWatermark("ts", "10 seconds").dropDuplicates(["id", "ts"])

    batches = events(12)
    ours, theirs = _both(spark, tmp_path, {"events": EVENTS}, build, "append", batches)
    _compare(spark, ours, theirs, len(batches) - 1)
    feed = _read(spark, ours, readChangeFeed=True, changeStartBatchId=0)
    assert any(r[1] == "delete" for r in feed), "the watermark evicted nothing: the feed's deletes are untested"


def test_stream_stream_join(spark: Any, tmp_path: Path) -> None:
    batches = join_batches(13)
    ours, theirs = _both(spark, tmp_path, JOIN_SCHEMAS, _join("inner"), "append", batches)
    for store in JOIN_STORES:
        _compare(spark, ours, theirs, len(batches) - 1, store)
    last = len(batches) - 1
    for side in ["left", "right"]:
        rows = _read(spark, ours, joinSide=side, batchId=last)
        assert rows and rows == _read(spark, theirs, joinSide=side, batchId=last), side
        # Both of the side's stores replayed from their snapshots of one batch. A snapshot is taken at the first
        # quiet point after its commit, so the stores' snapshot batches need not agree: without a common one the
        # replay must fail naming the snapshot a store lacks.
        partition_dir = ours / "state" / "0" / "0"
        stores = [s for s in JOIN_STORES if s.startswith(side)]
        for store in stores:
            _wait_for_snapshot(partition_dir / store, "statestore", last)
        held = [{b for b in _snapshot_batches(partition_dir / s, "statestore") if b <= last} for s in stores]
        common = set.intersection(*held)
        snapshot = min(common) if common else min(held[0])
        options = {"joinSide": side, "batchId": last, "snapshotStartBatchId": snapshot, "snapshotPartitionId": 0}
        if common:
            assert _read(spark, ours, **options) == [r for r in rows if r[-1] == 0], side
        else:
            with pytest.raises(Exception, match=f"no snapshot of version {snapshot + 1}"):
                _read(spark, ours, **options)
        missing = next(b for b in range(last) if b not in common)
        with pytest.raises(Exception, match=f"no snapshot of version {missing + 1}"):
            _read(spark, ours, **{**options, "snapshotStartBatchId": missing})


def test_bad_ranges_are_refused_naming_the_store(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    def build(spark: Any, s: dict[str, Any]) -> Any:
        return s["events"].groupBy("k").agg(F.count("*").alias("n"))

    batches = events(14)
    ours = _run(spark, tmp_path, "statestore", {"events": EVENTS}, build, "update", batches)
    store_dir = ours / "state" / "0" / "0"
    snapshots = _snapshot_batches(store_dir, "statestore")
    missing = next(b for b in range(len(batches)) if b not in snapshots)
    with pytest.raises(Exception, match=f"no snapshot of version {missing + 1}"):
        _read(spark, ours, batchId=len(batches) - 1, snapshotStartBatchId=missing, snapshotPartitionId=0)
    (store_dir / "3.increment").unlink()
    with pytest.raises(Exception, match=r"3\.increment"):
        _read(spark, ours, readChangeFeed=True, changeStartBatchId=0)


def test_the_state_data_source_reads_without_a_streaming_run_id(spark: Any, tmp_path: Path) -> None:
    """The provider tells its state node it runs a partition only for a streaming query's tasks, which it knows by
    the run id in its Hadoop conf (or the streaming local property): the state data source builds its Hadoop conf
    from the user's session, which has no run id even after that session ran streaming queries (each runs in a
    clone of it), so its reads never touch the replicas."""
    from pyspark.sql import functions as F

    def build(spark: Any, s: dict[str, Any]) -> Any:
        return s["events"].groupBy("k").agg(F.count("*").alias("n"))

    _both(spark, tmp_path, {"events": EVENTS}, build, "update", events(3))
    hadoop_conf = spark._jsparkSession.sessionState().newHadoopConf()
    assert hadoop_conf.get("sql.streaming.runId") is None
