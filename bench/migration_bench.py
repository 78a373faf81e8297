"""Benchmark: half of the state partitions moved under a steady aggregation, by migration strategy, ours (q=1,
planned hand-over) against Spark's RocksDB provider (changelog checkpointing), as Megaphone measures migrations.

    python bench/migration_bench.py [--quick] --out FILE.json

Each provider runs in a Spark application of its own on local-cluster[3,1,1024] with eight state partitions:

1. **load**: micro-batches of new keys until the state holds `--keys` keys (quick: 1M, full: 5M); per key a
   count, a sum and a 64-byte incompressible value; then sixty update micro-batches nobody measures, for the
   state and the JVMs to settle (the JIT compilers' CPU per micro-batch falls by about half over them);
2. per strategy (`all-at-once`, `fluid`, `batched`), one after another in the same application:
   - **steady**: seven micro-batches updating 20,000 random existing keys; their median duration;
   - **migration**: half of the partitions (four) move to another executor, chosen so that no executor holds
     more partitions afterwards than the busiest one before (each partition is a stateful task: an executor with
     one task more slows every micro-batch for either provider). Ours: `spark_provider.move` with the strategy,
     each partition to the executor holding its replica (the hand-over protocol: warm, steer, one increment);
     micro-batches go on at full speed meanwhile, until every moved partition is served. Spark's: the same
     strategy's batches of moves (`placement.handover`: all at once, one per micro-batch, or Megaphone's matched
     batches in which no executor takes part in two moves), each forced by reporting the partitions active on
     their new executors to Spark's StateStoreCoordinator, which then reload them there from the checkpoint
     location; a move Spark did not carry out (its locality wait) is steered again at the next micro-batch;
   - a few micro-batches after it;
   - per provider: the steady median, the longest micro-batch during the migration, the migration's duration
     in micro-batches and seconds; for ours the bytes each move carried to its target (the increments its
     provider applied on top of its replica, from the load report and the increments' sizes), against the
     partition's mean increment and its full state.
3. Every micro-batch's output digest (row count, sums, CRC of the values) compared between the providers, on
   the micro-batches both ran (the input of micro-batch i is the same in both).

Prints a table, writes the JSON (`{"strategies": {"<name>": {"ours_steady_ms", "ours_max_ms", "spark_steady_ms",
"spark_max_ms", "duration_batches", "bytes_per_move", "increment_bytes_mean", "state_bytes_per_partition",
...}}, "results_match": ...}`) and a PNG beside it (micro-batch time over each migration, one line per provider).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import statistics
import sys
import time
from collections import Counter
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
from placement import Move, Role  # noqa: E402
from placement.handover import plan_handover  # noqa: E402
from spark_provider.progress import load_sources, opened_ahead  # noqa: E402

VALUE_BYTES = 64
LOAD_KEYS_PER_BATCH = 250_000
UPDATE_ROWS = 20_000
STEADY_BATCHES = 7
# Update micro-batches after the load that nothing measures, for the JVMs to warm up as a query that has run for a
# while has: on this query the compiler threads of the driver and executors took 0.95 core-seconds per micro-batch
# over the first ten after a load, 0.6 after thirty, 0.35 after sixty and 0.2 after 120 (on a 2-core machine, more
# than the tasks themselves early on, and about 40% of the micro-batches' variance), measured with our provider;
# Spark's runs show the same compiler threads at work.
SETTLE_BATCHES = 60
AFTER_BATCHES = 3
MAX_MIGRATION_BATCHES = 60
SERVED = ("promoted", "done", "failed")
PARTITIONS = 8
EXECUTORS = 3
STRATEGIES = ("all-at-once", "fluid", "batched")
PROVIDERS = ("ours", "spark")
SPARK_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
TARGETS = {"batched_max_over_steady": 1.2, "bytes_per_move_over_increment": 2.0}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Migration:
    """One strategy's migration on one provider."""

    strategy: str
    steady_ms: list[int] = field(default_factory=list)
    during_ms: list[int] = field(default_factory=list)  # every micro-batch from the first steer to the last move
    after_ms: list[int] = field(default_factory=list)
    seconds: float = 0.0
    moves: list[dict[str, Any]] = field(default_factory=list)
    checkpoint_loads: int = 0  # stores loaded from the checkpoint location during the migration (ours)
    opened_ahead: int = 0  # moved stores whose copy their new executor opened before the batch (ours)

    @property
    def steady_median(self) -> float:
        return statistics.median(self.steady_ms)

    @property
    def max_during(self) -> int:
        return max(self.during_ms, default=0)


@dataclass
class Run:
    provider: str
    keys: int
    migrations: dict[str, Migration] = field(default_factory=dict)
    settle_ms: list[int] = field(default_factory=list)  # the settling micro-batches: no migration touches them
    digests: dict[int, list] = field(default_factory=dict)
    state_bytes_per_partition: float = 0.0
    increment_bytes_mean: float = 0.0


# ----------------------------------------------------------------------------- the workload


def start_query(spark: Any, root: Path, digests: dict[int, list]) -> Any:
    return start_digest_aggregation(spark, root, digests, VALUE_BYTES)


def start_spark(provider: str, root: Path) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_provider

    builder = (
        SparkSession.builder.master(f"local-cluster[{EXECUTORS},1,1024]")
        .appName(f"migration-bench-{provider}")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.executor.memory", "1g")
        # For both providers: an executor a partition moved away from closes its copy within 10 s (Spark's
        # default is 60 s); for ours the old primary then adopts its store as a replica, for Spark's the
        # maintenance also uploads snapshots sooner.
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "10s")
    )
    events = os.environ.get("MIGRATION_BENCH_EVENT_LOG")  # a directory: Spark's event logs (per task timing)
    if events:
        Path(events).mkdir(parents=True, exist_ok=True)
        builder = builder.config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", events)
    if provider == "ours":
        builder = spark_provider.enable(builder, replication_factor=1, local_dir=str(root / "local"))
    else:
        builder = (
            builder.config("spark.jars", str(spark_provider.provider_jar()))  # the coordinator helper (Steering)
            .config("spark.sql.streaming.stateStore.providerClass", SPARK_ROCKSDB)
            .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def controller_status(spark: Any) -> Any:
    from statestore.controller.client import ControlClient

    with ControlClient(spark.conf.get("spark.sql.streaming.stateStore.statestore.controller")) as client:
        return client.status()


def wait_replicas_caught_up(spark: Any, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while True:
        reply = controller_status(spark)
        if len(reply.partitions) == PARTITIONS and all(
            p.replicas and all(r.version_held == p.primary_version for r in p.replicas) for p in reply.partitions
        ):
            return
        if time.monotonic() > deadline:
            raise TimeoutError("replicas did not catch up")
        time.sleep(0.5)


def balanced_moves(
    primaries: dict[int, str], candidates: dict[int, list[str]], avoid: set[int]
) -> dict[int, str]:
    """Half of the partitions, each to one of its candidate executors, such that no executor holds more
    partitions afterwards than the busiest one does now (a stateful task per partition: an executor with one more
    makes every later micro-batch slower, for either provider); partitions in `avoid` (moved by the previous
    strategy) as few as possible. Deterministic."""
    count = Counter(primaries.values())
    bound = max(count.values())
    best: tuple | None = None
    for chosen in itertools.combinations(sorted(primaries), PARTITIONS // 2):
        for targets in itertools.product(*(candidates[p] for p in chosen)):
            after = Counter(count)
            for p, t in zip(chosen, targets, strict=True):
                after[primaries[p]] -= 1
                after[t] += 1
            if max(after.values()) > bound:
                continue
            rank = (len(set(chosen) & avoid), chosen, targets)
            if best is None or rank < best:
                best = rank
    if best is None:
        raise RuntimeError(f"no balanced set of moves among {candidates}")
    return dict(zip(best[1], best[2], strict=True))


# ----------------------------------------------------------------------------- one migration


def migrate_ours(spark: Any, feeder: KeyedFeeder, avoid: set[int], strategy: str, run: Migration) -> set[int]:
    """Moves half of the partitions, each to the executor holding its replica; returns the partitions moved."""
    import spark_provider
    from statestore.controller.client import ControlClient

    wait_replicas_caught_up(spark)
    reply = controller_status(spark)
    executors = {n.node.node_id: n.node.executor_id for n in reply.nodes if n.alive}
    primaries = {int(p.store.store_id.split("/")[1]): executors[p.primary_node] for p in reply.partitions}
    candidates = {
        int(p.store.store_id.split("/")[1]): [executors[r.node_id] for r in p.replicas] for p in reply.partitions
    }
    chosen = balanced_moves(primaries, candidates, avoid)
    targets = {f"0/{p}": executor for p, executor in chosen.items()}
    started = time.monotonic()
    status = spark_provider.move(targets, strategy=strategy, wait=False)
    with ControlClient(spark.conf.get("spark.sql.streaming.stateStore.statestore.controller")) as client:
        # The migration lasts until every moved partition is served by its new executor; the old primaries'
        # copies settle afterwards (their providers close at their executors' next maintenance).
        while not all(m.step in SERVED for m in status.moves) and len(run.during_ms) < MAX_MIGRATION_BATCHES:
            progress = feeder.update()
            run.during_ms.append(duration(progress))
            run.checkpoint_loads += load_sources(progress)["checkpoint"]
            run.opened_ahead += opened_ahead(progress)
            status = client.operation(status.operation_id)
        run.seconds = time.monotonic() - started
        status = client.wait(status.operation_id, timeout=300)
    if status.state != "done":
        raise RuntimeError(f"the {strategy} migration ended {status.state}: {status}")
    for move in status.moves:
        run.moves.append(
            {
                "partition": move.partition.split("@")[0],
                "source": move.source_node,
                "target": move.target_node,
                "batch": move.batch,
                "attempts": move.attempts,
                "load_source": move.load_source,
                "loaded_from_version": move.loaded_from_version,
                "effective_version": move.effective_version,
                "load_ms": move.load_millis,
                "seconds_to_promote": round(move.seconds_to_promote, 3),
            }
        )
    return set(chosen)


def migrate_spark(spark: Any, query: Any, root: Path, feeder: KeyedFeeder, avoid: set[int], strategy: str,
                  run: Migration) -> set[int]:  # fmt: skip
    """Moves half of the partitions to other executors, as balanced as ours; returns the partitions moved."""
    located = partition_locations(spark, query, root, PARTITIONS)
    hosts = {executor: host for executor, host in located.values()}
    primaries = {p: executor for p, (executor, _) in located.items()}
    candidates = {p: [e for e in sorted(hosts) if e != source] for p, source in primaries.items()}
    chosen = balanced_moves(primaries, candidates, avoid)
    moves = [Move(str(p), Role.PRIMARY, primaries[p], target, 1, primaries[p]) for p, target in chosen.items()]
    plan = plan_handover(moves, strategy, Counter(primaries.values()))
    started = time.monotonic()
    for number, batch in enumerate(plan.batches):
        left = {int(m.partition): m.target for m in batch}
        for _attempt in range(5):  # a move Spark did not carry out is steered again
            for p, target in left.items():
                steer(spark, query, root, p, target, hosts[target])
            progress = feeder.update()
            run.during_ms.append(duration(progress))
            now = partition_locations(spark, query, root, PARTITIONS)
            left = {p: t for p, t in left.items() if now.get(p, ("", ""))[0] != t}
            if not left:
                break
        for m in batch:
            run.moves.append(
                {"partition": f"0/{m.partition}", "source": m.source, "target": m.target, "batch": number,
                 "done": int(m.partition) not in left}
            )  # fmt: skip
    run.seconds = time.monotonic() - started
    return set(chosen)


# ----------------------------------------------------------------------------- one application


def increment_sizes(root: Path) -> dict[int, dict[int, int]]:
    """Partition -> version -> bytes of its increment file (ours)."""
    found: dict[int, dict[int, int]] = {}
    state = root / "checkpoint" / "state" / "0"
    for partition_dir in state.iterdir() if state.is_dir() else []:
        if partition_dir.name.isdigit():
            for f in partition_dir.glob("*.increment"):
                found.setdefault(int(partition_dir.name), {})[int(f.name.split(".")[0])] = f.stat().st_size
    return found


def run_one(provider: str, keys: int, work: Path) -> Run:
    run = Run(provider, keys)
    root = work / provider
    shutil.rmtree(root, ignore_errors=True)
    (root / "input").mkdir(parents=True)
    spark = start_spark(provider, root)
    query = None
    try:
        query = start_query(spark, root, run.digests)
        feeder = KeyedFeeder(query, root, keys, UPDATE_ROWS, provider)
        feeder.load(keys, LOAD_KEYS_PER_BATCH)
        for _ in range(SETTLE_BATCHES):
            run.settle_ms.append(duration(feeder.update()))
        log(f"{provider}: {SETTLE_BATCHES} micro-batches to settle after the load")
        moved: set[int] = set()
        for strategy in STRATEGIES:
            migration = run.migrations[strategy] = Migration(strategy)
            for _ in range(STEADY_BATCHES):
                migration.steady_ms.append(duration(feeder.update()))
            log(f"{provider} {strategy}: steady median {migration.steady_median:.0f} ms; migrating")
            if provider == "ours":
                moved = migrate_ours(spark, feeder, moved, strategy, migration)
            else:
                moved = migrate_spark(spark, query, root, feeder, moved, strategy, migration)
            for _ in range(AFTER_BATCHES):
                migration.after_ms.append(duration(feeder.update()))
            log(f"{provider} {strategy}: {len(migration.during_ms)} micro-batches, {migration.seconds:.1f}s, max "
                f"{migration.max_during} ms")  # fmt: skip
        if provider == "ours":
            sizes = increment_sizes(root)
            reply = controller_status(spark)
            run.state_bytes_per_partition = statistics.mean(p.state_bytes for p in reply.partitions)
            steady_versions = [v for p in sizes.values() for v in p if v > -(-keys // LOAD_KEYS_PER_BATCH)]
            run.increment_bytes_mean = statistics.mean(
                size for p in sizes.values() for v, size in p.items() if v in steady_versions
            )
            for migration in run.migrations.values():
                for move in migration.moves:
                    partition = int(move["partition"].split("/")[1])
                    first = min(move["loaded_from_version"], move["effective_version"] - 1)
                    move["bytes"] = sum(
                        sizes[partition].get(v, 0) for v in range(first + 1, move["effective_version"] + 1)
                    )
                    move["increment_bytes_mean"] = statistics.mean(
                        s for v, s in sizes[partition].items() if v in steady_versions
                    )
        else:
            state = root / "checkpoint" / "state" / "0"
            run.state_bytes_per_partition = statistics.mean(
                sum(f.stat().st_size for f in (state / str(p)).rglob("*.sst")) for p in range(PARTITIONS)
            )
    finally:
        if query is not None:
            query.stop()
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return run


# ----------------------------------------------------------------------------- report


def untouched_windows(series: list[int], window: int) -> dict[str, Any]:
    """The target's statistic where no migration ran (the noise it is measured against): over every `window`
    consecutive micro-batches of `series` after its first third (the JVMs still compile then), the longest over
    the median of the `STEADY_BATCHES` before them; their median, and the share of windows above the target."""
    ratios = []
    for start in range(max(len(series) // 3, STEADY_BATCHES), len(series) - window + 1):
        baseline = statistics.median(series[start - STEADY_BATCHES : start])
        ratios.append(max(series[start : start + window]) / baseline)
    if not ratios:
        return {"window": window, "windows": 0}
    above = sum(r > TARGETS["batched_max_over_steady"] for r in ratios) / len(ratios)
    return {"window": window, "windows": len(ratios), "median_max_over_steady": round(statistics.median(ratios), 3),
            "share_above_target": round(above, 2)}  # fmt: skip



def report(ours: Run, spark: Run, quick: bool) -> dict[str, Any]:
    common = sorted(set(ours.digests) & set(spark.digests))
    matches = bool(common) and all(ours.digests[b] == spark.digests[b] for b in common)
    out: dict[str, Any] = {"strategies": {}, "results_match": matches, "batches_compared": len(common)}
    for strategy in STRATEGIES:
        o, s = ours.migrations[strategy], spark.migrations[strategy]
        bytes_per_move = statistics.mean(m["bytes"] for m in o.moves) if o.moves else 0
        out["strategies"][strategy] = {
            "ours_steady_ms": round(o.steady_median, 1),
            "ours_max_ms": o.max_during,
            "spark_steady_ms": round(s.steady_median, 1),
            "spark_max_ms": s.max_during,
            "duration_batches": len(o.during_ms),
            "bytes_per_move": round(bytes_per_move),
            "increment_bytes_mean": round(ours.increment_bytes_mean),
            "state_bytes_per_partition": round(ours.state_bytes_per_partition),
            "ours_max_over_steady": round(o.max_during / o.steady_median, 3) if o.steady_median else None,
            "spark_max_over_steady": round(s.max_during / s.steady_median, 3) if s.steady_median else None,
            "ours_max_over_spark_max": round(o.max_during / s.max_during, 3) if s.max_during else None,
            "ours_duration_seconds": round(o.seconds, 2),
            "spark_duration_batches": len(s.during_ms),
            "spark_duration_seconds": round(s.seconds, 2),
            "spark_state_bytes_per_partition": round(spark.state_bytes_per_partition),
            "ours_checkpoint_loads": o.checkpoint_loads,
            "ours_opened_ahead": o.opened_ahead,
            "ours_batches_ms": {"steady": o.steady_ms, "during": o.during_ms, "after": o.after_ms},
            "spark_batches_ms": {"steady": s.steady_ms, "during": s.during_ms, "after": s.after_ms},
            "ours_moves": o.moves,
            "spark_moves": s.moves,
        }
    batched = out["strategies"]["batched"]
    out["verdict"] = {
        "batched_max_over_steady": batched["ours_max_over_steady"],
        "batched_max_met": batched["ours_max_over_steady"] is not None
        and batched["ours_max_over_steady"] <= TARGETS["batched_max_over_steady"],
        "bytes_per_move_over_increment": round(batched["bytes_per_move"] / batched["increment_bytes_mean"], 3)
        if batched["increment_bytes_mean"]
        else None,
        "results_match": matches,
    }
    out["verdict"]["bytes_met"] = (
        out["verdict"]["bytes_per_move_over_increment"] is not None
        and out["verdict"]["bytes_per_move_over_increment"] <= TARGETS["bytes_per_move_over_increment"]
    )
    # The same statistic over micro-batches no migration touched, as long as the batched migration: what this
    # machine's noise alone gives.
    window = max(1, len(out["strategies"]["batched"]["ours_batches_ms"]["during"]))
    out["untouched"] = {"ours": untouched_windows(ours.settle_ms, window),
                        "spark": untouched_windows(spark.settle_ms, window)}  # fmt: skip
    out["targets"] = TARGETS
    out["workload"] = {
        "master": f"local-cluster[{EXECUTORS},1,1024]", "partitions": PARTITIONS, "keys": ours.keys,
        "value_bytes": VALUE_BYTES, "update_rows": UPDATE_ROWS, "steady_batches": STEADY_BATCHES,
        "moves_per_strategy": PARTITIONS // 2, "spark_provider": SPARK_ROCKSDB + " (changelog checkpointing)",
        "ours": "statestore, q=1, moves to the partition's replica holder", "quick": quick,
    }  # fmt: skip
    return out


def print_table(result: dict[str, Any]) -> None:
    header = ("strategy", "ours steady", "ours max", "max/steady", "Spark steady", "Spark max", "max/steady",
              "batches ours/Spark", "seconds ours/Spark", "bytes/move", "increment", "state/partition")  # fmt: skip
    rows = []
    for name, s in result["strategies"].items():
        rows.append((name, f"{s['ours_steady_ms']:.0f} ms", f"{s['ours_max_ms']} ms", f"{s['ours_max_over_steady']}",
                     f"{s['spark_steady_ms']:.0f} ms", f"{s['spark_max_ms']} ms", f"{s['spark_max_over_steady']}",
                     f"{s['duration_batches']}/{s['spark_duration_batches']}",
                     f"{s['ours_duration_seconds']}/{s['spark_duration_seconds']}", f"{s['bytes_per_move']}",
                     f"{s['increment_bytes_mean']}", f"{s['state_bytes_per_partition']}"))  # fmt: skip
    print_table_rows(header, rows)
    print(json.dumps(result["verdict"]))
    for provider, noise in result.get("untouched", {}).items():
        if noise.get("windows"):
            print(f"{provider}, untouched micro-batches: the longest of {noise['window']} over the median of the "
                  f"{STEADY_BATCHES} before is {noise['median_max_over_steady']} in the median window, above "
                  f"{TARGETS['batched_max_over_steady']} in {noise['share_above_target']:.0%} of {noise['windows']}")


def write_png(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(STRATEGIES), figsize=(5 * len(STRATEGIES), 4.2), sharey=True)
    for ax, (name, s) in zip(axes, result["strategies"].items(), strict=True):
        for provider, label, style in (("ours", "statestore (q=1, hand-over)", "o-"),
                                       ("spark", "Spark RocksDB (changelog)", "s--")):  # fmt: skip
            batches = s[f"{provider}_batches_ms"]
            series = batches["steady"] + batches["during"] + batches["after"]
            xs = list(range(-len(batches["steady"]), len(series) - len(batches["steady"])))
            ax.plot(xs, series, style, label=label, markersize=3)
            ax.axvspan(0, len(batches["during"]) - 0.5, alpha=0.07, color="C0" if provider == "ours" else "C1")
        ax.set_title(f"{name}: {result['workload']['moves_per_strategy']} of {PARTITIONS} partitions moved")
        ax.set_xlabel("micro-batch (0: first of the migration)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("micro-batch duration (ms)")
    axes[0].legend()
    fig.suptitle(f"migration under a steady aggregation, {result['workload']['keys']:,} keys, "
                 f"local-cluster[{EXECUTORS},1,1024]")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    return keyed_providers_main(
        argv, __doc__, (1_000_000, 5_000_000), PROVIDERS, run_one, report, write_png, print_table
    )


if __name__ == "__main__":
    sys.exit(main())
