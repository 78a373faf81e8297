"""Real-Time Mode (Spark 4.3) under Spark's own RocksDB provider with the replica files, through an executor kill: a
Spark standalone master and three one-core workers on loopback (`test_file_replicas_spark.LoopbackCluster`).

What Real-Time Mode imposes, found here:
- its sources are Kafka and `LowLatencyMemoryStream` only (the file and rate sources are refused), its sinks
  console, foreach and memory minus memory (the allow-list refuses `MemorySink`): the query reads a
  `LowLatencyMemoryStream` fed from the driver over py4j and writes with `foreach` into files;
- every stage of a batch runs at once (one source task and two state partitions need three free task slots, else
  `CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT`), so there is no delay scheduling and Spark places the state partitions
  wherever a slot is free, not where the controller steers them: a partition can land on any host. At q=1 (the
  session here) a load on a host holding none of its files has that host's node fetch them from the peer holding
  them (`FileShipping.fetchFromPeers`) before it reads them;
- a lost task is not retried: an executor's loss fails the query, and a restart runs once the cluster manager has
  replaced the executor. That restart is the load this layer serves. A kill between two batches fails the next one
  only if the scheduler has not counted the replacement yet; when it has, the query goes on, and the next batch's
  loads are the ones served.

The executor running the most state is killed with SIGKILL (its host and disk stay, as when an executor crashes),
the query fails and is restarted from its checkpoint (or goes on, see above): every partition loads from copies (its
host's, or fetched from a peer), none reads an SST file or snapshot from the checkpoint location (a changelog
committed in the moment before the kill may not have reached a peer yet: its load fetches it from the peer holding
it, else reads it there, the acceptance's bound), and the output equals an exact recomputation.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest
from test_file_replicas_spark import WORKERS, LoopbackCluster, _wait, loopback_cluster, session_on

from spark_provider.local_cluster import kill_executor

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in pyspark.__version__.split(".")[:2]) < (4, 3), reason="Real-Time Mode came with Spark 4.3"
)
STATE_PARTITIONS = 2
SLOTS = 1 + STATE_PARTITIONS  # the source's one partition and the state partitions, all at once
assert len(WORKERS) == SLOTS, "one one-core worker per task of a batch"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    with loopback_cluster(tmp_path_factory.mktemp("loopback-cluster-rtm")) as started:
        yield started


@pytest.fixture(scope="module")
def spark(cluster: LoopbackCluster) -> Iterator[Any]:
    # Real-Time Mode fails a batch it cannot give every slot: the session waits for every executor to register.
    with session_on(cluster, "file-replicas-rtm", STATE_PARTITIONS, replication_factor=1) as session:
        yield session


class RealTimeCounts:
    """Rows per `value % 10` in Real-Time Mode (update mode), written by `foreach` into one file per executor
    process; a key's newest count is the largest written (a re-run batch writes its counts again)."""

    def __init__(self, spark: Any, root: Path) -> None:
        from pyspark.sql import DataFrame
        from pyspark.sql import functions as F

        self.spark, self.checkpoint, self.out = spark, root / "ck", root / "out"
        self.out.mkdir()
        self.sent: list[int] = []
        jvm = spark._jvm
        streams = getattr(jvm.org.apache.spark.sql.execution.streaming.sources, "LowLatencyMemoryStream$")
        encoder = jvm.org.apache.spark.sql.Encoders.INT()
        self.stream = getattr(streams, "MODULE$").apply(spark._jsparkSession, 1, encoder)
        values = DataFrame(self.stream.toDF(), spark)
        self.counts = values.groupBy((F.col("value") % 10).alias("k")).agg(F.count("*").alias("n"))
        self.query = self.start()

    def start(self) -> Any:
        """Start (or restart from its checkpoint) the query."""
        out = str(self.out)

        def write(row: Any) -> None:
            with open(os.path.join(out, f"{os.getpid()}.txt"), "a") as written:
                written.write(f"{row.k},{row.n}\n")

        return (
            self.counts.writeStream.outputMode("update").foreach(write).queryName("real_time_counts")
            .option("checkpointLocation", str(self.checkpoint)).trigger(realTime="5 seconds").start()
        )  # fmt: skip

    def add(self, round_: int) -> None:
        """Send the round's hundred values."""
        values = list(range(round_ * 100, round_ * 100 + 100))
        self.sent.extend(values)
        jvm = self.spark._jvm
        self.stream.addData(jvm.scala.jdk.CollectionConverters.ListHasAsScala(jvm.java.util.ArrayList(values)).asScala())

    def newest(self) -> dict[int, int]:
        found: dict[int, int] = {}
        for written in self.out.glob("*.txt"):
            for line in written.read_text().splitlines():
                if re.fullmatch(r"\d+,\d+", line):
                    k, n = map(int, line.split(","))
                    found[k] = max(found.get(k, 0), n)
        return found

    def exact(self) -> bool:
        if self.query.exception() is not None:
            raise AssertionError(f"the query failed: {self.query.exception()}")
        expected: dict[int, int] = {}
        for value in self.sent:
            expected[value % 10] = expected.get(value % 10, 0) + 1
        return self.newest() == expected

    def exact_restarting(self) -> bool:
        """`exact`, restarting the query as a supervisor would when Real-Time Mode could not get every slot for a
        batch (the scheduler had not yet counted the replacement executor)."""
        failure = self.query.exception()
        if failure is not None and "CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT" in str(failure):
            self.query = self.start()
            return False
        return self.exact()

    def caught_up(self) -> dict[str, Any] | None:
        """Store id -> status, once each state partition's replicas hold its primary's newest version."""
        import spark_provider

        mine = [p for p in spark_provider.status(spark=self.spark).partitions
                if p.store.checkpoint_dir.startswith(str(self.checkpoint))]  # fmt: skip
        if len(mine) < STATE_PARTITIONS:
            return None
        if any(not p.replicas or any(r.version_held < p.primary_version for r in p.replicas) for p in mine):
            return None
        return {p.store.store_id: p for p in mine}


def _state_reads(log: str) -> list[tuple[str, str, str]]:
    """(store id, file kind, where from) of each state file an executor read: "the checkpoint location" or "its
    local copy" (with " (shipped by a peer)" when a peer's node shipped it)."""
    where = r"(the checkpoint location|its local copy)"
    return re.findall(r"statestore-fs: (\S+) read \d+ bytes of (\S+) \S+ from " + where, log)


def test_a_real_time_aggregation_restarted_after_an_executor_kill_loads_from_copies(
    spark: Any, cluster: LoopbackCluster, tmp_path: Path
) -> None:
    query = RealTimeCounts(spark, tmp_path)
    try:
        for round_ in range(4):
            query.add(round_)
            _wait(query.exact, f"round {round_}'s counts")
        partitions = _wait(query.caught_up, "every state partition's replicas to hold its newest version")
        primaries = [p.primary_node for p in partitions.values()]
        victim = max(sorted(set(primaries)), key=lambda e: (primaries.count(e), e))
        lost = {store for store, p in partitions.items() if p.primary_node == victim}
        before = cluster.executor_logs(spark.sparkContext.applicationId)
        kill_executor(victim)
        query.add(4)
        # Real-Time Mode does not retry tasks: a batch running on the victim fails the query, and so does the next
        # batch when the kill fell between two and the scheduler has not counted the replacement executor yet; when
        # it has, the query goes on (its partitions then load wherever Spark runs them). A supervisor restarts a
        # failed query once the executor is replaced.
        _wait(lambda: query.query.exception() is not None or query.exact(), "the query to fail, or to count round 4")
        failure = query.query.exception()
        if failure is not None:
            assert re.search(r"ExecutorLostFailure|CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT", str(failure)), failure
            tracker = spark.sparkContext._jsc.sc().statusTracker()
            _wait(lambda: len(tracker.getExecutorInfos()) > SLOTS, "the cluster manager to replace the executor")
            query.query = query.start()
        for round_ in range(5, 7):
            query.add(round_)
            _wait(query.exact_restarting, f"round {round_}'s counts after executor {victim} was killed")
    finally:
        query.query.stop()
    after = cluster.executor_logs(spark.sparkContext.applicationId)
    reads = [read for executor, log in after.items() for read in _state_reads(log[len(before.get(executor, "")):])]
    since_kill = [line for executor, log in after.items() for line in log[len(before.get(executor, "")):].splitlines()]
    from_checkpoint = [line for line in since_kill if "statestore-fs" in line and "checkpoint location" in line]
    assert not [r for r in reads if r[2] == "the checkpoint location" and r[1] != "changelog"], from_checkpoint
    assert lost <= {store for store, _, where in reads if where == "its local copy"}, (lost, reads)
