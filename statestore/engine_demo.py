"""`statestore engine-demo`: one store partition through commits, snapshots, retention and restore."""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from statestore.checkpoint_location import CheckpointLocation
from statestore.store import VersionedStore

STORE_ID = "0/0/default"


def run_engine_demo(workdir: Path, keys: int = 20_000, versions: int = 12, seed: int = 7) -> bool:
    """Run a word-count-like state through the engine, checking every restore against a plain dict.

    Returns whether every restored version matched.
    """
    rng = random.Random(seed)
    location = CheckpointLocation(workdir / "checkpoint", STORE_ID, compress=True)
    store = VersionedStore.open(workdir / "primary", STORE_ID)
    model: dict[bytes, bytes] = {}
    history: dict[int, dict[bytes, bytes]] = {0: {}}
    print(f"store {STORE_ID} in {workdir}")
    print(f"{'version':>7} {'puts':>6} {'deletes':>7} {'keys':>7} {'increment bytes':>15} {'snapshot bytes':>14}")
    for version in range(1, versions + 1):
        changes = keys if version == 1 else keys // 100
        puts = deletes = 0
        for _ in range(changes):
            key = b"word-%06d" % rng.randrange(keys)
            if version > 1 and rng.random() < 0.1:
                store.delete(key)
                model.pop(key, None)
                deletes += 1
            else:
                count = int(model.get(key, b"0")) + 1
                store.put(key, b"%d" % count)
                model[key] = b"%d" % count
                puts += 1
        location.commit(store)
        history[version] = dict(model)
        increment_bytes = location.increment_path(version).stat().st_size
        snapshot_bytes = location.write_snapshot(store).total_bytes if version % 5 == 0 else 0
        print(
            f"{version:>7} {puts:>6} {deletes:>7} {store.count():>7} {increment_bytes:>15} {snapshot_bytes or '':>14}"
        )
    store.close()

    deleted = location.retain(keep_versions=6)
    print(f"retention (keep the last 6 versions) deleted {len(deleted)} files: {[p.name for p in deleted]}")
    all_match = True
    for version in range(versions - 5, versions + 1):
        restored = location.restore(workdir / f"restored-{version}", version)
        content = dict(restored.items())
        match = content == history[version] and restored.count() == len(history[version])
        all_match &= match
        snapshots = [v for v in location.snapshot_versions() if v <= version]
        start = f"snapshot {snapshots[-1]}" if snapshots else "empty store"
        print(
            f"restored version {version:>2} from {start} + {version - (snapshots[-1] if snapshots else 0)} "
            f"increments: {len(content)} keys, {'matches' if match else 'DIFFERS FROM'} the model"
        )
        restored.close()
    print("all restored versions match" if all_match else "MISMATCH")
    return all_match


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register `statestore engine-demo`."""
    parser = subparsers.add_parser("engine-demo", help="run the engine alone: commits, snapshots, restore")
    parser.add_argument("--dir", type=Path, help="working directory (default: a temporary one)")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    if args.dir:
        args.dir.mkdir(parents=True, exist_ok=True)
        return 0 if run_engine_demo(args.dir) else 1
    with tempfile.TemporaryDirectory(prefix="statestore-demo-") as tmp:
        return 0 if run_engine_demo(Path(tmp)) else 1
