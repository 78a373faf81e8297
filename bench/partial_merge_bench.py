"""Benchmark: what partial-state merge saves when a batch starts before the last increment of its replica arrived.

    python bench/partial_merge_bench.py [--quick] --out FILE.json

The hand-over case of DESIGN.md section 4: a state node holds a replica of a partition at version v-1, and the
batch on version v loads it while increment v is still on its way. Here increment v is in the checkpoint
location and its read is held back by D ms (the provider's `last-increment` fault point, `delay`), standing
for the previous primary's increment in flight. The provider's own Java code (PartialMergeCheck, beside a real
state node, no Spark scheduler) then runs one batch and commits it, with partial merge on (the store is handed
out at v-1, the batch writes into an overlay, increment v is applied in the background) and off (the load waits
for increment v and applies it first). The history: versions 1..4 of K keys with 100-byte values, version u
putting the keys with i % 2 == u % 2, so increment v puts K/2 keys. Two workloads of W keys each:

- **blind**: W puts of fresh keys, no reads (a blind-write operator, e.g. an append-only sink of state);
- **rmw**: W gets then puts of existing keys k0, k1, ... (what most Spark operators do: aggregations read the
  key before writing it); k0 is one the increment touches, so the first read waits for the increment.

Each row also costs C microseconds of busy work, the task's own computation besides the state store (decoding
input, evaluating expressions): with C = 0 the batch is nothing but state writes, so the overlay can only move
them, not hide the wait; with C > 0 that computation overlaps the increment's wait.

Measured per run, from just before the load: the load time, the time to the first write returned
(time-to-first-write), and the batch time (load, W rows, commit). Medians over the repeats, the on/off ratio,
and a check that both paths commit the same increment bytes. Writes JSON and a PNG beside it, prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # as importing statestore does, before grpc loads

from test_partial_merge_harness import Outcome, PartialRig, Run, partial_rig  # noqa: E402

import statestore  # noqa: E402,F401  (gRPC settings first)

VERSIONS = 4
WORKLOADS = ("blind", "rmw")
MODES = ("on", "off")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def script(workload: str, writes: int, cpu_us: int) -> list[str]:
    return [f"cpu {cpu_us}", f"blind {writes} w" if workload == "blind" else f"rmw {writes} k"]


def figures(outcome: Outcome) -> dict[str, Any]:
    """One run's times in ms, from just before the load."""
    op = outcome.ops()[1]
    assert not op["result"].startswith("ERROR"), op
    first_us = int(op["result"].split("first=")[1])
    result: dict[str, Any] = {
        "load_ms": outcome.us("load", "end") / 1000,
        "first_write_ms": first_us / 1000,
        "batch_ms": outcome.us("commit", "end") / 1000,
        "partial": outcome.event("load")["partial"] == "true",
    }
    if outcome.has("pending"):
        pending = outcome.event("pending")
        result["increment_applied_ms"] = int(pending["applied"]) / 1000
        result["overlay_writes"] = int(pending["overlay"])
    return result


def measure(
    rig: PartialRig, keys: int, writes: int, cpus: list[int], delays: list[int], repeats: int
) -> dict[str, Any]:
    """Every (cpu, delay, workload, mode, repeat) run for a history of `keys` keys, in one JVM after a warm-up."""
    log(f"history of {keys} keys, {VERSIONS} versions")
    history = rig.history(f"k{keys}", "bulk", VERSIONS, keys)
    runs = [Run(f"k{keys}-warmup", rig.copy(history, f"k{keys}-warmup", VERSIONS - 1), VERSIONS, True,
                script("rmw", writes, 0), 100, dump=False)]
    cases = [(cpu, delay, workload) for cpu in cpus for delay in delays for workload in WORKLOADS]
    for cpu, delay, workload in cases:
        for rep in range(repeats):
            for mode in MODES:
                label = f"k{keys}-c{cpu}-d{delay}-{workload}-{mode}-{rep}"
                runs.append(Run(label, rig.copy(history, label, VERSIONS - 1), VERSIONS, mode == "on",
                                script(workload, writes, cpu), delay, dump=False))
    log(f"{len(runs)} batches")
    outcomes = rig.batches(runs, timeout=3600)
    result: dict[str, Any] = {}
    for cpu, delay, workload in cases:
        per_mode: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        identical = True
        for rep in range(repeats):
            pair = {mode: outcomes[f"k{keys}-c{cpu}-d{delay}-{workload}-{mode}-{rep}"] for mode in MODES}
            for mode in MODES:
                per_mode[mode].append(figures(pair[mode]))
            identical &= pair["on"].run.increment(VERSIONS + 1) == pair["off"].run.increment(VERSIONS + 1)
        entry: dict[str, Any] = {"identical_increments": identical}
        for mode in MODES:
            runs_of = per_mode[mode]
            assert all(r["partial"] == (mode == "on") for r in runs_of), runs_of
            entry[mode] = {
                name: statistics.median(r[name] for r in runs_of) for name in ("load_ms", "first_write_ms", "batch_ms")
            }
            entry[mode]["runs"] = runs_of
        for name in ("first_write_ms", "batch_ms"):
            entry[f"{name}_on_vs_off"] = round(entry["on"][name] / max(entry["off"][name], 1e-3), 3)
        entry["batch_ms_saved"] = round(entry["off"]["batch_ms"] - entry["on"]["batch_ms"], 1)
        result[f"{cpu}/{delay}/{workload}"] = entry
    return result


def write_png(result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = list(result["sizes"])[-1]  # the largest history
    entries = result["sizes"][size]
    cpus = sorted({int(k.split("/")[0]) for k in entries})
    panels = [(cpu, workload) for cpu in cpus for workload in WORKLOADS]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), sharey=True, squeeze=False)
    for ax, (cpu, workload) in zip(axes[0], panels, strict=True):
        mine = {int(k.split("/")[1]): v for k, v in entries.items() if k.startswith(f"{cpu}/") and k.endswith(workload)}
        delays = sorted(mine)
        for mode, color in (("on", "tab:blue"), ("off", "tab:orange")):
            ax.plot(delays, [mine[d][mode]["batch_ms"] for d in delays], "o-", color=color,
                    label=f"partial {mode}: batch")
            ax.plot(delays, [mine[d][mode]["first_write_ms"] for d in delays], "^:", color=color,
                    label=f"partial {mode}: first write")
        ax.set_title(f"{workload}, {cpu} us of task work a row", fontsize=9)
        ax.set_xlabel("last increment held back (ms)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"ms from the load's start ({int(size):,} keys)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle("partial-state merge: batch time with the last increment delayed (one machine)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one size, a delay of 500 ms, one repeat")
    parser.add_argument("--out", required=True, type=Path, help="the JSON to write (a PNG is written beside it)")
    args = parser.parse_args(argv)
    if args.quick:
        sizes, writes, cpus, delays, repeats = [20_000], 10_000, [0, 50], [500], 1
    else:
        sizes, writes, cpus, delays, repeats = [20_000, 200_000], 10_000, [0, 50], [0, 250, 1000, 2000], 3
    result: dict[str, Any] = {"sizes": {}}
    with tempfile.TemporaryDirectory(prefix="partial-merge-bench-") as tmp, partial_rig(Path(tmp)) as rig:
        for keys in sizes:
            result["sizes"][str(keys)] = measure(rig, keys, writes, cpus, delays, repeats)
    result["workload"] = {"versions": VERSIONS, "value_bytes": 100, "last_increment_keys": "keys / 2",
                          "rows_per_batch": writes, "cpu_us_per_row": cpus, "repeats": repeats,
                          "checkpoint_location": "local disk", "keys": "cpu_us/delay_ms/workload"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    png = args.out.with_suffix(".png")
    drew = write_png(result, png)
    print(f"{'keys':>8} {'work':>6} {'delay':>6} {'workload':>8} | {'first write on':>14} {'off':>8} |"
          f" {'batch on':>9} {'off':>8} {'on/off':>7} {'saved':>8} | same increment")
    for size, entries in result["sizes"].items():
        for key, e in entries.items():
            cpu, delay, workload = key.split("/")
            on, off = e["on"], e["off"]
            print(f"{int(size):>8} {cpu:>4}us {delay:>4}ms {workload:>8} | {on['first_write_ms']:>11.1f} ms"
                  f" {off['first_write_ms']:>5.0f} ms | {on['batch_ms']:>6.0f} ms {off['batch_ms']:>5.0f}"
                  f" ms {e['batch_ms_on_vs_off']:>7} {e['batch_ms_saved']:>5.0f} ms | {e['identical_increments']}")
    log(f"wrote {args.out}" + (f" and {png}" if drew else " (no PNG: matplotlib is not installed)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
