"""Controller benchmark: what the controller costs as task partitions grow, driven by simulated nodes over gRPC.

    python bench/controller_bench.py [--quick] --out FILE.json

Each size runs `statestore controller` as a process of its own and drives it with simulated state nodes
(`statestore.controller.simulated_cluster`: each heartbeats as a real node does, replication is instantaneous),
q=1: how long placing every partition takes, the controller's CPU per heartbeat whose reports did not change and
per heartbeat right after every partition committed, one status call, and the re-plans after a node stops
heartbeating (its roles placed elsewhere) and after its primaries fail over to their replica holders. CPU is the
controller process's own, from /proc. Sizes: 200 partitions over 2 nodes (Spark's default partition count on two
executors), 1,000 over 10, and in the full run 10,000 over 50.

Writes {"points": [{"partitions", "nodes", "place_all_seconds", "heartbeat_cpu_ms_unchanged",
"heartbeat_cpu_ms_new_versions", "status_seconds", "loss_replan_seconds", "loss_replan_groups", ...}]}, a table and
a PNG beside the JSON.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_outputs import log, write_outputs  # noqa: E402
from text_table import print_table_rows  # noqa: E402

from statestore.controller.simulated_cluster import measure_controller  # noqa: E402

QUICK = ((2, 200), (10, 1_000))
FULL = ((2, 200), (10, 1_000), (50, 10_000))


def print_table(result: dict) -> None:
    """One row per size."""
    rows = [
        [
            f"{p['partitions']:,}",
            str(p["nodes"]),
            f"{p['place_all_seconds']:.2f}",
            f"{p['heartbeat_cpu_ms_unchanged']:.2f}",
            f"{p['heartbeat_cpu_ms_new_versions']:.2f}",
            f"{p['status_seconds'] * 1000:.0f}",
            f"{p['loss_replan_seconds'] * 1000:.0f} ({p['loss_replan_groups']})",
            f"{p['failover_replan_seconds'] * 1000:.0f} ({p['failover_replan_groups']})",
        ]
        for p in result["points"]
    ]
    print_table_rows(
        [
            "partitions",
            "nodes",
            "place all s",
            "heartbeat ms CPU, unchanged",
            "with new versions",
            "status ms",
            "loss re-plan ms (groups)",
            "failover re-plan ms (groups)",
        ],
        rows,
    )


def write_png(result: dict, path: Path) -> None:
    """Heartbeat CPU and re-plan times against task partitions (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = result["points"]
    x = [p["partitions"] for p in points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(x, [p["heartbeat_cpu_ms_unchanged"] for p in points], "o-", label="reports unchanged")
    left.plot(x, [p["heartbeat_cpu_ms_new_versions"] for p in points], "s-", label="new versions")
    left.axhline(1.0, color="gray", linestyle=":", label="1 ms")
    left.set(xscale="log", xlabel="task partitions", ylabel="controller CPU per heartbeat (ms)")
    left.legend()
    right.plot(x, [p["loss_replan_seconds"] for p in points], "o-", label="re-plan after a node's loss")
    right.plot(x, [p["status_seconds"] for p in points], "s-", label="status call")
    right.plot(x, [p["place_all_seconds"] for p in points], "^-", label="placing every partition")
    right.axhline(1.0, color="gray", linestyle=":", label="1 s")
    right.set(xscale="log", yscale="log", xlabel="task partitions", ylabel="seconds")
    right.legend()
    fig.suptitle("controller driven by simulated nodes over gRPC, q=1")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 and 1,000 partitions only (the full run adds 10,000)")
    parser.add_argument("--out", required=True, type=Path, help="the JSON to write (a PNG is written beside it)")
    args = parser.parse_args(argv)
    logs = Path(tempfile.mkdtemp(prefix="controller-bench-"))
    points = []
    for nodes, partitions in QUICK if args.quick else FULL:
        log(f"=== {partitions:,} task partitions over {nodes} simulated nodes (controller log in {logs})")
        # At least 400 heartbeats per figure: the controller's CPU is read in clock ticks of 10 ms.
        rounds = max(8, 400 // nodes)
        measured = measure_controller(
            nodes, partitions, logs / f"controller-{partitions}.log", rounds=rounds, progress=log
        )
        points.append(measured.to_json())
    write_outputs({"points": points}, args.out, write_png, print_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
