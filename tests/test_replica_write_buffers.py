"""A node's replicas of one query's partitions get unequal write buffers, so that replicas fed at the same rate do
not all flush (and compact) in the same micro-batch."""

from __future__ import annotations

from pathlib import Path

from rocksdict import Rdict

from statestore.node.settings import NodeSettings

PARTITIONS = [f"0/{p}" for p in range(8)]


def settings(tmp_path: Path) -> NodeSettings:
    return NodeSettings(listen="127.0.0.1:0", data_dir=tmp_path, store_write_buffer_mb=8)


def test_each_replica_keeps_its_own_write_buffer_within_a_quarter_of_the_setting(tmp_path: Path) -> None:
    node = settings(tmp_path)
    sizes = {store: node.store_options(store).write_buffer_mb for store in PARTITIONS}
    assert all(6 <= size <= 10 for size in sizes.values()), sizes
    assert sizes == {store: node.store_options(store).write_buffer_mb for store in PARTITIONS}  # stable
    assert max(sizes.values()) / min(sizes.values()) > 1.3, sizes


def test_two_replicas_fed_the_same_writes_flush_at_different_points(tmp_path: Path) -> None:
    node = settings(tmp_path)
    smallest, largest = sorted(PARTITIONS, key=lambda store: node.store_options(store).write_buffer_mb)[::7]
    stores = {
        store: Rdict(str(tmp_path / store.replace("/", "_")), node.store_options(store).rocksdb_options(create=True))
        for store in (smallest, largest)
    }
    value = bytes(range(256)) * 4
    flushed_after: dict[str, int] = {}
    try:
        for megabyte in range(1, 12):
            for i in range(1024):
                key = f"{megabyte:04d}-{i:06d}".encode()
                for store in stores.values():
                    store.put(key, value)
            for name in stores:
                if name not in flushed_after and any(tmp_path.joinpath(name.replace("/", "_")).glob("*.sst")):
                    flushed_after[name] = megabyte
    finally:
        for store in stores.values():
            store.close()
    assert flushed_after.get(smallest, 99) < flushed_after.get(largest, 99), flushed_after
