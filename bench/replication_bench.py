"""Benchmark: what replica groups cost a real streaming query, with replication factor q = 0, 1 and 2.

    python bench/replication_bench.py [--quick] [--rounds N] --out FILE.json

The same stateful aggregation (the workload of tests/test_replica_groups_spark*.py, bigger) runs on master
local-cluster[3,1,1024] once per q, each in its own Spark application (q is the controller's; each run gets
fresh local dirs, so fresh sidecar nodes). Measured per q: median micro-batch time (the first two batches
are warm-up and left out), the largest replica lag in versions seen in the controller's status (sampled
every 100 ms), whether every replica ends identical to the primary's state restored from the checkpoint
location, and the bytes on the wire between state nodes (TCP payload of every connection to a node's gRPC
port, both directions, read with `ss`) per commit and replica, against the increments' size. Writes
{"batch_ms_median": {"0", "1", "2"}, "max_replica_lag_versions", "replicas_identical",
"bytes_shipped_per_commit", "increment_bytes_per_commit", "per_q": {...}, "workload": {...}}, prints a
table with ratios to q=0, and writes a PNG next to the JSON. With `--rounds N` (default 2 for the full run)
every q runs N times, in alternating order (0,1,2 then 2,1,0), and each q's median is taken over all its
rounds' steady-state batches, so that drift in this shared machine's load cancels out of the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
# As importing statestore does, before grpc loads: gRPC's fork handlers break PySpark's gateway launch now and
# then (grpc/grpc#43055; statestore/__init__.py).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc  # noqa: E402
from test_replica_groups_spark_harness import (  # noqa: E402
    LagSampler,
    StreamingAggregation,
    assert_replicas_identical,
    controller_address,
    start_spark,
    status,
    stop_leftover_sidecars,
    wait_converged,
)

Q_VALUES = (0, 1, 2)
WARMUP_BATCHES = 2
TARGET_SLOWDOWN = 1.15
TARGET_LAG = 1
TARGET_BYTES_RATIO = 1.1


@dataclass(frozen=True)
class Workload:
    """`batches` micro-batches of `rows_per_batch` rows over `keys` distinct keys."""

    batches: int
    rows_per_batch: int
    keys: int


FULL = Workload(batches=24, rows_per_batch=60_000, keys=400_000)
QUICK = Workload(batches=12, rows_per_batch=20_000, keys=100_000)


class WireCounter:
    """TCP payload bytes of the connections to the state nodes' gRPC ports, sampled with `ss` until stopped.

    Each connection is counted once, on the node's (server) side: bytes received (increments shipped to
    it, pull requests) plus bytes sent (acks, pulled increments). Samples keep each connection's largest
    counters, so a connection that closes between samples keeps what it last showed.
    """

    _ADDRESSES = re.compile(r"(\S+):(\d+)\s+(\S+):(\d+)")

    def __init__(self, controller: str) -> None:
        self._controller = controller
        self._ports: set[int] = set()
        self._seen: dict[tuple[str, str], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        """Stop sampling (after a last sample); returns the bytes counted."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.sample()
        return sum(self._seen.values())

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.sample()

    def sample(self) -> None:
        """Read every established TCP connection once."""
        with contextlib.suppress(grpc.RpcError):  # the controller may be stopping: keep the ports known so far
            self._ports |= {int(n.node.address.rsplit(":", 1)[1]) for n in status(self._controller).nodes}
        text = subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True, text=True).stdout
        lines = text.splitlines()
        for i, line in enumerate(lines):
            match = None if line[:1].isspace() else self._ADDRESSES.search(line)
            if not match or int(match.group(2)) not in self._ports or i + 1 >= len(lines):
                continue
            info = lines[i + 1]
            received = re.search(r"bytes_received:(\d+)", info)
            sent = re.search(r"bytes_sent:(\d+)", info)
            total = (int(received.group(1)) if received else 0) + (int(sent.group(1)) if sent else 0)
            key = (f"{match.group(1)}:{match.group(2)}", f"{match.group(3)}:{match.group(4)}")
            self._seen[key] = max(self._seen.get(key, 0), total)


def _progress(job: StreamingAggregation, q: int, total: int, shown: int) -> int:
    durations = job.batch_durations_ms()
    for i in range(shown, len(durations)):
        tag = " (warm-up)" if i < WARMUP_BATCHES else ""
        print(f"  q={q} batch {i + 1:3d}/{total}: {durations[i]:6d} ms{tag}", flush=True)
    return len(durations)


def run_q(q: int, workload: Workload, work: Path, round_no: int = 1) -> dict[str, Any]:
    """One Spark application with replication factor `q` over the workload; returns its figures."""
    root = work / f"q{q}-round{round_no}"
    print(f"q={q}: starting local-cluster[3,1,1024] (round {round_no}) ...", flush=True)
    spark = start_spark(root, f"replication-bench-q{q}-round{round_no}", replication_factor=q)
    figures: dict[str, Any] = {}
    try:
        with contextlib.ExitStack() as running:
            job = StreamingAggregation(spark, root / "job", rows_per_batch=workload.rows_per_batch, keys=workload.keys)
            job.feed(workload.batches)
            running.callback(job.stop)
            if q:
                address = controller_address(spark)
                whole = running.enter_context(LagSampler(address))
                wire = WireCounter(address)
                wire.start()
            job.start()
            shown = 0
            steady: LagSampler | None = None
            deadline = time.monotonic() + 60 + 30 * workload.batches
            while job.processed() < workload.batches:
                shown = _progress(job, q, workload.batches, shown)
                if q and steady is None and job.processed() >= WARMUP_BATCHES:
                    steady = running.enter_context(LagSampler(address))
                if time.monotonic() > deadline:
                    raise RuntimeError(f"q={q}: the query did not finish in time")
                time.sleep(0.2)
            _progress(job, q, workload.batches, shown)
            durations = job.batch_durations_ms()
            figures["batch_ms"] = durations
            figures["batch_ms_median"] = statistics.median(durations[WARMUP_BATCHES:])
            increments = [p for d in job.store_dirs().values() for p in d.glob("*.increment")]
            figures["commits"] = len(increments)
            figures["increment_bytes"] = sum(p.stat().st_size for p in increments)
            figures["increment_bytes_per_commit"] = sum(p.stat().st_size for p in increments) / max(len(increments), 1)
            if q:
                try:
                    groups = wait_converged(address, job, q, 60)  # its error shows versions held
                    assert_replicas_identical(root, job, groups)
                    figures["replicas_identical"] = True
                except AssertionError as exc:
                    print(f"  q={q}: replicas NOT identical: {exc}", flush=True)
                    figures["replicas_identical"] = False
                steady = steady or whole
                figures["max_replica_lag_versions"] = steady.max_lag
                figures["max_replica_lag_versions_with_warmup"] = whole.max_lag
                figures["lag_samples"] = steady.samples
                figures["worst_lag"] = steady.worst or whole.worst
                wire_bytes = wire.stop()
                figures["wire_bytes"] = wire_bytes
                figures["bytes_shipped_per_commit"] = wire_bytes / max(len(increments) * q, 1)
    finally:
        spark.stop()
        left = stop_leftover_sidecars(root)
        if left:
            print(f"  q={q}: killed sidecars {left} that outlived their executors", flush=True)
    print(f"q={q}: median batch {figures['batch_ms_median']:.0f} ms", flush=True)
    return figures


def combine_rounds(rounds: list[dict[str, Any]], q: int) -> dict[str, Any]:
    """One q's figures over several rounds: the median of every round's steady-state batches together,
    the worst lag, identical only if every round's replicas were, bytes summed over all commits."""
    if len(rounds) == 1:
        return rounds[0]
    steady = [ms for r in rounds for ms in r["batch_ms"][WARMUP_BATCHES:]]
    commits = sum(r["commits"] for r in rounds)
    combined: dict[str, Any] = {
        "rounds": rounds,
        "batch_ms_median": statistics.median(steady),
        "batch_ms_median_per_round": [r["batch_ms_median"] for r in rounds],
        "commits": commits,
        "increment_bytes_per_commit": sum(r["increment_bytes"] for r in rounds) / max(commits, 1),
    }
    if q:
        combined["replicas_identical"] = all(r["replicas_identical"] for r in rounds)
        combined["max_replica_lag_versions"] = max(r["max_replica_lag_versions"] for r in rounds)
        combined["max_replica_lag_versions_with_warmup"] = max(
            r["max_replica_lag_versions_with_warmup"] for r in rounds
        )
        combined["worst_lag"] = max(rounds, key=lambda r: r["max_replica_lag_versions"])["worst_lag"]
        combined["wire_bytes"] = sum(r["wire_bytes"] for r in rounds)
        combined["bytes_shipped_per_commit"] = combined["wire_bytes"] / max(commits * q, 1)
    return combined


def summary(per_q: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The JSON figures required by the issue, from the per-q runs."""
    replicated = [per_q[q] for q in per_q if q]
    q1 = per_q.get(1, {})
    return {
        "batch_ms_median": {str(q): per_q[q]["batch_ms_median"] for q in per_q},
        "max_replica_lag_versions": max((r["max_replica_lag_versions"] for r in replicated), default=0),
        "replicas_identical": all(r["replicas_identical"] for r in replicated),
        "bytes_shipped_per_commit": q1.get("bytes_shipped_per_commit"),
        "increment_bytes_per_commit": q1.get("increment_bytes_per_commit"),
    }


def print_table(per_q: dict[int, dict[str, Any]]) -> None:
    """Median batch time with ratios to q=0, lag, bytes on the wire per increment byte, identical replicas."""
    base = per_q[0]["batch_ms_median"]
    print(
        f"\n{'q':>2s} {'batch ms':>9s} {'vs q=0':>7s} {'max lag':>8s} {'wire B/commit/replica':>22s} "
        f"{'increment B':>12s} {'ratio':>6s} {'identical':>10s}"
    )
    for q, r in per_q.items():
        wire = r.get("bytes_shipped_per_commit")
        inc = r["increment_bytes_per_commit"]
        print(
            f"{q:2d} {r['batch_ms_median']:9.0f} {r['batch_ms_median'] / base:6.2f}x "
            f"{r.get('max_replica_lag_versions', '-')!s:>8s} {f'{wire:.0f}' if wire else '-':>22s} {inc:12.0f} "
            f"{f'{wire / inc:.3f}x' if wire else '-':>6s} {r.get('replicas_identical', '-')!s:>10s}"
        )


def verdict(per_q: dict[int, dict[str, Any]]) -> list[str]:
    """One line per target: met or missed, with the figure."""
    lines = []
    base = per_q[0]["batch_ms_median"]
    if 1 in per_q:
        slowdown = per_q[1]["batch_ms_median"] / base
        lines.append(
            f"q=1 batch time {slowdown:.2f}x q=0 (target <= {TARGET_SLOWDOWN}x): "
            f"{'met' if slowdown <= TARGET_SLOWDOWN else 'MISSED'}"
        )
    for q, r in per_q.items():
        if q:
            lag = r["max_replica_lag_versions"]
            ratio = r["bytes_shipped_per_commit"] / r["increment_bytes_per_commit"]
            lines.append(
                f"q={q} max lag {lag} version(s) (target <= {TARGET_LAG}): {'met' if lag <= TARGET_LAG else 'MISSED'}"
            )
            lines.append(
                f"q={q} wire bytes {ratio:.3f}x increment bytes (target <= {TARGET_BYTES_RATIO}x): "
                f"{'met' if ratio <= TARGET_BYTES_RATIO else 'MISSED'}"
            )
    return lines


def write_png(per_q: dict[int, dict[str, Any]], path: Path, title: str) -> None:
    """Median batch time per q, and every batch's time per q."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bars, lines) = plt.subplots(1, 2, figsize=(12, 4))
    base = per_q[0]["batch_ms_median"]
    names = [f"q={q}" for q in per_q]
    medians = [per_q[q]["batch_ms_median"] for q in per_q]
    bars.bar(names, medians, color=["tab:gray", "tab:green", "tab:blue"][: len(names)])
    for i, m in enumerate(medians):
        bars.text(i, m, f"{m / base:.2f}x", ha="center", va="bottom")
    bars.set_title("median micro-batch time (ms)")
    for q, r in per_q.items():
        for round_no, run in enumerate(r.get("rounds", [r]), start=1):
            label = f"q={q}" + (f" round {round_no}" if "rounds" in r else "")
            lines.plot(range(1, len(run["batch_ms"]) + 1), run["batch_ms"], marker="o", label=label)
    lines.axvspan(0.5, WARMUP_BATCHES + 0.5, color="0.9", label="warm-up")
    lines.set_xlabel("micro-batch")
    lines.set_ylabel("ms")
    lines.legend()
    lines.set_title("every micro-batch")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small run (a few minutes)")
    parser.add_argument("--out", required=True, help="JSON file to write (a PNG is written next to it)")
    parser.add_argument(
        "--rounds",
        type=int,
        help="runs of every q, in alternating order (0,1,2 then 2,1,0) so that drift in the machine's load "
        "cancels out (default: 1 with --quick, 2 otherwise)",
    )
    args = parser.parse_args(argv)
    workload = QUICK if args.quick else FULL
    rounds = args.rounds or (1 if args.quick else 2)
    print(
        f"workload: {workload.batches} micro-batches x {workload.rows_per_batch} rows over {workload.keys} keys, "
        f"q = {', '.join(map(str, Q_VALUES))}, master local-cluster[3,1,1024]",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="replication-bench-"))
    runs: dict[int, list[dict[str, Any]]] = {q: [] for q in Q_VALUES}
    try:
        for round_no in range(1, rounds + 1):
            for q in Q_VALUES if round_no % 2 else tuple(reversed(Q_VALUES)):
                started = time.time()
                runs[q].append(run_q(q, workload, work, round_no))
                print(f"q={q}: round {round_no}/{rounds} done in {time.time() - started:.0f}s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per_q = {q: combine_rounds(runs[q], q) for q in Q_VALUES}
    print_table(per_q)
    lines = verdict(per_q)
    print("\n" + "\n".join(lines))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {
        **summary(per_q),
        "per_q": {str(q): r for q, r in per_q.items()},
        "workload": asdict(workload),
        "rounds": rounds,
        "targets": lines,
    }
    out.write_text(json.dumps(result, indent=2))
    png = out.with_suffix(".png")
    write_png(per_q, png, f"replica groups: {workload.batches} x {workload.rows_per_batch} rows, 3 executors")
    print(f"wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
