"""Benchmark: a running aggregation scaled from two executors to three and back to two, as Spark's dynamic
allocation does it, ours (q=1, load balancing on) against Spark's RocksDB provider (changelog checkpointing).

    python bench/elastic_bench.py [--quick] --out FILE.json

Each provider runs in a Spark application of its own on local-cluster[3,1,1024] (one-core executors) with
graceful decommissioning on, eight state partitions. The executor count is set through the calls dynamic
allocation makes (`requestTotalExecutors`, `decommissionExecutor`), so that the steps start when the benchmark
says, not when a backlog heuristic fires (`tests/test_elastic_spark.py` runs dynamic allocation itself):

1. **load**: micro-batches of new keys until the state holds `--keys` keys (quick: 200k, full: 1M), a count, a
   sum and a 64-byte incompressible value each; the third executor decommissioned (two left) and, for ours, the
   replicas caught up again; five update micro-batches nobody measures; then seven measured ones (**before**).
2. **scale-out**: Spark is asked for three executors again, between micro-batches, and a neighbour batch job reads
   and aggregates the query's input as the query does (the work dynamic allocation adds executors for: the new
   executor takes part, so its JVM's first runs of the query's stateless stages are not inside the measured
   micro-batches; unmeasured). Then micro-batches of 20,000 random existing keys run back to back. Ours: the
   load-balancing policy sees an executor with no stateful task and hands two primaries over to it (each warmed up
   as a replica first); the step lasts until that operation is done. Spark's: the new executor gets no stateful task
   by Spark's own scheduling (each partition prefers the executor that loaded it), so two partitions, one from each
   old executor, are reported active on it to Spark's StateStoreCoordinator, which then runs them there: they load
   from the checkpoint location; the step lasts until both run there. Seven micro-batches after it (**after**).
3. **scale-in**: Spark decommissions the added executor (as dynamic allocation's scale-down does). Ours: the
   driver's watch sees it and the controller drains it (hand-overs to the replica holders). Spark's: its
   partitions are run elsewhere and load from the checkpoint location. The step lasts until Spark removed the
   executor and three micro-batches ran since the decommission; seven after it.

Per step and provider: the median micro-batch time before, during and after; the longest during; partitions
loaded from the checkpoint location during the step (ours: the loads' reported sources; Spark's: partitions
that changed executor, which its provider can only load from there); and the balance after the step: the
slowest executor's summed task time over the executors' mean, from Spark's event log over the after
micro-batches; for scale-out also the added executor's first three tasks (a new JVM's are slow, whatever the
state store). Every micro-batch's output digest is compared between the providers (same input per batch id).

Prints a table, writes the JSON (`{"scale_out": {"ours_steady_ms", "ours_max_ms", "spark_steady_ms",
"spark_max_ms", "ours_checkpoint_loads", "spark_checkpoint_loads", "ours_balance", "spark_balance", ...},
"scale_in": {...}, "results_match": ...}`) and a PNG beside it (micro-batch time over the run, scaling events
marked).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # as importing statestore does, before grpc loads

from aggregation_workload import (  # noqa: E402
    KeyedFeeder,
    duration,
    partition_locations,
    start_digest_aggregation,
    steer,
)
from bench_outputs import keyed_providers_main  # noqa: E402
from text_table import print_table_rows  # noqa: E402

import statestore  # noqa: E402,F401  (gRPC settings first)
from spark_provider.progress import load_sources  # noqa: E402

VALUE_BYTES = 64
LOAD_KEYS_PER_BATCH = 250_000
UPDATE_ROWS = 20_000
SETTLE_BATCHES = 5
STEADY_BATCHES = 7
SCALE_IN_MIN_BATCHES = 3
MAX_STEP_BATCHES = 60
PARTITIONS = 8
MOVED_TO_NEW = 2  # partitions the added executor takes (8 over 3 executors: 3, 3, 2)
PROVIDERS = ("ours", "spark")
STEPS = ("scale_out", "scale_in")
SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
TARGETS = {"max_over_steady": 1.2, "checkpoint_loads": 0}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Step:
    """One scaling step on one provider; times are wall-clock epoch seconds (for the event log's task times)."""

    before_ms: list[int] = field(default_factory=list)
    during_ms: list[int] = field(default_factory=list)
    after_ms: list[int] = field(default_factory=list)
    checkpoint_loads: int = 0
    executor: str = ""  # the executor added or removed
    seconds: float = 0.0
    after_window: tuple[float, float] = (0.0, 0.0)
    after_executors: list[str] = field(default_factory=list)
    balance: float | None = None
    first_tasks_ms: list[int] = field(default_factory=list)  # scale-out: the added executor's first tasks
    notes: list[str] = field(default_factory=list)

    @property
    def steady(self) -> float:
        return statistics.median(self.before_ms)


@dataclass
class Run:
    provider: str
    keys: int
    steps: dict[str, Step] = field(default_factory=dict)
    digests: dict[int, list] = field(default_factory=dict)
    series: list[int] = field(default_factory=list)  # every measured micro-batch, in order
    marks: dict[str, int] = field(default_factory=dict)  # event -> index in `series` where it happened


# ----------------------------------------------------------------------------- the application


def start_spark(provider: str, root: Path) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_provider

    builder = (
        SparkSession.builder.master("local-cluster[3,1,1024]")
        .appName(f"elastic-bench-{provider}")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.executor.memory", "1g")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "10s")
        .config("spark.decommission.enabled", "true")
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.compress", "false")
        .config("spark.eventLog.dir", str(root / "events"))
    )
    (root / "events").mkdir(parents=True, exist_ok=True)
    if provider == "ours":
        builder = spark_provider.enable(
            builder,
            replication_factor=1,
            local_dir=str(root / "local"),
            load_balancing="on",
            load_balancing_batches=3,
            load_balancing_max_moves=MOVED_TO_NEW,
        )
    else:
        builder = (
            builder.config("spark.jars", str(spark_provider.provider_jar()))  # the coordinator helper (Steering)
            .config("spark.sql.streaming.stateStore.providerClass", SPARK_ROCKSDB)
            .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def executor_ids(spark: Any) -> set[str]:
    listed = str(spark.sparkContext._jsc.sc().getExecutorIds().mkString(","))
    return set(filter(None, listed.split(",")))


class ElasticFeeder(KeyedFeeder):
    """The aggregation's feeder; every update batch measured goes to the run's series (batch time over the run)."""

    def __init__(self, query: Any, root: Path, keys: int, run: Run) -> None:
        super().__init__(query, root, keys, UPDATE_ROWS, run.provider)
        self.run = run

    def update(self, measured: bool = True) -> dict[str, Any]:
        """One update micro-batch; `measured`: recorded in the run's series."""
        progress = super().update()
        if measured:
            self.run.series.append(duration(progress))
        return progress


def steady(feeder: ElasticFeeder, into: list[int]) -> None:
    for _ in range(STEADY_BATCHES):
        into.append(duration(feeder.update()))


def after(spark: Any, feeder: ElasticFeeder, step: Step) -> None:
    start = time.time()
    steady(feeder, step.after_ms)
    step.after_window = (start, time.time())
    step.after_executors = sorted(executor_ids(spark))


# ----------------------------------------------------------------------------- where partitions run (Spark's)


# ----------------------------------------------------------------------------- the steps


def add_executor(spark: Any, run: Run) -> str:
    """Ask Spark for three executors again (as dynamic allocation does when tasks wait, through the same call)
    and wait until the new one registered; its id."""
    before = executor_ids(spark)
    context = spark.sparkContext
    context._jsc.sc().requestTotalExecutors(3, 0, context._jvm.PythonUtils.toScalaMap({}))
    deadline = time.monotonic() + 120
    while not executor_ids(spark) - before:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Spark added no executor to {sorted(before)}")
        time.sleep(0.1)
    (added,) = executor_ids(spark) - before
    log(f"{run.provider}: Spark added executor {added}")
    return added


def back_to_two(spark: Any, feeder: ElasticFeeder, run: Run) -> None:
    """Setup, not measured: the application starts with three executors (local-cluster starts one per worker);
    decommission the last (lowering Spark's requested total to two) and wait until it is gone and, for ours, until
    every partition has its replica again."""
    newest = max(executor_ids(spark), key=int)
    jvm = spark.sparkContext._jvm
    info = jvm.org.apache.spark.scheduler.ExecutorDecommissionInfo("bench setup", jvm.scala.Option.empty())
    spark.sparkContext._jsc.sc().schedulerBackend().decommissionExecutor(newest, info, True, False)
    deadline = time.monotonic() + 120
    while newest in executor_ids(spark):
        if time.monotonic() > deadline:
            raise TimeoutError(f"executor {newest} still runs 120 s after its decommission")
        feeder.update(measured=False)
    if run.provider == "ours":
        from statestore.controller.client import ControlClient

        address = spark.conf.get("spark.sql.streaming.stateStore.statestore.controller")
        with ControlClient(address) as client:
            while not all(
                p.replicas and all(r.version_held >= p.primary_version - 1 for r in p.replicas)
                for p in client.status().partitions
            ):
                if time.monotonic() > deadline + 300:
                    raise TimeoutError("the replicas did not catch up after the setup's decommission")
                feeder.update(measured=False)
    log(f"{run.provider}: decommissioned executor {newest} (setup): two executors")


def run_neighbour_job(spark: Any, root: Path) -> None:
    """The work dynamic allocation adds an executor for (tasks waiting for slots), unmeasured: a batch job over
    the query's input, read and aggregated as the query does (a backfill of the same aggregation, its output
    reduced as the query's `foreachBatch` does), in more tasks than slots, which Spark spreads over every
    executor, the new one too. Without it the new JVM would compile and JIT the query's stateless stages (the
    file scan with the partial aggregation, the output's reduction) inside the measured micro-batches, for either
    provider: Spark runs the query's file-reading task on the idle new executor by itself, and that first task
    took 1.4 s against 0.1 to 0.3 s (a job that parsed the same files from an RDD of lines warmed other code)."""
    from pyspark.sql import functions as F

    key = F.col("k").cast("string")
    value = F.unhex(F.concat(*[F.sha2(F.concat(key, F.lit(f"-{i}")), 256) for i in range(VALUE_BYTES // 32)]))
    frame = spark.read.schema("k long, v long").option("maxPartitionBytes", 1 << 20).json(str(root / "input"))
    totals = frame.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"), F.max(value).alias("p"))
    totals.agg(F.count("*"), F.sum("n"), F.sum("s"), F.sum(F.crc32("p"))).collect()


def scale_out_ours(spark: Any, feeder: ElasticFeeder, step: Step) -> None:
    """Micro-batches until the policy's operation handing primaries to the added executor is done."""
    from statestore.controller.client import ControlClient

    started = time.monotonic()
    with ControlClient(spark.conf.get("spark.sql.streaming.stateStore.statestore.controller")) as client:
        node = ""
        while len(step.during_ms) < MAX_STEP_BATCHES:
            progress = feeder.update()
            step.during_ms.append(duration(progress))
            step.checkpoint_loads += load_sources(progress)["checkpoint"]
            reply = client.status()
            node = node or next((n.node.node_id for n in reply.nodes if n.node.executor_id == step.executor), "")
            done = [
                o
                for o in reply.operations
                if o.kind == "balance" and o.state in ("done", "failed") and any(m.target_node == node for m in o.moves)
            ]
            if done:
                step.notes = [*done[-1].notes, *(f"{m.partition}: {m.load_source}" for m in done[-1].moves)]
                break
        else:
            step.notes.append(f"no balancing operation to the added executor within {MAX_STEP_BATCHES} batches")
    step.seconds = time.monotonic() - started


def scale_out_spark(spark: Any, query: Any, root: Path, feeder: ElasticFeeder, step: Step) -> None:
    """Report two partitions (one from each old executor) active on the added executor until Spark runs them
    there; each is a load from the checkpoint location for Spark's provider."""
    started = time.monotonic()
    located = partition_locations(spark, query, root, PARTITIONS)
    host = next(iter(located.values()))[1]
    by_executor: dict[str, list[int]] = {}
    for p, (executor, _) in sorted(located.items()):
        by_executor.setdefault(executor, []).append(p)
    chosen = [ps[-1] for _, ps in sorted(by_executor.items(), key=lambda kv: -len(kv[1]))][:MOVED_TO_NEW]
    left = set(chosen)
    while left and len(step.during_ms) < MAX_STEP_BATCHES:
        for p in left:
            steer(spark, query, root, p, step.executor, host)
        step.during_ms.append(duration(feeder.update()))
        now = partition_locations(spark, query, root, PARTITIONS)
        left = {p for p in left if now.get(p, ("", ""))[0] != step.executor}
    step.checkpoint_loads = len(chosen) - len(left)
    step.notes.append(f"partitions {sorted(chosen)} reported active on executor {step.executor}")
    step.seconds = time.monotonic() - started


def scale_in(spark: Any, query: Any, root: Path, feeder: ElasticFeeder, step: Step, ours: bool) -> None:
    """Decommission the added executor; micro-batches until Spark removed it and a few ran since."""
    jvm = spark.sparkContext._jvm
    moved_before = partition_locations(spark, query, root, PARTITIONS) if not ours else {}
    info = jvm.org.apache.spark.scheduler.ExecutorDecommissionInfo("bench scale-in", jvm.scala.Option.empty())
    started = time.monotonic()
    if not spark.sparkContext._jsc.sc().schedulerBackend().decommissionExecutor(step.executor, info, True, False):
        raise RuntimeError(f"Spark refused to decommission executor {step.executor}")
    while len(step.during_ms) < MAX_STEP_BATCHES:
        progress = feeder.update()
        step.during_ms.append(duration(progress))
        if ours:
            step.checkpoint_loads += load_sources(progress)["checkpoint"]
        if step.executor not in executor_ids(spark) and len(step.during_ms) >= SCALE_IN_MIN_BATCHES:
            break
    step.seconds = time.monotonic() - started
    if not ours:
        now = partition_locations(spark, query, root, PARTITIONS)
        step.checkpoint_loads = sum(1 for p, where in moved_before.items() if now.get(p, where)[0] != where[0])


# ----------------------------------------------------------------------------- balance from the event log


def executor_task_seconds(events_dir: Path, window: tuple[float, float]) -> dict[str, float]:
    """Executor id -> summed duration of the tasks launched in `window` (epoch seconds), from the event log."""
    totals: dict[str, float] = {}
    for path in sorted(p for p in events_dir.rglob("*") if p.is_file()):  # Spark 4 writes a directory per app
        for line in path.open(errors="replace"):
            if '"SparkListenerTaskEnd"' not in line:
                continue
            info = json.loads(line)["Task Info"]
            launched = info["Launch Time"] / 1000
            if window[0] <= launched <= window[1]:
                executor = str(info["Executor ID"])
                totals[executor] = totals.get(executor, 0.0) + (info["Finish Time"] - info["Launch Time"]) / 1000
    return totals


def first_tasks_ms(events_dir: Path, executor: str, count: int = 3) -> list[int]:
    """Durations of the first `count` tasks executor `executor` ran (a new JVM's first tasks are slow: class
    loading, code generation, the JIT), from the event log."""
    found = []
    for path in sorted(p for p in events_dir.rglob("*") if p.is_file()):
        for line in path.open(errors="replace"):
            if '"SparkListenerTaskEnd"' in line:
                info = json.loads(line)["Task Info"]
                if str(info["Executor ID"]) == executor:
                    found.append((info["Launch Time"], info["Finish Time"] - info["Launch Time"]))
    return [ms for _, ms in sorted(found)[:count]]


def balance(totals: dict[str, float], executors: list[str]) -> float | None:
    """The slowest executor's summed task time over the mean of `executors` (those that ran nothing count 0)."""
    values = [totals.get(e, 0.0) for e in executors]
    mean = statistics.mean(values) if values else 0.0
    return round(max(values) / mean, 3) if mean else None


# ----------------------------------------------------------------------------- one application


def run_one(provider: str, keys: int, work: Path) -> Run:
    run = Run(provider, keys)
    root = work / provider
    shutil.rmtree(root, ignore_errors=True)
    (root / "input").mkdir(parents=True)
    spark = start_spark(provider, root)
    query = None
    ours = provider == "ours"
    try:
        query = start_digest_aggregation(spark, root, run.digests, VALUE_BYTES)
        feeder = ElasticFeeder(query, root, keys, run)
        feeder.load(keys, LOAD_KEYS_PER_BATCH)
        back_to_two(spark, feeder, run)
        for _ in range(SETTLE_BATCHES):
            feeder.update(measured=False)
        out = run.steps["scale_out"] = Step()
        steady(feeder, out.before_ms)
        log(f"{provider}: steady median {out.steady:.0f} ms on {sorted(executor_ids(spark))}; scaling out")
        out.executor = add_executor(spark, run)
        run_neighbour_job(spark, root)
        run.marks["executor added"] = len(run.series)
        if ours:
            scale_out_ours(spark, feeder, out)
        else:
            scale_out_spark(spark, query, root, feeder, out)
        run.marks["scale-out done"] = len(run.series)
        after(spark, feeder, out)
        log(f"{provider}: scale-out in {len(out.during_ms)} micro-batches, max {max(out.during_ms)} ms, after "
            f"median {statistics.median(out.after_ms):.0f} ms")  # fmt: skip
        inn = run.steps["scale_in"] = Step(before_ms=list(out.after_ms), executor=out.executor)
        run.marks["decommission"] = len(run.series)
        scale_in(spark, query, root, feeder, inn, ours)
        run.marks["executor removed"] = len(run.series)
        after(spark, feeder, inn)
        log(f"{provider}: scale-in in {len(inn.during_ms)} micro-batches, max {max(inn.during_ms)} ms, after "
            f"median {statistics.median(inn.after_ms):.0f} ms")  # fmt: skip
    finally:
        if query is not None:
            query.stop()
        spark.stop()
    for step in run.steps.values():
        step.balance = balance(executor_task_seconds(root / "events", step.after_window), step.after_executors)
    run.steps["scale_out"].first_tasks_ms = first_tasks_ms(root / "events", run.steps["scale_out"].executor)
    keep = os.environ.get("ELASTIC_BENCH_EVENT_LOG")  # a directory to keep Spark's event logs in (task timing)
    if keep:
        shutil.copytree(root / "events", Path(keep) / provider, dirs_exist_ok=True)
    shutil.rmtree(root, ignore_errors=True)
    return run


# ----------------------------------------------------------------------------- report


def report(ours: Run, spark: Run, quick: bool) -> dict[str, Any]:
    common = sorted(set(ours.digests) & set(spark.digests))
    matches = bool(common) and all(ours.digests[b] == spark.digests[b] for b in common)
    out: dict[str, Any] = {"results_match": matches, "batches_compared": len(common)}
    for name in STEPS:
        o, s = ours.steps[name], spark.steps[name]
        out[name] = {
            "ours_steady_ms": round(o.steady, 1),
            "ours_max_ms": max(o.during_ms),
            "spark_steady_ms": round(s.steady, 1),
            "spark_max_ms": max(s.during_ms),
            "ours_checkpoint_loads": o.checkpoint_loads,
            "spark_checkpoint_loads": s.checkpoint_loads,
            "ours_balance": o.balance,
            "spark_balance": s.balance,
            "ours_max_over_steady": round(max(o.during_ms) / o.steady, 3),
            "spark_max_over_steady": round(max(s.during_ms) / s.steady, 3),
            "ours_during_median_ms": statistics.median(o.during_ms),
            "spark_during_median_ms": statistics.median(s.during_ms),
            "ours_after_median_ms": statistics.median(o.after_ms),
            "spark_after_median_ms": statistics.median(s.after_ms),
            "ours_step_batches": len(o.during_ms),
            "spark_step_batches": len(s.during_ms),
            "ours_step_seconds": round(o.seconds, 2),
            "spark_step_seconds": round(s.seconds, 2),
            "ours_batches_ms": {"before": o.before_ms, "during": o.during_ms, "after": o.after_ms},
            "spark_batches_ms": {"before": s.before_ms, "during": s.during_ms, "after": s.after_ms},
            "ours_new_executor_first_tasks_ms": o.first_tasks_ms,
            "spark_new_executor_first_tasks_ms": s.first_tasks_ms,
            "ours_notes": o.notes,
            "spark_notes": s.notes,
        }
    out["verdict"] = {
        f"{name}_max_met": out[name]["ours_max_over_steady"] <= TARGETS["max_over_steady"] for name in STEPS
    } | {
        "no_checkpoint_loads": all(out[name]["ours_checkpoint_loads"] == 0 for name in STEPS),
        "results_match": matches,
    }
    out["targets"] = TARGETS
    out["series"] = {"ours": ours.series, "spark": spark.series, "ours_marks": ours.marks, "spark_marks": spark.marks}
    out["workload"] = {
        "master": "local-cluster[3,1,1024]: 2, 3, then 2 one-core executors", "partitions": PARTITIONS,
        "keys": ours.keys, "value_bytes": VALUE_BYTES, "update_rows": UPDATE_ROWS, "steady_batches": STEADY_BATCHES,
        "spark_provider": SPARK_ROCKSDB + " (changelog checkpointing)",
        "ours": "statestore, q=1, load_balancing on (3 batches, 2 moves)", "quick": quick,
    }  # fmt: skip
    return out


def print_table(result: dict[str, Any]) -> None:
    header = ("step", "provider", "steady", "max during", "max/steady", "during median", "after median",
              "batches", "checkpoint loads", "balance after")  # fmt: skip
    rows = []
    for name in STEPS:
        r = result[name]
        for provider in PROVIDERS:
            rows.append((name, provider, f"{r[f'{provider}_steady_ms']:.0f} ms", f"{r[f'{provider}_max_ms']} ms",
                         f"{r[f'{provider}_max_over_steady']}", f"{r[f'{provider}_during_median_ms']:.0f} ms",
                         f"{r[f'{provider}_after_median_ms']:.0f} ms", f"{r[f'{provider}_step_batches']}",
                         f"{r[f'{provider}_checkpoint_loads']}", f"{r[f'{provider}_balance']}"))  # fmt: skip
    print_table_rows(header, rows)
    print(json.dumps(result["verdict"]))


def write_png(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(11, 6.5), sharex=False)
    for ax, provider, label in ((axes[0], "ours", "statestore (q=1, load balancing, drain on decommission)"),
                                (axes[1], "spark", "Spark RocksDB (changelog), coordinator moves")):  # fmt: skip
        series = result["series"][provider]
        ax.plot(range(len(series)), series, "o-", markersize=3, color="C0" if provider == "ours" else "C1")
        for event, index in result["series"][f"{provider}_marks"].items():
            ax.axvline(index - 0.5, color="grey", linestyle=":")
            ax.text(index - 0.4, max(series) * 0.95, event, rotation=90, va="top", fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.set_ylabel("micro-batch (ms)")
        ax.grid(alpha=0.3)
    axes[1].set_xlabel("measured micro-batch")
    fig.suptitle(f"2 -> 3 -> 2 executors under a running aggregation, {result['workload']['keys']:,} keys")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    return keyed_providers_main(
        argv, __doc__, (200_000, 1_000_000), PROVIDERS, run_one, report, write_png, print_table
    )


if __name__ == "__main__":
    sys.exit(main())
