"""Engine benchmark: increment size against a full snapshot, apply rate, and restore time.

Loads a store partition with N keys, commits versions that each change 1% of them, and measures:
- increment_bytes (mean per version) against snapshot_bytes (a full snapshot of the same store);
- apply_records_per_s: a replica decoding, verifying and applying those increments, against
  rocksdict_batch_records_per_s: a plain rocksdict WriteBatch loop writing the same records into a copy
  of the same database, in the same run, interleaved;
- restore_s: restoring the latest version from the checkpoint location (snapshot + increments).

    python bench/engine_bench.py [--quick] --out FILE.json      (writes FILE.json and FILE.png)
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rocksdict import WriteBatch

from statestore import CheckpointLocation, VersionedStore
from statestore.increment import Op

STORE_ID = "0/0/default"
VALUE_BYTES = 100


def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def key_of(i: int) -> bytes:
    return b"user-%012d" % i


def load(store: VersionedStore, location: CheckpointLocation, keys: int, rng: random.Random) -> None:
    """Write `keys` keys in commits of at most 100,000."""
    chunk = 100_000
    for start in range(0, keys, chunk):
        for i in range(start, min(keys, start + chunk)):
            store.put(key_of(i), rng.randbytes(VALUE_BYTES))
        location.commit(store)
        progress(f"loaded {min(keys, start + chunk):,}/{keys:,} keys")


def change_one_percent(store: VersionedStore, keys: int, rng: random.Random) -> None:
    """Update 90%, delete 5% and insert 5% of a 1% sample of the keys."""
    for _ in range(keys // 100):
        roll = rng.random()
        if roll < 0.90:
            store.put(key_of(rng.randrange(keys)), rng.randbytes(VALUE_BYTES))
        elif roll < 0.95:
            store.delete(key_of(rng.randrange(keys)))
        else:
            store.put(key_of(keys + rng.randrange(keys)), rng.randbytes(VALUE_BYTES))


def plain_rocksdict_apply(store: VersionedStore, increments: list) -> float:
    """Write the increments' records with a bare WriteBatch loop; returns seconds."""
    db = store._db  # the baseline writes the same database directly, without the engine
    started = time.perf_counter()
    for increment in increments:
        batch = WriteBatch(raw_mode=True)
        for op, key, value in zip(increment.ops, increment.keys, increment.values, strict=True):
            if op == Op.PUT:
                batch.put(key, value)
            else:
                batch.delete(key)
        db.write(batch)
    return time.perf_counter() - started


def engine_apply(store: VersionedStore, location: CheckpointLocation, versions: range) -> float:
    """Read, verify and apply increment files with the engine; returns seconds."""
    started = time.perf_counter()
    for version in versions:
        store.apply(location.read_increment(version))
    return time.perf_counter() - started


def run(keys: int, versions: int, rounds: int, workdir: Path) -> dict:
    rng = random.Random(42)
    location = CheckpointLocation(workdir / "checkpoint", STORE_ID)
    primary = VersionedStore.open(workdir / "primary", STORE_ID)
    load(primary, location, keys, rng)
    base_version = primary.version
    snapshot = location.write_snapshot(primary)
    progress(f"snapshot of version {base_version}: {snapshot.total_bytes:,} bytes")

    increment_sizes = []
    records = 0
    for _ in range(versions):
        change_one_percent(primary, keys, rng)
        increment = location.commit(primary)
        increment_sizes.append(location.increment_path(increment.version).stat().st_size)
        records += increment.record_count
    primary.close()
    progress(f"committed {versions} versions of 1% changes ({records:,} records)")
    changed = range(base_version + 1, base_version + versions + 1)
    increments = [location.read_increment(v) for v in changed]

    ours, plain = [], []
    for round_ in range(-1, rounds):  # round -1 warms caches up and is not counted
        for name in (("engine", "plain") if round_ % 2 == 0 else ("plain", "engine")):
            replica = location.restore(workdir / f"replica-{name}", base_version)
            if name == "engine":
                ours.append(engine_apply(replica, location, changed))
            else:
                plain.append(plain_rocksdict_apply(replica, increments))
            replica.close()
        if round_ < 0:
            ours.clear()
            plain.clear()
            continue
        progress(f"apply round {round_ + 1}/{rounds}: engine {ours[-1]:.3f}s, plain rocksdict {plain[-1]:.3f}s")

    restore_times = []
    for _ in range(rounds):
        started = time.perf_counter()
        location.restore(workdir / "restored", location.latest_version()).close()
        restore_times.append(time.perf_counter() - started)
    progress(f"restore of version {location.latest_version()}: median {statistics.median(restore_times):.3f}s")

    increment_bytes = statistics.mean(increment_sizes)
    apply_rate = records / statistics.median(ours)
    plain_rate = records / statistics.median(plain)
    return {
        "keys": keys,
        "versions": versions,
        "records_per_increment": records / versions,
        "increment_bytes": increment_bytes,
        "snapshot_bytes": snapshot.total_bytes,
        "delta_bytes_ratio": increment_bytes / snapshot.total_bytes,
        "apply_records_per_s": apply_rate,
        "rocksdict_batch_records_per_s": plain_rate,
        # Paired per round (both measured back to back) so that load from other processes cancels out.
        "apply_vs_rocksdict_ratio": statistics.median(p / o for o, p in zip(ours, plain, strict=True)),
        "restore_s": statistics.median(restore_times),
        "restore_increments": versions,
    }


def print_table(figures: dict) -> None:
    rows = [
        ("keys", f"{figures['keys']:,}"),
        ("records per increment (1% of keys)", f"{figures['records_per_increment']:,.0f}"),
        ("increment bytes (mean)", f"{figures['increment_bytes']:,.0f}"),
        ("full snapshot bytes", f"{figures['snapshot_bytes']:,}"),
        ("delta_bytes_ratio (increment / snapshot)", f"{figures['delta_bytes_ratio']:.4f}"),
        ("engine apply, records/s", f"{figures['apply_records_per_s']:,.0f}"),
        ("plain rocksdict WriteBatch loop, records/s", f"{figures['rocksdict_batch_records_per_s']:,.0f}"),
        ("engine / plain rocksdict", f"{figures['apply_vs_rocksdict_ratio']:.2f}x"),
        (f"restore_s (snapshot + {figures['restore_increments']} increments)", f"{figures['restore_s']:.3f}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>14}")


def plot(figures: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (sizes, rates) = plt.subplots(1, 2, figsize=(10, 4))
    sizes.bar(["increment (1% changed)", "full snapshot"], [figures["increment_bytes"], figures["snapshot_bytes"]])
    sizes.set_yscale("log")
    sizes.set_ylabel("bytes (log scale)")
    sizes.set_title(f"delta_bytes_ratio = {figures['delta_bytes_ratio']:.4f}")
    rates.bar(
        ["engine apply\n(decode+verify+write)", "plain rocksdict\nWriteBatch loop"],
        [figures["apply_records_per_s"], figures["rocksdict_batch_records_per_s"]],
        color=["tab:green", "tab:gray"],
    )
    rates.set_ylabel("records / s")
    rates.set_title(f"apply: {figures['apply_vs_rocksdict_ratio']:.2f}x of plain rocksdict")
    fig.suptitle(f"engine_bench: {figures['keys']:,} keys")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100,000 keys instead of 1,000,000")
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write (a PNG is written beside it)")
    args = parser.parse_args(argv)
    keys, versions, rounds = (100_000, 20, 7) if args.quick else (1_000_000, 20, 7)
    workdir = Path(tempfile.mkdtemp(prefix="engine-bench-"))
    try:
        figures = run(keys, versions, rounds, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print_table(figures)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    plot(figures, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
