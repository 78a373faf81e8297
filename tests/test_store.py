"""The versioned store: reads, writes, scans, counts, column families, versions and apply."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statestore import (
    LineageMismatchError,
    StateStoreError,
    StoreIdentityError,
    UnknownColumnFamilyError,
    VersionedStore,
    VersionMismatchError,
)
from statestore.increment import (
    EMPTY_LINEAGE,
    ColumnFamilyState,
    Increment,
    Op,
    decode_increment,
    encode_increment,
)
from statestore.store import _NUMPY_SORT_FROM, _in_key_order

STORE_ID = "0/0/default"


@pytest.fixture
def store(tmp_path):
    with VersionedStore.open(tmp_path / "store", STORE_ID) as opened:
        yield opened


def test_a_new_store_is_empty_at_version_zero(store: VersionedStore) -> None:
    assert store.version == 0
    assert store.count() == 0
    assert store.column_families() == ["default"]
    assert store.get(b"missing") is None


def test_reads_see_uncommitted_writes_and_abort_discards_them(store: VersionedStore) -> None:
    store.put(b"a", b"1")
    store.commit()
    store.put(b"a", b"2")
    store.put(b"b", b"")
    store.delete(b"zz")
    assert store.get(b"a") == b"2" and store.get(b"b") == b"" and store.count() == 2
    store.abort()
    assert store.get(b"a") == b"1" and store.get(b"b") is None and store.count() == 1
    assert store.version == 1


def test_merge_appends_operands_to_the_committed_value(store: VersionedStore) -> None:
    store.merge(b"k", b"x")
    store.commit()
    store.merge(b"k", b"y")
    store.merge(b"k", b"z")
    assert store.get(b"k") == b"xyz"
    increment = store.commit()
    assert list(increment.records()) == [(Op.MERGE, "default", b"k", b"yz")]
    store.delete(b"k")
    store.merge(b"k", b"fresh")
    assert list(store.commit().records()) == [(Op.PUT, "default", b"k", b"fresh")]
    assert store.get(b"k") == b"fresh"


def test_scans_merge_committed_and_uncommitted_in_key_order(store: VersionedStore) -> None:
    for key in (b"a1", b"a3", b"b1", b"a5"):
        store.put(key, key.upper())
    store.commit()
    store.put(b"a2", b"new")
    store.delete(b"a3")
    store.merge(b"a5", b"+")
    store.put(b"a0", b"first")
    assert list(store.scan_prefix(b"a")) == [(b"a0", b"first"), (b"a1", b"A1"), (b"a2", b"new"), (b"a5", b"A5+")]
    assert list(store.scan_range(b"a1", b"a5")) == [(b"a1", b"A1"), (b"a2", b"new")]
    assert [k for k, _ in store.scan_range(b"a2", None)] == [b"a2", b"a5", b"b1"]
    assert [k for k, _ in store.items()] == [b"a0", b"a1", b"a2", b"a5", b"b1"]


def test_counts_are_exact_under_overwrites_and_deletes(store: VersionedStore) -> None:
    for round_ in range(3):
        for i in range(100):
            store.put(b"%d" % i, b"%d" % round_)
        store.commit()
    for i in range(0, 100, 2):
        store.delete(b"%d" % i)
    store.delete(b"never-there")
    assert store.count() == 50
    store.commit()
    assert store.count() == 50


def test_column_families_are_created_used_and_dropped(store: VersionedStore) -> None:
    with pytest.raises(UnknownColumnFamilyError, match="no column family 'left'"):
        store.put(b"k", b"v", "left")
    store.create_column_family("left")
    store.put(b"k", b"v", "left")
    store.commit()
    assert store.column_families() == ["default", "left"] and store.count("left") == 1
    assert store.drop_column_family("left") is True
    assert store.drop_column_family("left") is False
    store.create_column_family("left")
    assert store.get(b"k", "left") is None
    store.commit()
    assert store.count("left") == 0 and list(store.items("left")) == []
    with pytest.raises(StateStoreError, match="not a valid column family name"):
        store.create_column_family("__statestore_meta")


def test_committed_state_survives_reopening(tmp_path) -> None:
    path = tmp_path / "store"
    with VersionedStore.open(path, STORE_ID) as store:
        store.create_column_family("cf")
        store.put(b"k", b"v", "cf")
        store.put(b"d", b"")
        store.commit()
        store.put(b"uncommitted", b"lost")
    with VersionedStore.open(path, STORE_ID) as store:
        assert store.version == 1
        assert store.get(b"k", "cf") == b"v" and store.get(b"d") == b""
        assert store.get(b"uncommitted") is None
        assert store.count() == 1 and store.count("cf") == 1


def test_a_directory_of_another_store_is_refused(tmp_path) -> None:
    VersionedStore.open(tmp_path / "store", "1/0/default").close()
    with pytest.raises(StoreIdentityError, match="belongs to store '1/0/default'"):
        VersionedStore.open(tmp_path / "store", STORE_ID)


def test_apply_follows_versions_strictly(tmp_path) -> None:
    with VersionedStore.open(tmp_path / "p", STORE_ID) as primary, VersionedStore.open(tmp_path / "r", STORE_ID) as r:
        increments = []
        for v in range(3):
            primary.put(b"k", b"%d" % v)
            increments.append(primary.commit())
        with pytest.raises(VersionMismatchError, match="needs version 1, store is at version 0"):
            r.apply(increments[1])
        assert r.apply(increments[0]) is True
        assert r.apply(increments[0]) is False  # applying twice is harmless
        assert r.apply(increments[1]) is True
        assert r.get(b"k") == b"1" and r.version == 2
        r.put(b"x", b"y")
        with pytest.raises(StateStoreError, match="uncommitted writes"):
            r.apply(increments[2])


def test_apply_refuses_another_stores_increment(store: VersionedStore) -> None:
    foreign = Increment("9/9/other", 1, 0, [ColumnFamilyState("default", True, 0)])
    with pytest.raises(StoreIdentityError, match="increment 1 belongs to store '9/9/other'"):
        store.apply(foreign)
    assert store.version == 0


def test_apply_handles_any_record_sequence_in_order(store: VersionedStore) -> None:
    """Writers emit one record per key, but a reader must apply any sequence in file order."""
    store.create_column_family("cf")
    store.put(b"k", b"old", "cf")
    store.put(b"m", b"base")
    store.commit()
    increment = Increment(
        STORE_ID,
        2,
        1,
        [ColumnFamilyState("cf", True, 1), ColumnFamilyState("default", True, 1)],
        bytes([Op.MERGE, Op.DROP_COLUMN_FAMILY, Op.MERGE, Op.MERGE, Op.PUT, Op.MERGE, Op.MERGE]),
        [0, 0, 0, 0, 1, 1, 1],
        [b"k", b"", b"k", b"k", b"m", b"m", b"m"],
        [b"-lost", b"", b"a", b"b", b"p", b"q", b"r"],
    )
    assert store.apply(increment)
    assert store.get(b"k", "cf") == b"ab"  # the drop wiped "old-lost"
    assert store.get(b"m") == b"pqr"
    assert store.count("cf") == 1 and store.count() == 1


def test_commit_of_an_explicit_version_must_be_the_next_one(store: VersionedStore) -> None:
    store.put(b"k", b"v")
    with pytest.raises(VersionMismatchError, match="committing version 3 needs version 2, store is at version 0"):
        store.commit(3)
    assert store.commit(1).version == 1 and store.get(b"k") == b"v"


def test_read_only_open_reads_committed_state_and_refuses_writes(tmp_path) -> None:
    path = tmp_path / "store"
    with VersionedStore.open(path, STORE_ID) as writer:
        writer.create_column_family("other")
        writer.put(b"a", b"1")
        writer.put(b"b", b"2", "other")
        increment = writer.commit()
        # A read-only instance may open a store another handle has open for writing.
        with VersionedStore.open(path, STORE_ID, read_only=True) as reader:
            assert reader.read_only and reader.version == 1
            assert reader.column_families() == ["default", "other"]
            assert list(reader.items()) == [(b"a", b"1")]
            assert reader.get(b"b", "other") == b"2" and reader.count("other") == 1
            for attempt in (
                lambda: reader.put(b"x", b"y"),
                lambda: reader.delete(b"a"),
                lambda: reader.merge(b"a", b"+"),
                lambda: reader.create_column_family("new"),
                lambda: reader.drop_column_family("other"),
                reader.commit,
                lambda: reader.apply(increment),
            ):
                with pytest.raises(StateStoreError, match="read-only"):
                    attempt()
            assert reader.version == 1 and reader.get(b"a") == b"1"


def test_read_only_open_needs_an_existing_store_of_that_identity(tmp_path) -> None:
    with pytest.raises(StateStoreError, match="no RocksDB store"):
        VersionedStore.open(tmp_path / "absent", STORE_ID, read_only=True)
    assert not (tmp_path / "absent").exists()
    VersionedStore.open(tmp_path / "store", STORE_ID).close()
    with pytest.raises(StoreIdentityError):
        VersionedStore.open(tmp_path / "store", "1/1/other", read_only=True)


def test_every_version_has_the_lineage_of_its_increment_across_reopening(tmp_path) -> None:
    with VersionedStore.open(tmp_path / "p", STORE_ID) as primary:
        assert primary.lineage == EMPTY_LINEAGE
        primary.put(b"k", b"1")
        first = primary.commit()
        assert first.parent_lineage == EMPTY_LINEAGE and primary.lineage == first.lineage
        primary.put(b"k", b"2")
        second = primary.commit()
        assert second.parent_lineage == first.lineage and primary.lineage == second.lineage
    with VersionedStore.open(tmp_path / "p", STORE_ID) as reopened:
        assert reopened.lineage == second.lineage


def test_apply_refuses_an_increment_of_another_history(tmp_path) -> None:
    """Spark re-ran batch 1 with other input: a store holding the abandoned version 1 must not take version 2."""
    with (
        VersionedStore.open(tmp_path / "a", STORE_ID) as abandoned,
        VersionedStore.open(tmp_path / "b", STORE_ID) as real,
        VersionedStore.open(tmp_path / "r", STORE_ID) as replica,
    ):
        abandoned.put(b"k", b"lost")
        replica.apply(decode_increment(encode_increment(abandoned.commit())))
        real.put(b"k", b"kept")
        real.commit()
        real.put(b"k2", b"v")
        second = decode_increment(encode_increment(real.commit()))
        with pytest.raises(LineageMismatchError, match="increment 2 continues lineage"):
            replica.apply(second)
        assert replica.version == 1 and replica.get(b"k") == b"lost"


def test_a_store_on_an_unknown_history_stays_unknown(store: VersionedStore) -> None:
    """An increment without a lineage (format 1) leaves the store's history unknown, and what follows too."""
    store.apply(Increment(STORE_ID, 1, 0, [ColumnFamilyState("default", True, 0)]))
    assert store.lineage is None
    store.put(b"k", b"v")
    increment = store.commit()
    assert increment.parent_lineage is None and store.lineage is None
    assert decode_increment(encode_increment(increment)).parent_lineage is None


def test_apply_refuses_another_history_at_the_version_the_store_holds(tmp_path) -> None:
    """Spark re-ran batch 1 with other input: a store holding the abandoned version 1 does not call the kept version
    1 "already held" (a caller would take the store for the kept history)."""
    with (
        VersionedStore.open(tmp_path / "a", STORE_ID) as abandoned,
        VersionedStore.open(tmp_path / "b", STORE_ID) as real,
        VersionedStore.open(tmp_path / "r", STORE_ID) as replica,
    ):
        abandoned.put(b"k", b"lost")
        lost = decode_increment(encode_increment(abandoned.commit()))
        replica.apply(lost)
        real.put(b"k", b"kept")
        kept = decode_increment(encode_increment(real.commit()))
        with pytest.raises(LineageMismatchError, match="another history at the version the store holds"):
            replica.apply(kept)
        assert replica.apply(lost) is False  # the very increment it holds: already held
        assert replica.version == 1 and replica.get(b"k") == b"lost"


def test_a_rocksdb_directory_that_is_not_a_store_is_refused_not_adopted(tmp_path) -> None:
    from rocksdict import Rdict

    from statestore.options import StoreOptions

    options = StoreOptions().rocksdb_options(create=True)  # the very options a store uses: it would open
    foreign = Rdict(str(tmp_path / "foreign"), options)
    foreign[b"someone's"] = b"data"
    foreign.close()
    with pytest.raises(StateStoreError, match="not a statestore store"):
        VersionedStore.open(tmp_path / "foreign", STORE_ID)
    with pytest.raises(StateStoreError, match="not a statestore store"):
        VersionedStore.open(tmp_path / "foreign", STORE_ID, read_only=True)
    reopened = Rdict(str(tmp_path / "foreign"), options)  # untouched, and its lock released
    assert reopened[b"someone's"] == b"data" and reopened.list_cf(str(tmp_path / "foreign"), options) == ["default"]
    reopened.close()


def test_a_store_created_without_its_identity_is_claimed_when_empty(tmp_path) -> None:
    """An open that stopped between creating the database and recording its identity leaves an empty database
    with the meta column family: the next open claims it."""
    from rocksdict import Rdict

    from statestore.options import StoreOptions

    options = StoreOptions().rocksdb_options(create=True)
    db = Rdict(str(tmp_path / "s"), options, column_families={"__statestore_meta": options})
    db.close()
    with VersionedStore.open(tmp_path / "s", STORE_ID) as store:
        assert store.version == 0 and store.lineage == EMPTY_LINEAGE


@st.composite
def _increment_keys(draw: st.DrawFn) -> tuple[list[int], list[bytes]]:
    """Record columns as a replica gets them: mostly fixed-width keys (UnsafeRow's multiples of 8 bytes, some
    words equal in every key, duplicates), sometimes not; one or several column families."""
    n = draw(st.integers(min_value=_NUMPY_SORT_FROM, max_value=_NUMPY_SORT_FROM + 300))
    width = draw(st.sampled_from([8, 16, 24, 13, 0]))
    constant = draw(st.binary(min_size=width, max_size=width))
    pool = draw(st.lists(st.binary(min_size=width, max_size=width), min_size=1, max_size=40))
    keys = []
    for i in range(n):
        key = bytearray(pool[i % len(pool)] if draw(st.booleans()) else constant)
        key[: min(8, width)] = constant[: min(8, width)]  # the null bits: one word equal in every key
        keys.append(bytes(key))
    if draw(st.booleans()) and width:
        keys[draw(st.integers(0, n - 1))] = b"\x01" * (width + 8)  # one longer key: not fixed-width any more
    cfs = draw(st.sampled_from(["one", "two"]))
    cf_indexes = [0] * n if cfs == "one" else [draw(st.integers(0, 2)) for _ in range(n)]
    return cf_indexes, keys


@given(_increment_keys())
@settings(max_examples=60, deadline=None)
def test_a_replica_applies_records_in_pythons_stable_sort_order(columns: tuple[list[int], list[bytes]]) -> None:
    cf_indexes, keys = columns
    expected = sorted(range(len(keys)), key=lambda i: (cf_indexes[i], keys[i]))
    assert _in_key_order(cf_indexes, keys) == expected
