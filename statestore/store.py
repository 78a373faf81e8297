"""The versioned store of one state partition on RocksDB, whose every commit yields an increment.

Writes go to an in-memory transaction (read-your-writes) until `commit()`, which turns them into an
increment (statestore.increment) and writes data, version and exact key counts in one RocksDB write
batch (docs/formats.md section 2). `apply()` plays another store's increment on this one. A store is
used by one thread at a time.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path

import numpy as np
from rocksdict import AccessType, Checkpoint, Rdict, WriteBatch, WriteOptions

from statestore.contract.increment_layout import META_COLUMN_FAMILY
from statestore.errors import (
    LineageMismatchError,
    StateStoreError,
    StoreIdentityError,
    StoreWriteError,
    UnknownColumnFamilyError,
    VersionMismatchError,
)
from statestore.increment import EMPTY_LINEAGE, LINEAGE_BYTES, ColumnFamilyState, Increment, Op, encode_increment
from statestore.options import StoreOptions
from statestore.undo import PriorValues, PriorValuesRegistry, UndoRecord

DEFAULT_COLUMN_FAMILY = "default"
_VERSION_KEY = b"version"
_STORE_ID_KEY = b"store_id"
_LINEAGE_KEY = b"lineage"
_COUNT_PREFIX = b"count/"
_U64 = struct.Struct(">q")
# DeleteRange needs an upper bound; keys at or above it (absurd in practice) are deleted one by one.
_DROP_RANGE_END = b"\xff" * 32

_PUT, _DELETE, _MERGE = int(Op.PUT), int(Op.DELETE), int(Op.MERGE)


@dataclass
class _PendingColumnFamily:
    """Uncommitted changes to one column family."""

    drops_committed: bool = False  # the committed column family was dropped: reads ignore it
    exists: bool = True
    writes: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)  # key -> (op, value)


def _count_key(cf: str) -> bytes:
    return _COUNT_PREFIX + cf.encode("utf-8")


def _holds_no_records(db: Rdict, names: list[str]) -> bool:
    """Whether every column family of `db` is empty (a database just created)."""
    for name in names:
        family = db.get_column_family(name)
        try:
            if next(iter(family.keys()), None) is not None:
                return False
        finally:
            family.close()
    return True


def _in_key_order(cf_indexes: list[int], keys: list[bytes]) -> list[int]:
    """An increment's record numbers by column family, then key (stable: equal keys keep their order)."""
    if len(keys) >= _NUMPY_SORT_FROM:
        order = _fixed_width_key_order(cf_indexes, keys)
        if order is not None:
            return order
    if len(set(cf_indexes)) <= 1:
        return sorted(range(len(keys)), key=keys.__getitem__)
    return sorted(range(len(keys)), key=lambda i: (cf_indexes[i], keys[i]))


# Below this many records, Python's sort is as fast as building the arrays.
_NUMPY_SORT_FROM = 512


def _fixed_width_key_order(cf_indexes: list[int], keys: list[bytes]) -> list[int] | None:
    """`_in_key_order` by numpy when every key has one length, a multiple of 8 (Spark's UnsafeRow keys are): a
    key's bytewise order is the order of its big-endian 64-bit words, so a stable sort on those words (the ones
    not equal in every key, as the null bits often are) orders the records; about 2.5x faster than Python's sort
    on a 90,000-record increment. None when the keys do not qualify."""
    lengths = set(map(len, keys))
    if len(lengths) != 1:
        return None
    width = lengths.pop()
    if width == 0 or width % 8:
        return None
    words = np.frombuffer(b"".join(keys), dtype=">u8").reshape(len(keys), width // 8)
    varying = [words[:, c] for c in range(width // 8) if words[:, c].min() != words[:, c].max()]
    if len(set(cf_indexes)) > 1:
        varying.insert(0, np.asarray(cf_indexes))
    if not varying:
        return list(range(len(keys)))
    if len(varying) == 1:
        return np.argsort(varying[0], kind="stable").tolist()
    return np.lexsort(varying[::-1]).tolist()


class VersionedStore:
    """One store partition: a RocksDB directory at a committed version plus an open transaction."""

    def __init__(self, path: Path, store_id: str, db: Rdict, options: StoreOptions, read_only: bool = False) -> None:
        self.path = path
        self.store_id = store_id
        self.read_only = read_only
        self._db = db
        self._options = options
        self._write_options = WriteOptions()
        self._write_options.sync = options.sync_writes
        self._write_options.memtable_insert_hint_per_batch = True  # a batch's keys arrive in order (_write)
        self._meta = db.get_column_family(META_COLUMN_FAMILY)
        self._meta_handle = db.get_column_family_handle(META_COLUMN_FAMILY)
        self._tables: dict[str, Rdict] = {}
        self._handles: dict[str, object] = {}
        self._pending: dict[str, _PendingColumnFamily] = {}
        self._drop_order: list[str] = []
        self._closed = False
        self._priors = PriorValuesRegistry()
        self._write_failed = False
        raw_version = self._meta.get(_VERSION_KEY)
        self._version = _U64.unpack(raw_version)[0] if raw_version is not None else 0
        raw_lineage = self._meta.get(_LINEAGE_KEY)
        if raw_lineage is not None and len(raw_lineage) == LINEAGE_BYTES:
            self._lineage: bytes | None = bytes(raw_lineage)
        else:  # a store written before lineages, past version 0: which history it holds is not known
            self._lineage = EMPTY_LINEAGE if self._version == 0 else None
        self._counts: dict[str, int] = {
            key[len(_COUNT_PREFIX) :].decode("utf-8"): _U64.unpack(value)[0]
            for key, value in self._meta.items(from_key=_COUNT_PREFIX)
            if key.startswith(_COUNT_PREFIX)
        }

    # ----------------------------------------------------------------- opening and closing

    @classmethod
    def open(
        cls, path: str | Path, store_id: str, options: StoreOptions | None = None, read_only: bool = False
    ) -> VersionedStore:
        """Open the store in `path`, creating an empty store at version 0 if the directory has none.

        With `read_only`, the directory must hold a store already; it is opened as a RocksDB read-only
        instance (it may be open for writing in another process: reads see its state at opening time),
        and every write, commit or apply raises StateStoreError.

        Raises StoreIdentityError if the directory holds another store partition, StateStoreError if it holds
        a RocksDB database that is not a statestore store (adopting it would serve its data as version 0).
        """
        path = Path(path)
        options = options or StoreOptions()
        exists = (path / "CURRENT").exists()
        if read_only and not exists:
            raise StateStoreError(f"cannot open {path} read-only: no RocksDB store there")
        if not exists:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreWriteError(f"cannot create store directory {path}: {exc.strerror}") from exc
        create = not read_only
        rocks_options = options.rocksdb_options(create=create)
        try:
            names = Rdict.list_cf(str(path), rocks_options) if exists else [DEFAULT_COLUMN_FAMILY]
        except Exception as exc:  # rocksdict raises plain Exception for RocksDB errors
            raise StateStoreError(f"cannot read the column families of RocksDB store at {path}: {exc}") from exc
        if exists and META_COLUMN_FAMILY not in names:
            how = "read-only" if read_only else "as a store"
            raise StateStoreError(
                f"cannot open {path} {how}: it holds a RocksDB database that is not a statestore store "
                f"(no {META_COLUMN_FAMILY} column family); move it away or choose another directory"
            )
        families = {name: options.rocksdb_options(create=create) for name in names}
        if read_only:
            access = AccessType.read_only()
        else:
            families.setdefault(META_COLUMN_FAMILY, options.rocksdb_options(create=True))
            access = AccessType.read_write()
        try:
            db = Rdict(str(path), rocks_options, column_families=families, access_type=access)
        except Exception as exc:
            raise StateStoreError(f"cannot open RocksDB store at {path}: {exc}") from exc
        meta = None
        try:
            meta = db.get_column_family(META_COLUMN_FAMILY)
            found_id = meta.get(_STORE_ID_KEY)
            if found_id is None and not read_only and _holds_no_records(db, names):
                # Created by an open that stopped before recording its identity: empty, so it is ours to claim.
                batch = WriteBatch(raw_mode=True)
                handle = db.get_column_family_handle(META_COLUMN_FAMILY)
                batch.put(_STORE_ID_KEY, store_id.encode("utf-8"), handle)
                batch.put(_VERSION_KEY, _U64.pack(0), handle)
                batch.put(_LINEAGE_KEY, EMPTY_LINEAGE, handle)
                batch.put(_count_key(DEFAULT_COLUMN_FAMILY), _U64.pack(0), handle)
                db.write(batch)
            elif found_id is None:
                raise StateStoreError(
                    f"cannot open {path} as store {store_id!r}: its {META_COLUMN_FAMILY} column family names no "
                    "store but the database holds records; move it away or choose another directory"
                )
            elif found_id.decode("utf-8", "replace") != store_id:
                raise StoreIdentityError(store_id, found_id.decode("utf-8", "replace"), f"RocksDB directory {path}")
            meta.close()
            meta = None
            return cls(path, store_id, db, options, read_only)
        except BaseException as exc:
            # RocksDB's lock is held until every column-family object is closed: close all before raising.
            for closeable in (meta, db):
                if closeable is not None:
                    with contextlib.suppress(Exception):
                        closeable.close()
            if isinstance(exc, Exception) and not isinstance(exc, StateStoreError):
                raise StateStoreError(f"cannot open RocksDB store at {path}: {exc}") from exc
            raise

    def _require_writable(self, what: str) -> None:
        if self.read_only:
            raise StateStoreError(f"store {self.store_id!r} at {self.path} is open read-only: cannot {what}")

    def close(self) -> None:
        """Close the database; uncommitted writes are discarded. Closing twice is harmless."""
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        self._drop_order.clear()
        self._priors.release_all()  # an undo record's snapshot would keep the database open
        # RocksDB's lock is released only once every column-family object and handle is gone, so every
        # close is attempted even when one fails.
        errors = []
        for closeable in [*self._tables.values(), self._meta, self._db]:
            try:
                closeable.close()
            except Exception as exc:
                errors.append(exc)
        self._tables.clear()
        self._handles.clear()
        self._meta_handle = None
        # After a failed write RocksDB refuses to flush on close; the committed versions are safe in its
        # log, so that refusal is expected and not reported.
        if errors and not self._write_failed:
            raise StoreWriteError(f"store {self.store_id!r}: closing {self.path} failed: {errors[0]}")

    def __enter__(self) -> VersionedStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------- state

    @property
    def version(self) -> int:
        """The committed version."""
        return self._version

    @property
    def lineage(self) -> bytes | None:
        """The lineage of the committed version (docs/formats.md section 3.4), None when not known."""
        return self._lineage

    @property
    def has_uncommitted_changes(self) -> bool:
        """Whether the open transaction holds writes."""
        return bool(self._pending)

    def column_families(self) -> list[str]:
        """User column families that exist, uncommitted changes included, sorted."""
        names = {cf for cf in self._counts if not self._pending.get(cf, _PendingColumnFamily()).drops_committed}
        names.update(cf for cf, pending in self._pending.items() if pending.exists)
        names.difference_update(cf for cf, pending in self._pending.items() if not pending.exists)
        return sorted(names)

    def _exists(self, cf: str) -> bool:
        pending = self._pending.get(cf)
        if pending is not None:
            return pending.exists
        return cf in self._counts

    def _require(self, cf: str) -> None:
        if not self._exists(cf):
            raise UnknownColumnFamilyError(f"store {self.store_id!r}: no column family {cf!r}")

    def _table(self, cf: str) -> Rdict:
        table = self._tables.get(cf)
        if table is None:
            table = self._physical_family(cf)
            self._tables[cf] = table
        return table

    def _handle(self, cf: str) -> object:
        handle = self._handles.get(cf)
        if handle is None:
            self._physical_family(cf)
            handle = self._db.get_column_family_handle(cf)
            self._handles[cf] = handle
        return handle

    def _physical_family(self, cf: str) -> Rdict:
        # Creating an empty physical column family early is harmless: a family exists for readers only
        # once its count key is committed (docs/formats.md section 2).
        try:
            return self._db.get_column_family(cf)
        except Exception:
            return self._db.create_column_family(cf, self._options.rocksdb_options(create=True))

    # ----------------------------------------------------------------- reads

    def _committed_value(self, cf: str, key: bytes) -> bytes | None:
        pending = self._pending.get(cf)
        if (pending is not None and pending.drops_committed) or cf not in self._counts:
            return None
        return self._table(cf).get(key)

    def get(self, key: bytes, cf: str = DEFAULT_COLUMN_FAMILY) -> bytes | None:
        """The value of `key`, uncommitted writes included, or None."""
        self._require(cf)
        pending = self._pending.get(cf)
        if pending is not None:
            write = pending.writes.get(key)
            if write is not None:
                op, value = write
                if op == _PUT:
                    return value
                if op == _DELETE:
                    return None
                return (self._committed_value(cf, key) or b"") + value
        return self._committed_value(cf, key)

    def scan_range(
        self, start: bytes | None = None, end: bytes | None = None, cf: str = DEFAULT_COLUMN_FAMILY
    ) -> Iterator[tuple[bytes, bytes]]:
        """Pairs with `start <= key < end` in key order (None: unbounded), uncommitted writes included."""
        self._require(cf)

        def in_range(key: bytes) -> bool:
            return (start is None or key >= start) and (end is None or key < end)

        return self._merged_scan(cf, start, in_range, lambda key: end is not None and key >= end)

    def scan_prefix(self, prefix: bytes, cf: str = DEFAULT_COLUMN_FAMILY) -> Iterator[tuple[bytes, bytes]]:
        """Pairs whose key starts with `prefix`, in key order, uncommitted writes included."""
        self._require(cf)
        return self._merged_scan(cf, prefix, lambda key: key.startswith(prefix), lambda key: not key.startswith(prefix))

    def items(self, cf: str = DEFAULT_COLUMN_FAMILY) -> Iterator[tuple[bytes, bytes]]:
        """Every pair of the column family in key order, uncommitted writes included."""
        return self.scan_range(None, None, cf)

    def _committed_scan(
        self, cf: str, start: bytes | None, past_end: Callable[[bytes], bool]
    ) -> Iterator[tuple[bytes, bytes]]:
        pending = self._pending.get(cf)
        if (pending is not None and pending.drops_committed) or cf not in self._counts:
            return
        for key, value in self._table(cf).items(from_key=start):
            if past_end(key):
                return
            yield key, value

    def _merged_scan(
        self,
        cf: str,
        start: bytes | None,
        in_range: Callable[[bytes], bool],
        past_end: Callable[[bytes], bool],
    ) -> Iterator[tuple[bytes, bytes]]:
        pending = self._pending.get(cf)
        writes = pending.writes if pending is not None else {}
        overlay = sorted((key, write) for key, write in writes.items() if in_range(key))
        position = 0
        for key, value in self._committed_scan(cf, start, past_end):
            while position < len(overlay) and overlay[position][0] < key:
                yield from self._resolve(overlay[position][0], overlay[position][1], None)
                position += 1
            if position < len(overlay) and overlay[position][0] == key:
                yield from self._resolve(key, overlay[position][1], value)
                position += 1
            else:
                yield key, value
        for key, write in overlay[position:]:
            yield from self._resolve(key, write, None)

    @staticmethod
    def _resolve(key: bytes, write: tuple[int, bytes], committed: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        op, value = write
        if op == _PUT:
            yield key, value
        elif op == _MERGE:
            yield key, (committed or b"") + value

    def count(self, cf: str = DEFAULT_COLUMN_FAMILY) -> int:
        """Exact number of keys in the column family, uncommitted writes included."""
        self._require(cf)
        pending = self._pending.get(cf)
        if pending is None:
            return self._counts[cf]
        return self._count_after(cf, pending, self._committed_values(cf, pending))

    # ----------------------------------------------------------------- writes

    def _pending_for_write(self, cf: str) -> _PendingColumnFamily:
        self._require(cf)
        pending = self._pending.get(cf)
        if pending is None:
            pending = self._pending[cf] = _PendingColumnFamily()
        return pending

    def put(self, key: bytes, value: bytes, cf: str = DEFAULT_COLUMN_FAMILY) -> None:
        """Set `key` to `value` (empty values are legal)."""
        self._require_writable("put")
        self._pending_for_write(cf).writes[bytes(key)] = (_PUT, bytes(value))

    def delete(self, key: bytes, cf: str = DEFAULT_COLUMN_FAMILY) -> None:
        """Remove `key`; removing an absent key is not an error."""
        self._require_writable("delete")
        self._pending_for_write(cf).writes[bytes(key)] = (_DELETE, b"")

    def merge(self, key: bytes, operand: bytes, cf: str = DEFAULT_COLUMN_FAMILY) -> None:
        """Append `operand` to the value of `key` (an absent key counts as the empty value)."""
        self._require_writable("merge")
        writes = self._pending_for_write(cf).writes
        key = bytes(key)
        previous = writes.get(key)
        if previous is None:
            writes[key] = (_MERGE, bytes(operand))
        elif previous[0] == _DELETE:
            writes[key] = (_PUT, bytes(operand))
        else:
            writes[key] = (previous[0], previous[1] + operand)

    def create_column_family(self, cf: str) -> None:
        """Create an empty user column family; creating one that exists is not an error."""
        self._require_writable("create a column family")
        if cf == META_COLUMN_FAMILY or not cf:
            raise StateStoreError(f"store {self.store_id!r}: {cf!r} is not a valid column family name")
        if self._exists(cf):
            return
        pending = self._pending.get(cf)
        if pending is None:
            self._pending[cf] = _PendingColumnFamily(drops_committed=False, exists=True)
        else:
            pending.exists = True

    def drop_column_family(self, cf: str) -> bool:
        """Remove a user column family and all its keys; returns whether it existed."""
        self._require_writable("drop a column family")
        if not self._exists(cf):
            return False
        pending = self._pending.get(cf)
        if pending is None:
            pending = self._pending[cf] = _PendingColumnFamily()
        pending.writes.clear()
        pending.exists = False
        if cf in self._counts and not pending.drops_committed:
            pending.drops_committed = True
            self._drop_order.append(cf)
        return True

    def abort(self) -> None:
        """Discard every uncommitted write; the store stays at its committed version."""
        self._pending.clear()
        self._drop_order.clear()

    # ----------------------------------------------------------------- commit and apply

    def _committed_values(self, cf: str, pending: _PendingColumnFamily) -> list[bytes | None]:
        """Committed values of the pending keys, in sorted key order."""
        if pending.drops_committed or cf not in self._counts or not pending.writes:
            return [None] * len(pending.writes)
        return self._table(cf).get(sorted(pending.writes))

    def _count_after(self, cf: str, pending: _PendingColumnFamily, committed: list[bytes | None]) -> int:
        if not pending.exists:
            return 0
        count = 0 if pending.drops_committed else self._counts.get(cf, 0)
        for (_, (op, _value)), before in zip(sorted(pending.writes.items()), committed, strict=True):
            count += (op != _DELETE) - (before is not None)
        return count

    def commit(
        self, version: int | None = None, before_local_write: Callable[[Increment], None] | None = None
    ) -> Increment:
        """Make the open transaction version `version` (default: the next one) and return its increment.

        A `version` other than the committed version plus one raises VersionMismatchError.

        `before_local_write(increment)` runs before anything is written locally (the checkpoint location
        writes the increment durably there); if it raises, nothing changes and the transaction stays
        open. Raises StoreWriteError if the local write fails; the store then stays at its last version.
        """
        self._require_writable(f"commit version {self._version + 1}")
        if version is not None and version != self._version + 1:
            raise VersionMismatchError(self.store_id, version - 1, self._version, f"committing version {version}")
        increment = Increment(self.store_id, self._version + 1, self._version, parent_lineage=self._lineage)
        table: dict[str, int] = {}

        def cf_index(cf: str) -> int:
            if cf not in table:
                table[cf] = len(table)
            return table[cf]

        ops = bytearray()
        for cf in self._drop_order:
            ops.append(Op.DROP_COLUMN_FAMILY)
            increment.cf_indexes.append(cf_index(cf))
            increment.keys.append(b"")
            increment.values.append(b"")
        counts: dict[str, int] = {}
        for cf in sorted(self._pending):
            pending = self._pending[cf]
            committed = self._committed_values(cf, pending)
            index = cf_index(cf)
            for key, (op, value) in sorted(pending.writes.items()):
                ops.append(op)
                increment.cf_indexes.append(index)
                increment.keys.append(key)
                increment.values.append(value)
            counts[cf] = self._count_after(cf, pending, committed)
        increment.ops = bytes(ops)
        increment.column_families = [ColumnFamilyState(cf, self._pending[cf].exists, counts[cf]) for cf in table]
        if before_local_write is not None:
            before_local_write(increment)
        if increment.lineage is None:
            encode_increment(increment)  # sets its lineage, which the store records
        self._write(increment)
        return increment

    def apply(self, increment: Increment) -> bool:
        """Play `increment` on this store; returns False if the store already holds its version.

        Raises StoreIdentityError for another store's increment, VersionMismatchError for a version gap,
        LineageMismatchError when the increment continues another history than the one this store holds,
        StateStoreError if this store has uncommitted writes.
        """
        self._require_writable(f"apply increment {increment.version}")
        if increment.store_id != self.store_id:
            raise StoreIdentityError(self.store_id, increment.store_id, f"increment {increment.version}")
        if self._version == increment.version and self._holds_other_history(increment):
            raise LineageMismatchError(
                self.store_id, self._version, self._lineage, increment.lineage,
                f"increment {increment.version} (another history at the version the store holds)",
            )  # fmt: skip
        if self._version >= increment.version:
            return False
        if self._version != increment.base_version:
            raise VersionMismatchError(
                self.store_id,
                increment.base_version,
                self._version,
                f"applying increment {increment.version}",
            )
        if self._pending:
            raise StateStoreError(
                f"store {self.store_id!r}: cannot apply increment {increment.version} over uncommitted writes"
            )
        parent = increment.parent_lineage
        if self._lineage is not None and parent is not None and parent != self._lineage:
            raise LineageMismatchError(
                self.store_id, self._version, self._lineage, parent, f"increment {increment.version}"
            )
        self._write(increment)
        return True

    def _holds_other_history(self, increment: Increment) -> bool:
        """Whether this store's version is `increment.version` of another history: both lineages known, unequal."""
        return self._lineage is not None and increment.lineage is not None and increment.lineage != self._lineage

    def undo_record(self, increment: Increment) -> UndoRecord | None:
        """The record that would take this store back from `increment` (about to be applied on its version) to
        the version it holds now; None when the increment drops a column family (its keys are not read back)."""
        if Op.DROP_COLUMN_FAMILY in increment.ops or self._pending:
            return None
        names = [cf.name for cf in increment.column_families]
        # Under the caller's hold on the store (no write between this and the apply), so the snapshots read the
        # version held now. The keys' values are read from them only if the record is ever played.
        snapshots = {cf: self._table(cf).snapshot() if cf in self._counts else None for cf in names}
        prior = self._priors.add(PriorValues(increment.version, names, snapshots, increment.cf_indexes, increment.keys))
        counts = {cf: self._counts.get(cf) for cf in names}
        return UndoRecord(increment.version, self._version, self._lineage, counts, prior)

    def revert(self, undo: UndoRecord) -> None:
        """Take this store back from `undo.version` to `undo.base_version` in one atomic write batch.

        Raises VersionMismatchError unless the store holds `undo.version`, StateStoreError over uncommitted
        writes, StoreWriteError if the write fails (the store then stays where it was)."""
        self._require_writable(f"revert version {undo.version}")
        if self._version != undo.version:
            raise VersionMismatchError(self.store_id, undo.version, self._version, f"reverting to {undo.base_version}")
        if self._pending:
            raise StateStoreError(
                f"store {self.store_id!r}: cannot revert version {undo.version} over uncommitted writes"
            )
        batch = WriteBatch(raw_mode=True)
        for cf, key, value in undo.before():
            if value is None:
                batch.delete(key, self._handle(cf))
            else:
                batch.put(key, value, self._handle(cf))
        meta = self._meta_handle
        batch.put(_VERSION_KEY, _U64.pack(undo.base_version), meta)
        if undo.base_lineage is not None:
            batch.put(_LINEAGE_KEY, undo.base_lineage, meta)
        else:
            batch.delete(_LINEAGE_KEY, meta)
        for cf, count in undo.counts.items():
            if count is None:
                batch.delete(_count_key(cf), meta)
            else:
                batch.put(_count_key(cf), _U64.pack(count), meta)
        self._write_batch(batch, f"reverting version {undo.version}")
        self._version = undo.base_version
        self._lineage = undo.base_lineage
        for cf, count in undo.counts.items():
            if count is None:
                self._counts.pop(cf, None)
            else:
                self._counts[cf] = count

    def _write(self, increment: Increment) -> None:
        """Write an increment's records, version and counts in one atomic batch and adopt them."""
        batch = WriteBatch(raw_mode=True)
        handles = [self._handle(cf.name) for cf in increment.column_families]
        if not len(increment.ops) == len(increment.cf_indexes) == len(increment.keys) == len(increment.values):
            raise StateStoreError(
                f"store {self.store_id!r}: increment {increment.version} has columns of unequal length"
            )
        if Op.MERGE in increment.ops or Op.DROP_COLUMN_FAMILY in increment.ops:
            self._add_records_reading_bases(batch, increment, handles)
        else:
            # In key order: RocksDB inserts sorted keys into its memtable about a third faster than the random
            # order a primary wrote them in (a replica applies every increment). The sort is stable, so a key
            # written twice in one increment still ends with its last write.
            order = _in_key_order(increment.cf_indexes, increment.keys)
            if len(handles) == 1 and _DELETE not in increment.ops:
                # The common increment (one column family, puts only) without a Python loop per record: the
                # loop was a quarter of a replica's apply.
                puts = map(batch.put, map(increment.keys.__getitem__, order),
                           map(increment.values.__getitem__, order), repeat(handles[0]))  # fmt: skip
                deque(puts, maxlen=0)
            else:
                columns = (increment.ops, increment.cf_indexes, increment.keys, increment.values)
                ordered = zip(*(map(column.__getitem__, order) for column in columns), strict=True)
                for op, index, key, value in ordered:
                    if op == _PUT:
                        batch.put(key, value, handles[index])
                    else:
                        batch.delete(key, handles[index])
        meta = self._meta_handle
        batch.put(_VERSION_KEY, _U64.pack(increment.version), meta)
        # Known only when the increment names a parent and it is the lineage this store holds.
        known = self._lineage is not None and increment.parent_lineage == self._lineage
        lineage = increment.lineage if known else None
        if lineage is not None:
            batch.put(_LINEAGE_KEY, lineage, meta)
        else:
            batch.delete(_LINEAGE_KEY, meta)
        for cf in increment.column_families:
            if cf.exists:
                batch.put(_count_key(cf.name), _U64.pack(cf.key_count), meta)
            else:
                batch.delete(_count_key(cf.name), meta)
        self._write_batch(batch, f"writing version {increment.version}")
        self._version = increment.version
        self._lineage = lineage
        for cf in increment.column_families:
            if cf.exists:
                self._counts[cf.name] = cf.key_count
            else:
                self._counts.pop(cf.name, None)
        self._pending.clear()
        self._drop_order.clear()

    def _write_batch(self, batch: WriteBatch, what: str) -> None:
        """Write `batch` atomically; StoreWriteError saying `what` failed (the store stays at its version)."""
        try:
            self._db.write(batch, self._write_options)
        except Exception as exc:
            self._write_failed = True
            raise StoreWriteError(
                f"store {self.store_id!r} at {self.path}: {what} failed, store stays at version {self._version}: {exc}"
            ) from exc

    def _add_records_reading_bases(self, batch: WriteBatch, increment: Increment, handles: list) -> None:
        """The general path: a merge needs the value its key has at that point of the increment."""
        written: dict[tuple[int, bytes], bytes | None] = {}
        dropped: set[int] = set()
        for op, index, key, value in zip(
            increment.ops, increment.cf_indexes, increment.keys, increment.values, strict=True
        ):
            handle = handles[index]
            if op == _PUT:
                batch.put(key, value, handle)
                written[(index, key)] = value
            elif op == _DELETE:
                batch.delete(key, handle)
                written[(index, key)] = None
            elif op == _MERGE:
                if (index, key) in written:
                    base = written[(index, key)]
                elif index in dropped:
                    base = None
                else:
                    base = self._committed_value_of(increment.column_families[index].name, key)
                result = (base or b"") + value
                batch.put(key, result, handle)
                written[(index, key)] = result
            else:
                self._delete_everything(batch, increment.column_families[index].name, handle)
                dropped.add(index)
                written = {k: v for k, v in written.items() if k[0] != index}

    def _committed_value_of(self, cf: str, key: bytes) -> bytes | None:
        if cf not in self._counts:
            return None
        return self._table(cf).get(key)

    def _delete_everything(self, batch: WriteBatch, cf: str, handle: object) -> None:
        batch.delete_range(b"", _DROP_RANGE_END, handle)
        if cf in self._counts:
            for key in self._table(cf).keys(from_key=_DROP_RANGE_END):
                batch.delete(key, handle)

    # ----------------------------------------------------------------- snapshots

    def checkpoint(self, destination: str | Path) -> Path:
        """Write a RocksDB checkpoint of the committed version into `destination` (must not exist)."""
        destination = Path(destination)
        if self._pending:
            raise StateStoreError(f"store {self.store_id!r}: cannot checkpoint over uncommitted writes")
        try:
            Checkpoint(self._db).create_checkpoint(os.fspath(destination))
        except Exception as exc:
            raise StoreWriteError(
                f"store {self.store_id!r}: checkpoint of version {self._version} into {destination} failed: {exc}"
            ) from exc
        return destination
