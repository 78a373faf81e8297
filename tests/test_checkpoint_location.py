"""The checkpoint location: durable increments and snapshots, restore, retention, and bad input.

Every damaged or missing file gives an error naming it, and the store stays at its last good version.
The full-disk cases use a real, tiny tmpfs (the tests run as root here and in CI).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import java_check

from statestore import (
    CheckpointLocation,
    CorruptFileError,
    MissingCheckpointFileError,
    StoreIdentityError,
    StoreWriteError,
    VersionedStore,
)
from statestore.snapshot import MANIFEST_NAME, read_manifest, write_snapshot

STORE_ID = "2/5/default"


def commit_versions(location: CheckpointLocation, store: VersionedStore, count: int, snapshot_every: int = 0) -> None:
    """Commit `count` versions; version v sets key v and bumps a shared counter."""
    for _ in range(count):
        v = store.version + 1
        store.put(b"key-%03d" % v, b"value-%d" % v)
        store.merge(b"log", b"%d;" % v)
        location.commit(store)
        if snapshot_every and v % snapshot_every == 0:
            location.write_snapshot(store)


def expected(version: int) -> dict[bytes, bytes]:
    state = {b"key-%03d" % v: b"value-%d" % v for v in range(1, version + 1)}
    if version:
        state[b"log"] = b"".join(b"%d;" % v for v in range(1, version + 1))
    return state


@pytest.fixture
def primary(tmp_path):
    location = CheckpointLocation(tmp_path / "checkpoint", STORE_ID)
    with VersionedStore.open(tmp_path / "primary", STORE_ID) as store:
        yield location, store


def test_restore_any_version_from_snapshots_and_increments(primary, tmp_path) -> None:
    location, store = primary
    commit_versions(location, store, 11, snapshot_every=4)
    assert location.snapshot_versions() == [4, 8]
    assert location.latest_version() == 11
    for version in range(12):
        with location.restore(tmp_path / f"r{version}", version) as restored:
            assert restored.version == version
            assert dict(restored.items()) == expected(version)
            assert restored.count() == len(expected(version))


def test_restore_shows_progress(primary, tmp_path) -> None:
    location, store = primary
    commit_versions(location, store, 6, snapshot_every=4)
    messages: list[str] = []
    location.restore(tmp_path / "r", 6, progress=messages.append).close()
    assert messages[0].startswith(f"store {STORE_ID}: copying snapshot 4")
    assert messages[-1] == f"store {STORE_ID}: applied increment 6 (2/2)"


def test_retention_keeps_what_the_last_versions_need(primary, tmp_path) -> None:
    location, store = primary
    commit_versions(location, store, 12, snapshot_every=3)
    deleted = location.retain(keep_versions=5)  # oldest kept: 8, restored from snapshot 6
    assert {p.name for p in deleted} == {"3.snapshot", *(f"{v}.increment" for v in range(1, 7))}
    assert location.snapshot_versions() == [6, 9, 12]
    for version in range(8, 13):
        with location.restore(tmp_path / f"r{version}", version) as restored:
            assert dict(restored.items()) == expected(version)
    with pytest.raises(
        MissingCheckpointFileError, match=r"1\.increment: missing, needed to restore version 4 from the"
    ):
        location.restore(tmp_path / "too-old", 4)


def test_retention_never_bases_on_a_late_snapshot_of_an_abandoned_history(primary, tmp_path, tmp_path_factory) -> None:
    """A background snapshot of version 6 finishes after a re-run batch rewrote version 6 (another writer, so the
    location's supersede ran before it landed). As retention's base, increments 1 to 6 would go, increment 6 (the
    kept lineage at 6) with them, and a restore of 7 would then build on the abandoned state without a sign."""
    location, store = primary
    commit_versions(location, store, 5, snapshot_every=4)
    with VersionedStore.open(tmp_path / "abandoned", STORE_ID) as abandoned:
        location.catch_up(abandoned, 5)
        abandoned.put(b"key-006", b"abandoned")
        abandoned.commit()
        commit_versions(location, store, 3)  # the kept history: 6, 7, 8
        write_snapshot(abandoned, location.snapshot_dir(6))  # lands late
    assert read_manifest(location.snapshot_dir(6)).lineage not in (None, store_lineage_at(location, 6))
    shutil.copytree(location.path, tmp_path / "for-java")
    deleted = location.retain(keep_versions=2)  # oldest kept: 7
    assert {p.name for p in deleted} == {"6.snapshot", *(f"{v}.increment" for v in range(1, 5))}
    for version in (7, 8):
        with location.restore(tmp_path / f"r{version}", version) as restored:
            assert dict(restored.items()) == expected(version)
    if shutil.which("javac"):  # the provider's retention decides the same on the same files
        check = java_check(tmp_path_factory, "RetentionCheck", "128m")
        left = subprocess.run([*check, str(tmp_path / "for-java"), STORE_ID, "2"], capture_output=True, text=True,
                              check=True).stdout.split()  # fmt: skip
        assert left == sorted(entry.name for entry in location.path.iterdir())


def store_lineage_at(location: CheckpointLocation, version: int) -> bytes | None:
    return location.read_increment(version).lineage


def test_a_snapshot_manifest_records_its_lineage_and_a_mangled_one_is_refused(primary) -> None:
    location, store = primary
    commit_versions(location, store, 2)
    manifest = location.write_snapshot(store)
    assert manifest.lineage == store.lineage == read_manifest(location.snapshot_dir(2)).lineage
    path = location.snapshot_path(2) / MANIFEST_NAME
    document = json.loads(path.read_text())
    document["lineage"] = "not hex"
    path.write_text(json.dumps(document))
    with pytest.raises(CorruptFileError, match="manifest lineage 'not hex' is not 32 hex digits"):
        read_manifest(location.snapshot_dir(2))
    del document["lineage"]  # written before manifests had it: still read
    path.write_text(json.dumps(document))
    assert read_manifest(location.snapshot_dir(2)).lineage is None


def test_rolling_back_and_recommitting_supersedes_the_old_history(primary, tmp_path) -> None:
    location, store = primary
    commit_versions(location, store, 6, snapshot_every=2)
    store.close()
    with location.restore(tmp_path / "primary", 3) as rolled_back:
        rolled_back.put(b"other-history", b"!")
        location.commit(rolled_back)
        assert location.latest_version() == 4
        assert location.snapshot_versions() == [2]
        with location.restore(tmp_path / "check", 4) as restored:
            assert restored.get(b"other-history") == b"!" and restored.get(b"key-004") is None


def test_missing_increment_is_named_and_leaves_no_half_store(primary, tmp_path) -> None:
    location, store = primary
    commit_versions(location, store, 5)
    location.increment_path(3).unlink()
    with pytest.raises(MissingCheckpointFileError, match=r"3\.increment: missing, needed to restore version 5 from"):
        location.restore(tmp_path / "r", 5)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_damaged_increment_is_named(primary, tmp_path, damage: str) -> None:
    location, store = primary
    commit_versions(location, store, 3)
    path = location.increment_path(2)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as error:
        location.restore(tmp_path / "r", 3)
    assert error.value.path == str(path)


def test_increment_of_another_store_or_version_is_refused(primary, tmp_path) -> None:
    location, store = primary
    commit_versions(location, store, 2)
    other = CheckpointLocation(tmp_path / "other", "9/9/other")
    with VersionedStore.open(tmp_path / "other-store", "9/9/other") as foreign:
        commit_versions(other, foreign, 2)
    location.increment_path(2).write_bytes(other.increment_path(2).read_bytes())
    with pytest.raises(StoreIdentityError, match="belongs to store '9/9/other'"):
        location.restore(tmp_path / "r", 2)
    location.increment_path(2).write_bytes(location.increment_path(1).read_bytes())
    with pytest.raises(CorruptFileError, match="holds version 1, its name says 2"):
        location.restore(tmp_path / "r", 2)


def test_a_damaged_snapshot_is_passed_over_naming_the_file(primary, tmp_path, caplog) -> None:
    """A snapshot is a shortcut, the increments the record: a damaged one is passed over (the log names the
    file) while the increments below it are there; without them the error names the missing increment and the
    damage."""
    location, store = primary
    commit_versions(location, store, 4, snapshot_every=4)
    snapshot = location.snapshot_path(4)
    victim = next(p for p in sorted(snapshot.iterdir()) if p.suffix == ".sst")
    data = bytearray(victim.read_bytes())
    data[10] ^= 0xFF
    victim.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING), location.restore(tmp_path / "r", 4) as restored:
        assert dict(restored.items()) == dict(store.items())
    assert str(victim) in caplog.text and "checksum mismatch" in caplog.text
    location.increment_path(1).unlink()
    with pytest.raises(MissingCheckpointFileError, match=r"1\.increment.*snapshot 4 passed over.*checksum mismatch"):
        location.restore(tmp_path / "r", 4)


def test_a_damaged_manifest_is_passed_over_naming_it(primary, tmp_path, caplog) -> None:
    location, store = primary
    commit_versions(location, store, 2, snapshot_every=2)
    manifest_path = location.snapshot_path(2) / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "format_version": 7}))
    with caplog.at_level(logging.WARNING), location.restore(tmp_path / "r", 2) as restored:
        assert dict(restored.items()) == dict(store.items())
    assert "unknown snapshot format version 7" in caplog.text
    manifest_path.write_text("{not json")
    location.increment_path(1).unlink()
    with pytest.raises(MissingCheckpointFileError, match="manifest is not valid JSON") as error:
        location.restore(tmp_path / "r", 2)
    assert str(manifest_path) in str(error.value)


def test_incomplete_snapshot_is_ignored(primary, tmp_path) -> None:
    location, store = primary
    commit_versions(location, store, 3, snapshot_every=3)
    (location.snapshot_path(3) / MANIFEST_NAME).unlink()
    assert location.snapshot_versions() == []
    with location.restore(tmp_path / "r", 3) as restored:
        assert dict(restored.items()) == expected(3)


@pytest.fixture
def tiny_disk(tmp_path):
    """A real 1 MiB filesystem."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill: {result.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=True)


def big_transaction(store: VersionedStore, megabytes: int) -> None:
    for i in range(megabytes * 16):
        store.put(b"big-%06d" % i, os.urandom(65536))  # incompressible, so it fills the disk


def test_full_checkpoint_disk_fails_the_commit_and_keeps_the_store(tmp_path, tiny_disk: Path) -> None:
    location = CheckpointLocation(tiny_disk / "checkpoint", STORE_ID)
    with VersionedStore.open(tmp_path / "primary", STORE_ID) as store:
        commit_versions(location, store, 2)
        big_transaction(store, 2)
        with pytest.raises(StoreWriteError, match=r"3\.increment: writing failed: No space left on device"):
            location.commit(store)
        assert store.version == 2
        assert list(location.path.glob(".*.tmp")) == []
        assert store.has_uncommitted_changes  # nothing is lost: the caller may abort or retry
        store.abort()
        commit_versions(location, store, 1)
        assert store.version == 3
        with location.restore(tmp_path / "r", 3) as restored:
            assert dict(restored.items()) == expected(3)


def test_full_local_disk_fails_the_commit_and_keeps_the_last_version(tmp_path, tiny_disk: Path) -> None:
    location = CheckpointLocation(tmp_path / "checkpoint", STORE_ID)
    store = VersionedStore.open(tiny_disk / "primary", STORE_ID)
    commit_versions(location, store, 2)
    big_transaction(store, 2)
    with pytest.raises(StoreWriteError, match="writing version 3 failed, store stays at version 2"):
        store.commit()
    assert store.version == 2
    assert store.get(b"key-002") == b"value-2"
    store.close()
    with VersionedStore.open(tiny_disk / "primary", STORE_ID) as reopened:
        assert reopened.version == 2
        assert dict(reopened.items()) == expected(2)


def test_snapshot_on_a_full_disk_fails_cleanly(tmp_path, tiny_disk: Path) -> None:
    location = CheckpointLocation(tiny_disk / "checkpoint", STORE_ID)
    with VersionedStore.open(tmp_path / "primary", STORE_ID) as store:
        big_transaction(store, 2)
        store.commit()  # locally only: the checkpoint disk cannot hold it
        with pytest.raises(StoreWriteError, match="writing snapshot of version 1"):
            location.write_snapshot(store)
        assert location.snapshot_versions() == []
        assert [p.name for p in location.path.iterdir()] == []
