"""Undo records: what takes a store back one version, kept as a RocksDB snapshot taken before the version's
increment was applied, and read only if the store is ever taken back.

A replica keeps the undo record of the version it holds for two rare events: Spark re-running the batch it
applied (a materialize one version below) and a primary rewriting that version (a rewind). Reading every touched
key's old value as each increment arrived was half of a replica node's CPU at 8 partitions (one multi-get per
increment); a snapshot costs well under a microsecond and keeps the old values inside RocksDB until the next
increment replaces the record."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from statestore.errors import StateStoreError

# rocksdict's snapshots raise a plain Exception with this text for an absent key, and a plain Exception for a
# failed read too: anything else is a read error, never taken for an absent key.
_ABSENT = "key not found"


class PriorValues:
    """The values an increment's keys had before it was applied: one snapshot per column family it touches
    (None for a family that did not exist: every key absent). A snapshot keeps its database open, so the store
    that made it releases it when it closes; reading after that raises StateStoreError."""

    __slots__ = ("__weakref__", "_cf_indexes", "_families", "_kept", "_keys", "_snapshots", "_version")

    def __init__(
        self, version: int, families: Sequence[str], snapshots: dict[str, Any | None], cf_indexes: Sequence[int],
        keys: Sequence[bytes],
    ) -> None:  # fmt: skip
        self._version = version
        self._families = list(families)
        self._snapshots: dict[str, Any | None] | None = snapshots
        self._cf_indexes = cf_indexes
        self._keys = keys
        self._kept: list[tuple[str, bytes, bytes | None]] | None = None

    def release(self) -> None:
        """Let go of the snapshots (their database may then close); values kept in memory stay readable."""
        self._snapshots = None

    def keep_in_memory(self) -> None:
        """Read every touched key's prior value now and keep them in memory, so that the record outlives its
        store's closing (a node closes replicas it holds past its open-store budget)."""
        if self._kept is None:
            self._kept = list(self.read())
            self._snapshots = None

    def read(self) -> Iterator[tuple[str, bytes, bytes | None]]:
        """(column family, key, value before; None: absent) for every key the increment touched (a key touched
        twice appears twice, with the same value)."""
        if self._kept is not None:
            return iter(self._kept)
        return self._read_snapshots()

    def _read_snapshots(self) -> Iterator[tuple[str, bytes, bytes | None]]:
        snapshots = self._snapshots
        if snapshots is None:
            raise StateStoreError(
                f"the undo record of version {self._version} was released: its store was closed since"
            )
        if len(self._families) == 1:
            pairs: Iterator[tuple[int, bytes]] = zip(repeat(0), self._keys)
        else:
            pairs = zip(self._cf_indexes, self._keys, strict=True)
        for index, key in pairs:
            cf = self._families[index]
            yield cf, key, _value_at(snapshots[cf], key, cf, self._version)


def _value_at(snapshot: Any | None, key: bytes, cf: str, version: int) -> bytes | None:
    if snapshot is None:
        return None
    try:
        return snapshot[key]
    except Exception as exc:
        if str(exc) == _ABSENT:
            return None
        raise StateStoreError(f"reading the undo record of version {version} in {cf!r} failed: {exc}") from exc


class PriorValuesRegistry:
    """The undo records a store made that may still be read: released together when the store closes."""

    def __init__(self) -> None:
        self._live: weakref.WeakSet[PriorValues] = weakref.WeakSet()

    def add(self, prior: PriorValues) -> PriorValues:
        """Track `prior` until it is released or forgotten."""
        self._live.add(prior)
        return prior

    def release_all(self) -> None:
        """Release every record still held anywhere."""
        for prior in list(self._live):
            prior.release()
        self._live.clear()


@dataclass(frozen=True, slots=True)
class UndoRecord:
    """What takes a store from `version` back to `base_version`: every key the increment of `version` touched,
    with the value it had before (None: absent), and each touched column family's key count before (None: the
    family did not exist). Made by `VersionedStore.undo_record` before the increment is applied, played by
    `VersionedStore.revert` (on that store, or on a checkpoint of it while the store is open)."""

    version: int
    base_version: int
    base_lineage: bytes | None
    counts: dict[str, int | None]
    prior: PriorValues

    def before(self) -> Iterator[tuple[str, bytes, bytes | None]]:
        """(column family, key, value before) for every key the increment touched."""
        return self.prior.read()

    def keep_in_memory(self) -> None:
        """Make the record independent of its store's snapshots (PriorValues.keep_in_memory)."""
        self.prior.keep_in_memory()
