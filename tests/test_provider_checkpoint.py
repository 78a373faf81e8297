"""The provider's checkpoint location: readable by the Python engine, snapshots and retention, damaged or
missing files refused with an error naming them, stale local directories cleaned at start-up."""

from __future__ import annotations

import os
import random
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import StreamRun

KEYS = 11


def _batches(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"events": [{"k": f"k{rng.randrange(KEYS)}", "v": rng.randint(0, 50)} for _ in range(30)]}
            for _ in range(n)]


def _build(spark: Any, s: dict[str, Any]) -> Any:
    from pyspark.sql import functions as F

    return s["events"].groupBy("k").agg(F.sum("v").alias("s"), F.count("*").alias("n"))


def _run(spark: Any, root: Path, batches: list[dict], **confs: str) -> StreamRun:
    for key, value in confs.items():
        spark.conf.set(key, value)
    run = StreamRun(spark, root, {"events": "k string, v long"}, _build, "update", "statestore")
    run.feed(batches)
    run.run()
    return run


def _wait_for_uploads(store_dir: Path, timeout: float = 30) -> None:
    """Waits until every snapshot directory has its manifest (uploads run in the background)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        pending = [d for d in store_dir.glob("*.snapshot") if not (d / "MANIFEST.json").exists()]
        if not pending:
            time.sleep(0.5)  # let an upload that was about to start do so
            if not [d for d in store_dir.glob("*.snapshot") if not (d / "MANIFEST.json").exists()]:
                return
        time.sleep(0.2)
    raise AssertionError(f"snapshot uploads in {store_dir} did not finish")


def _unsafe_string(row: bytes, ordinal: int, fields: int) -> str:
    word = struct.unpack_from("<q", row, 8 * ((fields + 63) // 64) + 8 * ordinal)[0]
    offset, size = word >> 32, word & 0xFFFFFFFF
    return row[offset:offset + size].decode()


def _unsafe_long(row: bytes, ordinal: int, fields: int) -> int:
    return struct.unpack_from("<q", row, 8 * ((fields + 63) // 64) + 8 * ordinal)[0]


def test_python_engine_restores_what_the_provider_wrote(spark: Any, tmp_path: Path) -> None:
    from statestore.checkpoint_location import CheckpointLocation
    from statestore.increment import read_increment

    batches = _batches(8)
    _run(spark, tmp_path, batches, **{"spark.sql.streaming.stateStore.minDeltasForSnapshot": "3",
                                      "spark.sql.streaming.minBatchesToRetain": "3"})
    expected: dict[str, tuple[int, int]] = {}
    for b in batches:
        for r in b["events"]:
            s, n = expected.get(r["k"], (0, 0))
            expected[r["k"]] = (s + r["v"], n + 1)

    found: dict[str, tuple[int, int]] = {}
    for partition in (0, 1):
        store_dir = tmp_path / "checkpoint" / "state" / "0" / str(partition)
        _wait_for_uploads(store_dir)
        store_id = f"0/{partition}/default"
        latest = max(int(p.name.split(".")[0]) for p in store_dir.glob("*.increment"))
        assert latest == len(batches)
        inc = read_increment(store_dir / f"{latest}.increment")
        assert (inc.store_id, inc.version, inc.base_version) == (store_id, latest, latest - 1)
        assert list(store_dir.glob("*.snapshot/MANIFEST.json")), "no snapshot was uploaded"
        location = CheckpointLocation(store_dir, store_id)
        store = location.restore(tmp_path / f"restored-{partition}", latest)
        try:
            assert store.version == latest
            items = list(store.items("default"))
            assert store.count("default") == len(items)
            for key, value in items:
                found[_unsafe_string(key, 0, 1)] = (_unsafe_long(value, 0, 2), _unsafe_long(value, 1, 2))
        finally:
            store.close()
    assert found == expected


def test_retention_keeps_only_what_restoring_recent_versions_needs(spark: Any, tmp_path: Path) -> None:
    _run(spark, tmp_path, _batches(9), **{"spark.sql.streaming.stateStore.minDeltasForSnapshot": "2",
                                          "spark.sql.streaming.minBatchesToRetain": "2"})
    store_dir = tmp_path / "checkpoint" / "state" / "0" / "0"
    _wait_for_uploads(store_dir)
    increments = sorted(int(p.name.split(".")[0]) for p in store_dir.glob("*.increment"))
    snapshots = sorted(int(p.name.split(".")[0]) for p in store_dir.glob("*.snapshot"))
    assert increments[-1] == 9
    assert 1 not in increments, f"nothing was deleted: {increments}"
    assert snapshots and snapshots[0] >= increments[0] - 1


def _damage(kind: str, path: Path) -> None:
    if kind == "missing":
        path.unlink()
    elif kind == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x40
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["flipped", "truncated", "missing"])
def test_damaged_increment_is_refused_naming_the_file(spark: Any, tmp_path: Path, kind: str) -> None:
    run = _run(spark, tmp_path, _batches(3), **{"spark.sql.streaming.stateStore.minDeltasForSnapshot": "100"})
    victim = tmp_path / "checkpoint" / "state" / "0" / "0" / "2.increment"
    _damage(kind, victim)
    run.feed(_batches(1, seed=5))
    with pytest.raises(Exception) as failure:
        run.run()
    assert str(victim) in str(failure.value)


def test_a_corrupt_snapshot_is_passed_over_for_the_increments(spark: Any, tmp_path: Path) -> None:
    """A snapshot is a shortcut, the increments the record: the restarted query restores past a damaged snapshot
    from an older one and the increments (the provider logs the file and why), and its totals are exact."""
    batches = _batches(4)
    run = _run(spark, tmp_path, batches, **{"spark.sql.streaming.stateStore.minDeltasForSnapshot": "1"})
    store_dir = tmp_path / "checkpoint" / "state" / "0" / "0"
    _wait_for_uploads(store_dir)
    newest = max(store_dir.glob("*.snapshot"), key=lambda p: int(p.name.split(".")[0]))
    victim = next(p for p in sorted(newest.iterdir()) if p.suffix == ".sst")
    _damage("flipped", victim)
    more = _batches(1, seed=6)
    run.feed(more)
    run.run()
    totals: dict[str, tuple[int, int]] = {}
    for batch in [*batches, *more]:
        for r in batch["events"]:
            s, n = totals.get(r["k"], (0, 0))
            totals[r["k"]] = (s + r["v"], n + 1)
    last_batch = run.outputs[-1][1]
    assert last_batch and all(totals[k] == (s, n) for k, s, n in last_batch), last_batch


def test_stale_local_directories_are_deleted_at_start_up(spark: Any, tmp_path: Path) -> None:
    local_root = tmp_path / "local"
    dead = local_root / "99999999-0000" / "0_0_default_x"
    alive = local_root / f"{os.getpid()}-1111"
    dead.mkdir(parents=True)
    alive.mkdir(parents=True)
    (dead / "000001.sst").write_bytes(b"stale")
    try:
        _run(spark, tmp_path, _batches(1), **{"spark.sql.streaming.stateStore.statestore.localDir": str(local_root)})
    finally:
        spark.conf.unset("spark.sql.streaming.stateStore.statestore.localDir")
    assert not dead.parent.exists()
    assert alive.exists()
    shutil.rmtree(local_root, ignore_errors=True)
