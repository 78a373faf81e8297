"""Benchmark: an executor killed under Spark's own RocksDB provider, with and without our checkpoint file layer.

    python bench/own_provider_bench.py [--quick] --out FILE.json

The queries that must keep Spark's provider (transformWithState, Real-Time Mode, offline repartition, queries
already running on it) get our checkpoint file layer instead of our provider (`enable(spark_rocksdb=True)`): each
host keeps a copy of the state files its executors write and serves it to later loads there. This benchmark runs
`bench/failover_bench.py`'s workload and kill on Spark's RocksDB provider (changelog checkpointing), in one Spark
application per configuration on local-cluster[3,1,1024] with four state partitions:

1. load micro-batches of 100,000 new keys until the state holds the size (1,024-byte incompressible values);
2. steady micro-batches updating 20,000 random keys, their median duration;
3. kill -9 of the executor holding the most partitions, between batches, and at once the next batch;
4. the stall (that batch minus the steady median) and the restore time per lost partition (Spark's RocksDB
   store's `Loading`/`Loaded` log lines), what the loads read from local copies and from the checkpoint location
   (the layer's log lines), and the SST bytes Spark's file manager reports copying in;
5. every batch's output digest compared between the two configurations.

Checkpoint location: local disk only. The S3 half the issue asks for is not measured: Hadoop's s3a file system
(hadoop-aws and the AWS SDK bundle) is in no pyspark wheel and Maven Central is unreachable from this machine, so no
s3a: checkpoint can be written here; the JSON says so under "s3". On a local checkpoint the layer has no slow store
to avoid (its copies sit on the same disk), so the "local" figures show its cost and where the loads read from, not
a speed-up.

Prints a table, writes the JSON (`{"sizes": {"<bytes>": {"local": {"with_ms", "without_ms", "with_stall_ms",
"without_stall_ms", "bytes_read_checkpoint_with", "bytes_read_copies_with", "results_match", ...}, "s3": {...}}}}`)
and a PNG beside it.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import failover_bench as fb  # noqa: E402
from bench_outputs import write_outputs  # noqa: E402
from text_table import print_table_rows  # noqa: E402

GB = fb.GB
CONFIGS = {"with": "spark-files", "without": "spark"}
S3_BLOCKED = (
    "not run: Hadoop's s3a file system (hadoop-aws with the AWS SDK bundle) is in no pyspark wheel and Maven "
    "Central is unreachable here, so no s3a: checkpoint location can be written on this machine"
)


def _reads(run: fb.Run, key: str) -> int:
    return sum(int(k.restore_detail.get("reads", {}).get(key, 0)) for k in run.kills)


def report(runs: dict[tuple[str, int], fb.Run], sizes: list[int], quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": {}}
    for size in sizes:
        with_, without = runs[("with", size)], runs[("without", size)]
        local = {
            "with_ms": round(with_.restore_ms, 1),
            "without_ms": round(without.restore_ms, 1),
            "with_stall_ms": round(with_.stall_ms, 1),
            "without_stall_ms": round(without.stall_ms, 1),
            "restore_ratio": round(with_.restore_ms / without.restore_ms, 3) if without.restore_ms > 0 else None,
            "with_steady_median_ms": statistics.median(with_.steady_ms),
            "without_steady_median_ms": statistics.median(without.steady_ms),
            "bytes_read_checkpoint_with": _reads(with_, "checkpoint_bytes"),
            "bytes_read_checkpoint_sst_with": _reads(with_, "checkpoint_sst_bytes"),
            "bytes_read_copies_with": _reads(with_, "copy_bytes"),
            "spark_sst_copied_bytes_with": _reads(with_, "spark_sst_copied_bytes"),
            "spark_sst_copied_bytes_without": _reads(without, "spark_sst_copied_bytes"),
            "lost_partitions": sum(len(k.lost_partitions) for k in with_.kills),
            "results_match": with_.digests == without.digests,
            "with": fb.run_json(with_),
            "without": fb.run_json(without),
        }
        out["sizes"][str(size)] = {"local": local, "s3": {"status": S3_BLOCKED}, "keys": with_.keys}
    out["verdict"] = {
        "results_match": all(s["local"]["results_match"] for s in out["sizes"].values()),
        "no_checkpoint_sst_read_with": all(
            s["local"]["bytes_read_checkpoint_sst_with"] == 0 for s in out["sizes"].values()
        ),
        "s3_restore_ratio_target": 0.3,
        "s3_restore_ratio_met": None,
    }
    out["workload"] = {
        "master": f"local-cluster[{fb.EXECUTORS},1,1024]", "partitions": fb.PARTITIONS,
        "value_bytes": fb.VALUE_BYTES, "load_keys_per_batch": fb.LOAD_KEYS_PER_BATCH, "update_rows": fb.UPDATE_ROWS,
        "steady_batches": fb.STEADY_BATCHES, "provider": fb.SPARK_ROCKSDB + " (changelog checkpointing)",
        "with": "enable(spark_rocksdb=True): the checkpoint file layer, copies on each host",
        "checkpoint": "local disk", "quick": quick, "spark_conf": fb.EXTRA_CONF,
        "statistic": "median over the kills of each run (restore: mean over a kill's lost partitions)",
    }  # fmt: skip
    return out


def print_table(result: dict[str, Any]) -> None:
    header = ("state", "restore/lost part. with", "without", "ratio", "stall with", "without", "read ckpt with",
              "read copies with", "match")  # fmt: skip
    rows = []
    for size, s in result["sizes"].items():
        local = s["local"]
        rows.append((
            f"{int(size) / GB:.2f} GB", f"{local['with_ms']:.0f} ms", f"{local['without_ms']:.0f} ms",
            str(local["restore_ratio"]), f"{local['with_stall_ms']:.0f} ms", f"{local['without_stall_ms']:.0f} ms",
            f"{local['bytes_read_checkpoint_with'] / 1e6:.1f} MB", f"{local['bytes_read_copies_with'] / 1e6:.1f} MB",
            str(local["results_match"]),
        ))  # fmt: skip
    print_table_rows(header, rows)
    print(f"s3: {S3_BLOCKED}")


def write_png(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(s) / GB for s in result["sizes"]]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, suffix, title in ((axes[0], "ms", "restore time per lost partition"),
                              (axes[1], "stall_ms", "post-kill batch minus steady median")):  # fmt: skip
        for config, label, style in (("with", "Spark RocksDB + our file layer", "o-"),
                                     ("without", "Spark RocksDB alone", "s--")):  # fmt: skip
            ax.plot(sizes, [s["local"][f"{config}_{suffix}"] for s in result["sizes"].values()], style, label=label)
        ax.set_xlabel("state (GB)")
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Spark's provider, executor killed between batches, checkpoint on local disk")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="0.25 GB and 1 GB of state, one kill each")
    parser.add_argument("--out", required=True, type=Path, help="the JSON to write (a PNG is written beside it)")
    parser.add_argument("--sizes-gb", type=float, nargs="*", help="state sizes to run instead of the defaults")
    parser.add_argument("--kills", type=int, default=None, help="kills per run (default: 1 quick, 3 full)")
    parser.add_argument("--workdir", type=Path, default=None, help="where to put checkpoints (default: a temp dir)")
    parser.add_argument(
        "--min-deltas", type=int, default=None,
        help="Spark's spark.sql.streaming.stateStore.minDeltasForSnapshot for both configurations (default: Spark's, "
        "10): fewer changelogs to replay on a load, more snapshots to upload",
    )  # fmt: skip
    parser.add_argument("--one", nargs=3, metavar=("CONFIG", "BYTES", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.min_deltas is not None:
        fb.EXTRA_CONF["spark.sql.streaming.stateStore.minDeltasForSnapshot"] = str(args.min_deltas)
    if args.one:  # one configuration, in a process (and so a driver JVM and Spark builder) of its own
        config, size, result = args.one
        run = fb.run_one(CONFIGS[config], int(size), args.workdir, fb.LOAD_KEYS_PER_BATCH, 0.0, args.kills)
        Path(result).write_bytes(pickle.dumps(run))
        return 0
    sizes = [int(s * GB) for s in (args.sizes_gb or ([0.25, 1.0] if args.quick else [0.25, 1.0, 4.0]))]
    kills = args.kills or (1 if args.quick else 3)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="own-provider-bench-"))
    runs: dict[tuple[str, int], fb.Run] = {}
    for size in sizes:
        for config in CONFIGS:
            fb.log(f"=== Spark's provider {config} the file layer at {size / GB:.2f} GB of state")
            result = work / f"{config}-{size}.pickle"
            command = [sys.executable, __file__, "--one", config, str(size), str(result), "--kills", str(kills),
                       "--workdir", str(work), "--out", str(args.out)]  # fmt: skip
            if args.min_deltas is not None:
                command += ["--min-deltas", str(args.min_deltas)]
            subprocess.run(command, check=True)
            runs[(config, size)] = pickle.loads(result.read_bytes())
    write_outputs(report(runs, sizes, args.quick), args.out, write_png, print_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
