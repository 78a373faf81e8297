"""The primary's increment log: bytes evicted beyond its bound, sizes and checksums kept in a bounded index,
history dropped on rewrite, and lag in bytes exact from the index or the checkpoint location."""

from __future__ import annotations

from pathlib import Path

from statestore.checkpoint_location import CheckpointLocation
from statestore.node.increment_log import IncrementLog, increment_checksum
from statestore.node.settings import NodeSettings
from statestore.node.shipper import Shipper
from statestore.partition_key import partition_key
from statestore.rpc import common_pb2
from statestore.store import VersionedStore

STORE = "7/0/default"


def _increments(tmp_path: Path, count: int) -> tuple[CheckpointLocation, list[bytes]]:
    location = CheckpointLocation(tmp_path / "checkpoint", STORE)
    with VersionedStore.open(tmp_path / "primary", STORE) as store:
        for v in range(1, count + 1):
            store.put(f"k{v}".encode(), b"x" * (10 * v))
            location.commit(store)
    return location, [location.increment_path(v).read_bytes() for v in range(1, count + 1)]


def test_sizes_and_checksums_outlive_the_evicted_bytes(tmp_path: Path) -> None:
    _, data = _increments(tmp_path, 10)
    log = IncrementLog(max_bytes=3 * len(data[-1]))
    for v, blob in enumerate(data, start=1):
        log.add(STORE, v, blob)
    assert log.get(STORE, 1) is None and log.get(STORE, 10) == data[9]
    assert log.known(STORE, 1).size == len(data[0])
    assert log.known(STORE, 1).crc32 == increment_checksum(data[0])
    assert log.sizes_between(STORE, 2, 10, limit=100) == (sum(map(len, data[2:])), [], 0)


def test_drop_after_forgets_the_abandoned_history(tmp_path: Path) -> None:
    _, data = _increments(tmp_path, 6)
    log = IncrementLog(max_bytes=1 << 20)
    for v, blob in enumerate(data, start=1):
        log.add(STORE, v, blob)
    log.add("other", 5, data[4])
    assert log.drop_after(STORE, 3) == 3
    assert [log.get(STORE, v) is not None for v in range(1, 7)] == [True] * 3 + [False] * 3
    assert log.known(STORE, 4) is None and log.get("other", 5) == data[4]
    assert log.sizes_between(STORE, 0, 6, limit=100) == (sum(map(len, data[:3])), [4, 5, 6], 3)


def test_lag_bytes_fall_back_to_the_checkpoint_locations_file_sizes(tmp_path: Path) -> None:
    location, data = _increments(tmp_path, 12)
    readable = common_pb2.StoreRef(store_id=STORE, checkpoint_dir=str(location.path))
    unreadable = common_pb2.StoreRef(store_id=STORE, checkpoint_dir=str(tmp_path / "elsewhere"))
    bare = common_pb2.StoreRef(store_id=STORE)
    log = IncrementLog(max_bytes=1, max_indexed_versions=4)  # indexes versions 9..12 only
    for ref in (readable, unreadable, bare):
        for v, blob in enumerate(data, start=1):
            log.add(partition_key(ref), v, blob)
    shipper = Shipper(NodeSettings(listen="127.0.0.1:0", data_dir=tmp_path / "node"), log, lambda _wait: None)
    assert log.sizes_between(partition_key(readable), 2, 12, limit=100)[2] == 6  # versions 3..8 not indexed
    assert shipper.lag_bytes(readable, 2, 12) == sum(map(len, data[2:]))  # exact
    assert shipper.lag_bytes(readable, 12, 12) == 0
    # Without a readable checkpoint location only the indexed sizes count: a lower bound.
    assert shipper.lag_bytes(unreadable, 2, 12) == sum(map(len, data[8:]))
    assert shipper.lag_bytes(bare, 2, 12) == sum(map(len, data[8:]))


def test_a_sync_commit_right_after_a_promotion_waits_for_its_group_and_an_async_one_does_not(tmp_path: Path) -> None:
    """promote() asks for a heartbeat in the background (sent up to 0.1 s later); a sync commit of the partition
    right after must still ask and wait for its group, or it would return unreplicated."""
    location, data = _increments(tmp_path, 2)
    asked: list[bool] = []
    settings = NodeSettings(listen="127.0.0.1:0", data_dir=tmp_path / "node")
    shipper = Shipper(settings, IncrementLog(1 << 20), asked.append)
    sync_store = common_pb2.StoreRef(store_id=STORE, checkpoint_dir=str(location.path))
    shipper.promote(sync_store, 0)
    assert asked == [False]  # in the background
    outcome = shipper.ship(sync_store, data[0], sync=True, sync_timeout=0.1)
    assert asked == [False, True]  # a heartbeat on this thread, for the group, before shipping
    assert not outcome.synced and "no replica group" in outcome.detail  # nobody to replicate to, and it says so
    async_store = common_pb2.StoreRef(store_id=STORE, checkpoint_dir=str(tmp_path / "another"))
    shipper.promote(async_store, 0)
    shipper.ship(async_store, data[0])
    assert asked == [False, True, False]  # the promotion's heartbeat is on its way: an async commit does not ask


def test_a_partition_no_longer_led_keeps_its_index_only_while_its_bytes_are_kept(tmp_path: Path) -> None:
    """The index of a partition the node stopped leading (demoted, released) shrinks to the versions replicas can
    still pull, and goes with the last of them: a node's index no longer grows with every partition it ever led."""
    _, data = _increments(tmp_path, 6)
    log = IncrementLog(max_bytes=sum(len(d) for d in data[3:]))  # room for the newest three
    for v, d in enumerate(data, start=1):
        log.add("old", v, d)
    assert [v for v in range(1, 7) if log.known("old", v)] == [1, 2, 3, 4, 5, 6]
    log.retire("old")
    assert [v for v in range(1, 7) if log.known("old", v)] == [4, 5, 6] and log.has("old")
    for v, d in enumerate(data[3:], start=1):  # another partition's increments evict the old one's bytes
        log.add("new", v, d)
    assert not log.has("old") and all(log.known("old", v) is None for v in range(1, 7))
    log.add("old", 7, data[0])  # led here again: indexed again
    assert log.known("old", 7) is not None
