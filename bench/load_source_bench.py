"""Benchmark: what one load of a partition costs from each source: its node's replica, a peer's, the checkpoint.

    python bench/load_source_bench.py [--quick] --out FILE.json

For each state size (quick: about 0.25 GB; full: also about 1 GB), one partition's history is written with
the engine to a checkpoint location on this machine's disk (versions of 100,000 keys with 1 KiB
incompressible values, a snapshot at the last but one version, one increment after it). Then the provider's
own Java code (LoadCheck, no Spark scheduler) loads the last version beside a real state node that holds:

- **replica**: a replica of it (a RocksDB checkpoint of it, hard links, then the last increment);
- **peer**: nothing, but another node holds a replica: streamed over gRPC on loopback, checked, then the
  last increment (`peerFetch=always`);
- **checkpoint**: nothing (`peerFetch=never`): the snapshot copied and checked, then the last increment.

It prints the load time of each, with ratios to the checkpoint location's, and writes the JSON
(`{"sizes": {"<state bytes>": {"replica_ms", "peer_ms", "checkpoint_ms", ...}}}`) and a PNG beside it. This
says when a peer load pays (the `peer_fetch` setting's `auto`): on one machine with a local checkpoint
location a peer's copy travels through the same disk plus a gRPC stream, so it cannot win; it wins when the
checkpoint location is a remote object store slower than the network between executors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")  # as importing statestore does, before grpc loads

from test_load_sources_harness import OPTIONS, Setup, load_rig  # noqa: E402
from test_node_harness import wait_until  # noqa: E402

import statestore  # noqa: E402,F401  (gRPC settings first)
from statestore import auth  # noqa: E402
from statestore.store import VersionedStore  # noqa: E402

GB = 1 << 30
VALUE_BYTES = 1024
KEYS_PER_VERSION = 100_000
SOURCES = ("replica", "peer", "checkpoint")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def write_history(rig: Setup, partition: int, size_bytes: int) -> int:
    """The partition's history in the checkpoint location: versions of KEYS_PER_VERSION fresh keys until it
    holds `size_bytes`, a snapshot at the last but one version, one more small version. Returns the last."""
    location = rig.location(partition)
    keys = max(KEYS_PER_VERSION, size_bytes // VALUE_BYTES)
    with VersionedStore.open(rig.root.parent / f"primary-{partition}", location.store_id, OPTIONS) as store:
        for start in range(0, keys, KEYS_PER_VERSION):
            for k in range(start, min(keys, start + KEYS_PER_VERSION)):
                store.put(k.to_bytes(8, "big"), os.urandom(VALUE_BYTES))
            location.commit(store)
        location.write_snapshot(store)
        for k in range(1000):
            store.put(k.to_bytes(8, "big"), os.urandom(VALUE_BYTES))
        location.commit(store)
        return store.version


def hand_replica(rig: Setup, partition: int, version: int) -> None:
    """Give node n a replica of the partition at `version` (as a provider's unloaded directory)."""
    copy = rig.location(partition).restore(rig.root.parent / f"copy-{partition}", version=version, options=OPTIONS)
    rig.hand_to_node(copy)


def measure(rig: Setup, size_bytes: int, base: int) -> dict[str, Any]:
    """Load the last version once from each source; each source gets a partition of its own."""
    partitions = {source: base + i for i, source in enumerate(SOURCES)}
    last = 0
    for source, partition in partitions.items():
        log(f"{size_bytes / GB:.2f} GB: writing the history of partition {partition} ({source})")
        last = write_history(rig, partition, size_bytes)
        if source != "checkpoint":
            hand_replica(rig, partition, last - 1)
            location = rig.location(partition)
            wait_until(lambda loc=location: holders(rig, loc) == ["n"], 30, "the controller to know the replica")
    result: dict[str, Any] = {}
    for source, partition in partitions.items():
        node, peer_fetch = {"replica": ("n", "never"), "peer": ("m", "always"), "checkpoint": ("m", "never")}[source]
        loaded = rig.load(partition, last, node=node, peer_fetch=peer_fetch)
        if loaded["source"] != source:
            raise RuntimeError(f"{source} load of partition {partition} came from {loaded}")
        result[f"{source}_ms"] = int(loaded["ms"])
        result[f"{source}_detail"] = loaded
        log(f"{size_bytes / GB:.2f} GB: {source}: {loaded['ms']} ms ({loaded})")
    checkpoint = result["checkpoint_ms"] or 1
    result["replica_vs_checkpoint"] = round(result["replica_ms"] / checkpoint, 4)
    result["peer_vs_checkpoint"] = round(result["peer_ms"] / checkpoint, 4)
    return result


def holders(rig: Setup, location: Any) -> list[str]:

    from statestore.rpc import common_pb2, control_pb2_grpc

    with auth.channel(rig.cluster.controller_address) as channel:
        reply = control_pb2_grpc.ControlStub(channel).Locate(
            common_pb2.StoreRef(store_id=location.store_id, checkpoint_dir=str(location.path)), timeout=5
        )
    return [h.node.node_id for h in reply.holders]


def write_png(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(s) / GB for s in result["sizes"]]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for source, style in zip(SOURCES, ("o-", "s--", "^:"), strict=True):
        ax.plot(sizes, [s[f"{source}_ms"] for s in result["sizes"].values()], style, label=source)
    ax.set_xlabel("state of the partition (GB)")
    ax.set_ylabel("load time (ms)")
    ax.set_title("one partition's load, by source (one machine, local disk)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="0.25 GB only (the full run adds 1 GB)")
    parser.add_argument("--out", required=True, type=Path, help="the JSON to write (a PNG is written beside it)")
    args = parser.parse_args(argv)
    sizes = [int(0.25 * GB)] if args.quick else [int(0.25 * GB), GB]
    result: dict[str, Any] = {"sizes": {}}
    with tempfile.TemporaryDirectory(prefix="load-source-bench-") as tmp, load_rig(Path(tmp)) as rig:
        for i, size in enumerate(sizes):
            result["sizes"][str(size)] = measure(rig, size, base=10 * i)
    result["workload"] = {"value_bytes": VALUE_BYTES, "keys_per_version": KEYS_PER_VERSION,
                          "checkpoint_location": "local disk", "peer": "gRPC on loopback"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    write_png(result, args.out.with_suffix(".png"))
    print("state    replica     peer        checkpoint  replica/ckpt  peer/ckpt")
    for size, s in result["sizes"].items():
        print(f"{int(size) / GB:.2f} GB  {s['replica_ms']:>6} ms  {s['peer_ms']:>6} ms  {s['checkpoint_ms']:>6} ms"
              f"  {s['replica_vs_checkpoint']:>12}  {s['peer_vs_checkpoint']:>9}")
    log(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
