"""Scale benchmark: batch time, memory and the control plane's cost as state partitions grow, ours (q=1) against
Spark's RocksDB provider with changelog checkpointing, unbounded and bounded (`boundedMemoryUsage`).

    python bench/scale_bench.py [--quick] --out FILE.json

Points: 8, 64, 200 and 400 state partitions (the last: 200 shuffle partitions and two stateful operators, a
deduplication then an aggregation); quick: 8 and 400. Each provider at each point runs in a Spark application and a
driver process of its own on local-cluster[2,1,2048] (two one-core executors): a warm-up input first (six
full-size micro-batches, so that the JVMs' compilers are done with the query's code), then the measured input, one
parquet file per micro-batch, the same for every provider; every measured micro-batch's output is reduced to a
digest and compared between providers. The measured query's first micro-batch creates every store (and, for ours,
every replica): it is reported apart
(`first_batch_ms`), and the figures below are medians, and CPU and peaks sampled, over the micro-batches after it.

Ours runs with one replica per partition, its controller as a process of its own (`statestore controller`, so its
CPU is its own), its memory bounded by the defaults (`memory_budget_mb`, `node_memory_budget_mb`). Sampled from
/proc during those micro-batches: the peak resident memory of the largest executor JVM and, for ours, plus the
largest state node (an executor's provider and its node together), the controller's CPU and the nodes' CPU.

Writes {"points": [{"partitions", "ours_batch_ms", "spark_batch_ms", "spark_bounded_batch_ms", "ours_rss_mb",
"spark_rss_mb", "spark_bounded_rss_mb", "controller_cpu_s_per_batch", "node_cpu_ms_per_increment", "batch_ratio",
"memory_ratio_to_bounded", "results_match", ...}]}, a table and a PNG (batch time and memory against partitions).
With `--rounds N` each point runs N times (the providers' order reversed every other round); its figures are then
the rounds' medians (memory: the highest peak), and the rounds' own figures are kept under "rounds". `--points`
runs only some points. Targets: ours at most 0.7x of Spark's (changelog) batch time at every point, and our memory
per executor at most 1.5x Spark's bounded provider's.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # as importing statestore does, before grpc loads

from bench_outputs import log, write_outputs  # noqa: E402
from executor_logs import load_outcomes  # noqa: E402
from process_sampler import ProcessSampler  # noqa: E402
from provider_bench import Workload, write_input  # noqa: E402
from text_table import print_table_rows  # noqa: E402

from spark_provider.settings import SPARK_ROCKSDB_PROVIDER  # noqa: E402
from statestore.controller.simulated_cluster import (  # noqa: E402
    free_port,
    process_cpu_seconds,
    start_controller_process,
    wait_serving,
)

EXECUTORS = 2
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
BOUNDED = "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage"
PROVIDERS = ("ours", "spark", "spark_bounded")
FULL_POINTS = ((8, 1), (64, 1), (200, 1), (200, 2))  # (shuffle partitions, stateful operators)
QUICK_POINTS = ((8, 1), (200, 2))
FULL = Workload(batches=8, rows_per_batch=100_000, distinct_keys=400_000)
QUICK = Workload(batches=5, rows_per_batch=20_000, distinct_keys=60_000)
# Full-size warm-up micro-batches: with two half-size ones, every provider's micro-batches still fell over the
# seven measured at every point (at 8 partitions ours alone took about ten micro-batches to level off).
WARM_UP_BATCHES = 6
TARGETS = {"batch_ratio": 0.7, "memory_ratio_to_bounded": 1.5}


@dataclass
class ProviderRun:
    """One provider at one point: its measured micro-batches and what its processes used meanwhile."""

    batch_ms: list[int]
    digests: list[tuple[int, int, int]]
    usage: dict[str, Any]
    controller_cpu_s: float = 0.0
    first_batch_ms: int = 0  # the measured query's first micro-batch (it creates the stores), not in batch_ms
    loads: dict[str, int] = field(default_factory=dict)  # ours: executor_logs.load_outcomes over the application


# `--ours-setting`s, as a JSON object in the environment: each provider runs in a process of its own.
_OURS_SETTINGS_ENV = "SCALE_BENCH_OURS_SETTINGS"


def start_spark(provider: str, partitions: int, controller: str, secret: str) -> Any:
    """A local-cluster application for `provider`; ours with q=1 and the controller at `controller`."""
    from pyspark.sql import SparkSession

    import spark_provider

    builder = (
        SparkSession.builder.master(f"local-cluster[{EXECUTORS},1,2048]")
        .appName(f"scale-bench-{provider}-{partitions}")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.executor.memory", "2g")
        # As provider_bench: with one-core executors, Spark's 3-s locality wait idles a core whenever the executor a
        # stateful task prefers is busy; every provider runs its tasks wherever a core is free.
        .config("spark.locality.wait", "0")
    )
    if provider == "ours":
        extra = json.loads(os.environ.get(_OURS_SETTINGS_ENV, "{}"))
        builder = spark_provider.enable(
            builder, replication_factor=1, controller=controller, secret=secret, **extra
        )
    else:
        builder = (
            builder.config("spark.sql.streaming.stateStore.providerClass", SPARK_ROCKSDB_PROVIDER)
            .config(CHANGELOG, "true")
            .config(BOUNDED, str(provider == "spark_bounded").lower())
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_query(
    spark: Any,
    input_dir: Path,
    checkpoint: Path,
    operators: int,
    batches: int,
    after_first_batch: Callable[[], None] = lambda: None,
) -> tuple[list, list]:
    """The query over `input_dir` to its end; (each micro-batch's duration in ms, each one's output digest).
    `after_first_batch` runs once the first micro-batch's stateful work is done (its output digested)."""
    from pyspark.sql import functions as F

    digests: list[tuple[int, int, int]] = []

    def digest(df: Any, batch_id: int) -> None:
        row = df.agg(F.count("*").alias("n"), F.bit_xor(F.xxhash64("k", "s", "c")).alias("h")).collect()[0]
        digests.append((batch_id, int(row["n"]), int(row["h"] or 0)))
        if len(digests) == 1:
            after_first_batch()

    stream = spark.readStream.schema("k long, v long").option("maxFilesPerTrigger", 1).parquet(str(input_dir))
    if operators == 2:
        stream = stream.dropDuplicates(["k", "v"])
    query = (
        stream.groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("c"))
        .writeStream.outputMode("update").foreachBatch(digest)
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the query failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    if len(progress) != batches:
        raise RuntimeError(f"{len(progress)} micro-batches with input, expected {batches}")
    return [p["durationMs"]["triggerExecution"] for p in progress], sorted(digests)


def run_provider(provider: str, partitions: int, operators: int, work: Path, workload: Workload) -> ProviderRun:
    """One provider at one point, in an application of its own (and, for ours, a controller process of its own)."""
    secret = secrets.token_hex(16)
    controller = None
    address = ""
    if provider == "ours":
        port = free_port()
        os.environ["STATESTORE_SECRET"] = secret
        controller = start_controller_process(port, 1, log_path=work / f"controller-{partitions}-{operators}.log")
        address = f"127.0.0.1:{port}"
        from statestore import auth

        auth.remember(address, secret)
        wait_serving(address)
    spark = start_spark(provider, partitions, address, secret)
    try:
        checkpoints = work / f"checkpoints-{provider}-{partitions}-{operators}"
        shutil.rmtree(checkpoints, ignore_errors=True)
        run_query(spark, work / "warmup", checkpoints / "warmup", operators, WARM_UP_BATCHES)
        sampler = ProcessSampler()
        controller_before = [0.0]

        def start_sampling() -> None:
            # From the end of the measured query's first micro-batch: it creates every store (and ours every
            # replica), which the steady micro-batches measured here do not.
            sampler.start()
            controller_before[0] = process_cpu_seconds(controller.pid) if controller else 0.0

        batch_ms, digests = run_query(
            spark, work / "input", checkpoints / "measured", operators, workload.batches, start_sampling
        )
        controller_cpu = process_cpu_seconds(controller.pid) - controller_before[0] if controller else 0.0
        usage = sampler.stop().to_json()
        loads = load_outcomes(spark) if provider == "ours" else {}
        shutil.rmtree(checkpoints, ignore_errors=True)
    finally:
        spark.stop()
        if controller is not None:
            controller.terminate()
            controller.wait(timeout=30)
    return ProviderRun(batch_ms[1:], digests, usage, controller_cpu, first_batch_ms=batch_ms[0], loads=loads)


def run_isolated(provider: str, partitions: int, operators: int, work: Path, workload: Workload) -> ProviderRun:
    """`run_provider` in a driver process of its own. PySpark starts the driver's JVM with the first application's
    confs as its system properties, and every later SparkConf in that JVM loads them: in one driver process, Spark's
    providers ran with our plugin, its state nodes and our query listener from ours' application before them."""
    job = work / f"{provider}-{partitions}-{operators}.job.json"
    result = job.with_suffix(".pkl")
    result.unlink(missing_ok=True)
    job.write_text(json.dumps({"run": [provider, partitions, operators, str(work)], "workload": workload.__dict__,
                               "result": str(result)}))  # fmt: skip
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--isolated-run", str(job)], check=True)
    return pickle.loads(result.read_bytes())  # written by this script's own `_isolated_run`, just now


def _isolated_run(job_file: Path) -> int:
    """The child side of `run_isolated`."""
    job = json.loads(job_file.read_text())
    provider, partitions, operators, work = job["run"]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    run = run_provider(provider, partitions, operators, Path(work), Workload(**job["workload"]))
    Path(job["result"]).write_bytes(pickle.dumps(run))
    return 0


def point_json(partitions: int, operators: int, runs: dict[str, ProviderRun], batches: int) -> dict[str, Any]:
    """One point's figures: medians over the measured micro-batches, peaks over the measured input."""
    ours, spark, bounded = runs["ours"], runs["spark"], runs["spark_bounded"]

    def executor_mb(run: ProviderRun, with_node: bool) -> float:
        peak = run.usage["peak_process_mb"]
        return round(peak.get("executor", 0.0) + (peak.get("node", 0.0) if with_node else 0.0), 1)

    state_partitions = partitions * operators
    ours_ms = statistics.median(ours.batch_ms)
    spark_ms = statistics.median(spark.batch_ms)
    return {
        "partitions": state_partitions,
        "shuffle_partitions": partitions,
        "operators": operators,
        "ours_batch_ms": ours_ms,
        "spark_batch_ms": spark_ms,
        "spark_bounded_batch_ms": statistics.median(bounded.batch_ms),
        "ours_rss_mb": executor_mb(ours, True),
        "ours_executor_rss_mb": executor_mb(ours, False),
        "ours_node_rss_mb": round(ours.usage["peak_process_mb"].get("node", 0.0), 1),
        "spark_rss_mb": executor_mb(spark, False),
        "spark_bounded_rss_mb": executor_mb(bounded, False),
        # The most files one of our state nodes had open at a sample (issue 30: under 1,024 at 400).
        "ours_node_open_files_peak": ours.usage.get("peak_open_files", {}).get("node", 0),
        "controller_cpu_s_per_batch": round(ours.controller_cpu_s / batches, 4),
        "node_cpu_ms_per_increment": round(
            ours.usage["cpu_s"].get("node", 0.0) * 1000 / (batches * state_partitions), 3
        ),
        "cpu_s": {name: run.usage["cpu_s_total"] for name, run in runs.items()},
        "first_batch_ms": {name: run.first_batch_ms for name, run in runs.items()},
        # Ours, both queries of the application: loads by source, and those that waited out materialize_timeout_ms.
        "ours_loads": ours.loads,
        "materialize_timeouts": ours.loads.get("materialize_timeouts", 0),
        "batch_ratio": round(ours_ms / spark_ms, 3),
        "memory_ratio_to_bounded": round(executor_mb(ours, True) / max(executor_mb(bounded, False), 1.0), 3),
        "results_match": ours.digests == spark.digests == bounded.digests,
        "batch_ms_per_batch": {name: run.batch_ms for name, run in runs.items()},
        "usage": {name: run.usage for name, run in runs.items()},
    }


# A point's figures over several rounds: times are the rounds' medians, memory the highest peak of any round.
_MEDIAN_OVER_ROUNDS = (
    "ours_batch_ms",
    "spark_batch_ms",
    "spark_bounded_batch_ms",
    "controller_cpu_s_per_batch",
    "node_cpu_ms_per_increment",
    "batch_ratio",
)
_HIGHEST_OVER_ROUNDS = (
    "ours_rss_mb",
    "ours_executor_rss_mb",
    "ours_node_rss_mb",
    "spark_rss_mb",
    "spark_bounded_rss_mb",
    "memory_ratio_to_bounded",
    "ours_node_open_files_peak",
)


def combine_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One point's figures from its rounds (each `point_json`'s): the median of each time and ratio over the rounds,
    the highest of each memory peak, results matching only if they matched in every round, materialize timeouts
    summed; the rounds themselves under "rounds". A single round is returned as it is."""
    if len(rounds) == 1:
        return rounds[0]
    combined = {key: value for key, value in rounds[0].items() if key not in ("batch_ms_per_batch", "usage")}
    for key in _MEDIAN_OVER_ROUNDS:
        combined[key] = round(statistics.median(r[key] for r in rounds), 4)
    for key in _HIGHEST_OVER_ROUNDS:
        combined[key] = max(r[key] for r in rounds)
    combined["results_match"] = all(r["results_match"] for r in rounds)
    combined["materialize_timeouts"] = sum(r["materialize_timeouts"] for r in rounds)
    combined["rounds"] = rounds
    return combined


def print_table(result: dict[str, Any]) -> None:
    """One row per point, with the ratios to the targets."""
    rows = [
        [
            f"{p['partitions']}" + (f" ({p['operators']} ops)" if p["operators"] > 1 else ""),
            f"{p['ours_batch_ms']:.0f}",
            f"{p['spark_batch_ms']:.0f}",
            f"{p['spark_bounded_batch_ms']:.0f}",
            f"{p['batch_ratio']:.2f}x",
            f"{p['ours_rss_mb']:.0f} ({p['ours_executor_rss_mb']:.0f}+{p['ours_node_rss_mb']:.0f})",
            f"{p['spark_rss_mb']:.0f}",
            f"{p['spark_bounded_rss_mb']:.0f}",
            f"{p['memory_ratio_to_bounded']:.2f}x",
            f"{p['controller_cpu_s_per_batch'] * 1000:.0f}",
            f"{p['node_cpu_ms_per_increment']:.2f}",
            str(p.get("ours_node_open_files_peak", "-")),
            str(p["results_match"]),
            " ".join(f"{r['batch_ratio']:.2f}" for r in p.get("rounds", [p])),
        ]
        for p in result["points"]
    ]
    print_table_rows(
        [
            "state partitions",
            "ours ms",
            "spark ms",
            "bounded ms",
            "ratio (<=0.7)",
            "ours MiB (exec+node)",
            "spark MiB",
            "bounded MiB",
            "ratio (<=1.5)",
            "controller ms/batch",
            "node ms/increment",
            "node files (<1024)",
            "match",
            "ratio per round",
        ],
        rows,
    )


def write_png(result: dict[str, Any], path: Path) -> None:
    """Batch time and peak memory per executor against state partitions, ours and Spark's two."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = result["points"]
    x = [p["partitions"] for p in points]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    panels = (("batch_ms", "median micro-batch (ms)", "ours (q=1)"),
              ("rss_mb", "peak resident memory per executor (MiB)", "ours: executor + its node"))
    for ax, (figure, ylabel, ours) in zip(axes, panels, strict=True):
        for provider, label, style in (
            ("ours", ours, "o-"),
            ("spark", "Spark RocksDB, changelog", "s--"),
            ("spark_bounded", "Spark RocksDB, changelog, bounded", "^:"),
        ):
            ax.plot(x, [p[f"{provider}_{figure}"] for p in points], style, label=label)
        ax.set(xscale="log", xlabel="state partitions", ylabel=ylabel)
        ax.legend()
    fig.suptitle(f"keyed aggregation on local-cluster[{EXECUTORS},1,2048]; the last point: two stateful operators")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--isolated-run"]:
        return _isolated_run(Path(argv[1]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="8 and 400 state partitions, a small input")
    parser.add_argument("--out", required=True, type=Path, help="the JSON to write (a PNG is written beside it)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run each point this many times, the providers' order reversed every other round, and report the "
        "rounds' medians (single runs at 400 partitions differ by more than the target's margin)",
    )
    parser.add_argument(
        "--points",
        nargs="+",
        type=int,
        metavar="STATE_PARTITIONS",
        help="run only these points of the chosen set, by state partitions (for example 400: the two-operator point)",
    )
    parser.add_argument(
        "--ours-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting of our provider (a keyword of spark_provider.enable, e.g. node_max_open_replicas=0), "
        "to measure what it costs; repeatable",
    )
    args = parser.parse_args(argv)
    settings = {}
    for item in args.ours_setting:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--ours-setting: {item!r} is not NAME=VALUE")
        settings[name] = value
    os.environ[_OURS_SETTINGS_ENV] = json.dumps(settings)
    if args.rounds < 1:
        parser.error(f"--rounds: {args.rounds} is not a number of rounds; give 1 or more")
    chosen = QUICK_POINTS if args.quick else FULL_POINTS
    if args.points:
        known = {partitions * operators for partitions, operators in chosen}
        unknown = sorted(set(args.points) - known)
        if unknown:
            parser.error(f"--points: no point of {unknown} in this run; it has {sorted(known)}")
        chosen = tuple(point for point in chosen if point[0] * point[1] in args.points)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    workload = QUICK if args.quick else FULL
    work = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    points = []
    try:
        write_input(work / "input", workload)
        write_input(
            work / "warmup", Workload(WARM_UP_BATCHES, workload.rows_per_batch, workload.distinct_keys // 2)
        )
        for partitions, operators in chosen:
            rounds = []
            for round_ in range(args.rounds):
                runs = {}
                # Every other round in the reverse order: on two cores, what ran just before can weigh on a run.
                for provider in PROVIDERS if round_ % 2 == 0 else tuple(reversed(PROVIDERS)):
                    started = time.monotonic()
                    log(f"=== {partitions * operators} state partitions ({operators} operator(s)): {provider}"
                        f", round {round_ + 1} of {args.rounds}")
                    runs[provider] = run_isolated(provider, partitions, operators, work, workload)
                    log(f"  median batch {statistics.median(runs[provider].batch_ms):.0f} ms, "
                        f"{time.monotonic() - started:.0f} s in all")
                rounds.append(point_json(partitions, operators, runs, workload.batches - 1))
                log(f"  round {round_ + 1}: batch ratio {rounds[-1]['batch_ratio']:.2f}x")
            points.append(combine_rounds(rounds))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "points": points,
        "targets": TARGETS,
        "met": {
            "batch_ratio": all(p["batch_ratio"] <= TARGETS["batch_ratio"] for p in points),
            "memory_ratio_to_bounded": all(
                p["memory_ratio_to_bounded"] <= TARGETS["memory_ratio_to_bounded"] for p in points
            ),
            "results_match": all(p["results_match"] for p in points),
            "no_materialize_timeouts": all(p["materialize_timeouts"] == 0 for p in points),
        },
        "workload": {**workload.__dict__, "executors": EXECUTORS, "quick": args.quick, "points": args.points,
                     "rounds": args.rounds},
    }
    write_outputs(result, args.out, write_png, print_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
