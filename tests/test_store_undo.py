"""Undo records: a store taken back one version by the record made before the increment was applied holds
exactly what it held before (values, key counts, column families, version, lineage)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from statestore import StateStoreError, VersionedStore, VersionMismatchError

STORE_ID = "0/3/default"
FAMILIES = ("default", "cf1", "cf2")

writes = st.lists(
    st.tuples(
        st.sampled_from(("put", "delete", "merge")),
        st.sampled_from(FAMILIES),
        st.binary(min_size=1, max_size=3),
        st.binary(max_size=4),
    ),
    max_size=25,
)


def _write(store: VersionedStore, batch: list[tuple[str, str, bytes, bytes]]) -> None:
    for op, cf, key, value in batch:
        if cf not in store.column_families():
            store.create_column_family(cf)
        if op == "put":
            store.put(key, value, cf)
        elif op == "delete":
            store.delete(key, cf)
        else:
            store.merge(key, value, cf)


def _contents(store: VersionedStore) -> dict:
    return {
        "version": store.version,
        "lineage": store.lineage,
        "families": {cf: (dict(store.items(cf)), store.count(cf)) for cf in store.column_families()},
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=writes, second=writes)
def test_revert_restores_exactly_the_version_before(first: list, second: list) -> None:
    with tempfile.TemporaryDirectory() as root:
        with (
            VersionedStore.open(Path(root) / "primary", STORE_ID) as primary,
            VersionedStore.open(Path(root) / "replica", STORE_ID) as replica,
        ):
            _write(primary, first)
            replica.apply(primary.commit())
            before = _contents(replica)
            _write(primary, second)
            increment = primary.commit()
            undo = replica.undo_record(increment)
            assert undo is not None
            replica.apply(increment)
            assert _contents(replica) == _contents(primary)
            replica.revert(undo)
            assert _contents(replica) == before
        # The reverted state is what a reopened store reads (it was written, not only remembered).
        with VersionedStore.open(Path(root) / "replica", STORE_ID) as reopened:
            assert _contents(reopened) == before


def test_a_record_of_another_version_is_refused(tmp_path: Path) -> None:
    with (
        VersionedStore.open(tmp_path / "primary", STORE_ID) as primary,
        VersionedStore.open(tmp_path / "replica", STORE_ID) as replica,
    ):
        primary.put(b"k", b"1")
        first = primary.commit()
        undo = replica.undo_record(first)
        replica.apply(first)
        primary.put(b"k", b"2")
        replica.apply(primary.commit())
        with pytest.raises(VersionMismatchError):
            replica.revert(undo)
        assert replica.version == 2 and replica.get(b"k") == b"2"


def test_an_increment_that_drops_a_column_family_has_no_undo_record(tmp_path: Path) -> None:
    with VersionedStore.open(tmp_path / "store", STORE_ID) as store:
        store.create_column_family("cf1")
        store.put(b"k", b"v", "cf1")
        store.commit()
        store.drop_column_family("cf1")
        with VersionedStore.open(tmp_path / "other", STORE_ID) as other:
            pending = store.commit()
            assert other.undo_record(pending) is None


def test_a_checkpoint_of_the_store_is_taken_back_by_the_stores_record(tmp_path: Path) -> None:
    # A materialize one version below: the replica's checkpoint is reverted with the record of the replica's
    # own store, which keeps the version it holds.
    with (
        VersionedStore.open(tmp_path / "primary", STORE_ID) as primary,
        VersionedStore.open(tmp_path / "replica", STORE_ID) as replica,
    ):
        primary.put(b"kept", b"1")
        primary.put(b"changed", b"old")
        replica.apply(primary.commit())
        primary.put(b"changed", b"new")
        primary.put(b"added", b"x")
        primary.delete(b"kept")
        increment = primary.commit()
        undo = replica.undo_record(increment)
        assert undo is not None
        replica.apply(increment)
        replica.checkpoint(tmp_path / "copy")
        with VersionedStore.open(tmp_path / "copy", STORE_ID) as copy:
            copy.revert(undo)
            assert (copy.version, dict(copy.items())) == (1, {b"kept": b"1", b"changed": b"old"})
        assert (replica.version, dict(replica.items())) == (2, {b"changed": b"new", b"added": b"x"})


def test_a_record_held_past_its_stores_close_neither_keeps_it_open_nor_reads_stale_values(tmp_path: Path) -> None:
    with (
        VersionedStore.open(tmp_path / "primary", STORE_ID) as primary,
        VersionedStore.open(tmp_path / "replica", STORE_ID) as replica,
    ):
        primary.put(b"k", b"1")
        replica.apply(primary.commit())
        primary.put(b"k", b"2")
        increment = primary.commit()
        undo = replica.undo_record(increment)
        assert undo is not None
        replica.apply(increment)
    # The record is still referenced here: RocksDB's lock must have been released all the same.
    with VersionedStore.open(tmp_path / "replica", STORE_ID) as reopened:
        assert reopened.version == 2 and reopened.get(b"k") == b"2"
        with pytest.raises(StateStoreError, match="undo record of version 2 was released"):
            reopened.revert(undo)
        assert reopened.version == 2 and reopened.get(b"k") == b"2"
