"""Replicas: a node's copies of other nodes' partitions, fed increments strictly in version order.

A replica verifies every increment on arrival (decode_increment checks format and checksum), applies
it with the engine in one atomic batch, buffers (bounded) the ones that arrive ahead of a gap, fills
the gap from the primary's node or else the checkpoint location, and bootstraps from a snapshot when it
is new and far behind. Duplicates change nothing.

History rewrites (docs/formats.md section 5): an increment flagged `rewrites_history`, or one whose bytes
differ from those this replica applied (or buffered) for its version, replaces an abandoned history. A
replica holding that version or later discards its store and rebuilds it one version below (restored
from the checkpoint location, else bootstrapped and pulled from the primary's node), then applies it; a
replica below it drops the buffered increments of the abandoned history and proceeds.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import grpc

from statestore import auth
from statestore.checkpoint_location import CheckpointLocation
from statestore.errors import CorruptFileError, LineageMismatchError, StateStoreError
from statestore.faults.points import fault_point
from statestore.increment import EMPTY_LINEAGE, Increment, decode_increment
from statestore.logs import log_event
from statestore.node.bootstrap import receive_snapshot
from statestore.node.catch_up import pull_from_node, read_from_checkpoint_location
from statestore.node.increment_log import increment_checksum
from statestore.node.settings import GRPC_MESSAGE_OPTIONS, NodeSettings
from statestore.partition_key import partition_key
from statestore.rpc import common_pb2, replication_pb2, replication_pb2_grpc
from statestore.store import VersionedStore
from statestore.undo import UndoRecord

_log = logging.getLogger("statestore.node.replica")
_DB_DIR = "db"
_REF_FILE = "store.json"
# Versions whose increment checksum a replica remembers, to recognize a rewritten version by its bytes. Spark
# re-runs only its newest batches; at 4096 a node's replicas of 200 partitions held about 120 MB of them after 4096
# micro-batches (a version's lineage, checked on every apply, catches what this misses).
_FINGERPRINTS = 256
# Versions whose lineage a replica remembers, to recognize a rewrite it already took when it is re-sent late (a
# link's retries of the newest few versions): a few, as a node holds hundreds of replicas.
_LINEAGES = 64
# How often a replica's size on disk is measured again (heartbeats ask for it every half second). A node holds
# hundreds of replicas at Spark's default partitions: at 5 s it listed forty directories a second.
_SIZE_REFRESH_SECONDS = 30.0
# A replica not written to for this long is closed first when the node's open stores pass their budget
# (ReplicaSet.settle): its query has likely stopped or moved, where a running query writes every micro-batch.
IDLE_REPLICA_SECONDS = 300.0


def coarse_size(size: int) -> int:
    """`size` to within 64 KiB, or 6% above 1 MiB: rounded down to a multiple of 64 KiB (at least 64 KiB when not 0)
    or of a sixteenth of its power of two. Placement weighs sizes no finer, and a heartbeat's reports, fingerprinted
    to be sent only when they changed, then change with a replica's size only when it moved by that much."""
    step = max(1 << 16, 1 << max(size.bit_length() - 5, 0))
    return step if 0 < size < step else size - size % step


def _directory_bytes(path: Path) -> int:
    """Total size of the files directly in `path` (a RocksDB directory is flat); 0 if it is gone."""
    total = 0
    with contextlib.suppress(OSError), os.scandir(path) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


class Outcome(enum.Enum):
    """What receiving one increment did (mirrors AckStatus of replication.proto)."""

    APPLIED = replication_pb2.ACK_APPLIED
    DUPLICATE = replication_pb2.ACK_DUPLICATE
    BUFFERED = replication_pb2.ACK_BUFFERED
    REJECTED_CORRUPT = replication_pb2.ACK_REJECTED_CORRUPT
    FAILED = replication_pb2.ACK_FAILED


@dataclass(frozen=True)
class Receipt:
    """The answer to one shipped increment: its outcome and the version now held."""

    outcome: Outcome
    held: int
    detail: str = ""


class Replica:
    """One partition's replica: a VersionedStore under the node's data dir plus a reorder buffer."""

    def __init__(
        self,
        directory: Path,
        store: common_pb2.StoreRef,
        settings: NodeSettings,
        announced: tuple[int, bytes] | None = None,
    ) -> None:
        """The replica in `directory`, its store opened now; or, with `announced` (the version and lineage a
        provider's DEMOTE says its closed directory holds), opened when first used (`_store`)."""
        self.directory = directory
        self.ref = common_pb2.StoreRef()
        self.ref.CopyFrom(store)
        self._settings = settings
        self._lock = threading.RLock()
        self._buffer: dict[int, tuple[Increment, int]] = {}  # version -> (increment, checksum)
        self._buffer_bytes: dict[int, int] = {}
        self._fingerprints: OrderedDict[int, int] = OrderedDict()  # version applied -> checksum of its bytes
        # Version -> its lineage, for the versions of the history this replica holds now (applied or restored).
        self._lineages: OrderedDict[int, bytes] = OrderedDict()
        # An adopted directory is opened when first used, not as its provider hands it over: a stopped query's
        # providers release every store at once (hundreds at Spark's 200 partitions and two operators), and
        # opening each there held the provider's local channel and cost a node's core for seconds, for replicas
        # the controller retires soon after. Until opened, the announced version and lineage stand for the store's.
        self._opened: VersionedStore | None = None
        # The version and lineage of a closed store (adopted, or parked by `park`), which stand for its own.
        self._announced: tuple[int, bytes | None] | None = announced
        if announced is None:
            self._opened = self._open_store()
        self._size = 0
        self._size_measured_at = -_SIZE_REFRESH_SECONDS
        self._held_report: tuple[tuple[int, int], common_pb2.VersionHeld] | None = None
        self._retired = False
        self._last_used = time.monotonic()
        # How to take the store back one version (the last increment applied): a batch Spark re-runs after its
        # executor died loads the version before the one this replica already applied.
        self._undo: UndoRecord | None = None

    @property
    def store_id(self) -> str:
        """The partition's store identity."""
        return self.ref.store_id

    def _open_store(self) -> VersionedStore:
        return VersionedStore.open(
            self.directory / _DB_DIR, self.store_id, self._settings.store_options(self.store_id)
        )

    @property
    def _store(self) -> VersionedStore:
        """The engine store, opened on first use when adopted or parked. A directory that does not hold the
        announced version and lineage (or cannot be opened) is never used: it is replaced by an empty store, which
        catches up as a new replica does (logged why)."""
        opened = self._opened
        if opened is not None:
            return opened
        with self._lock:
            if self._opened is not None:
                return self._opened
            version, lineage = self._announced or (0, b"")
            try:
                opened = self._open_store()
                doubt = (
                    None
                    if opened.version == version and opened.lineage == lineage
                    else f"it holds version {opened.version}, lineage "
                    f"{opened.lineage.hex() if opened.lineage else 'unknown'}, not version {version} as announced"
                )
            except StateStoreError as exc:
                opened, doubt = None, str(exc)
            if doubt is not None:
                log_event(
                    _log, "adopted_directory_refused", logging.WARNING, store=self.store_id, version=version,
                    reason=doubt, detail="replaced by an empty replica, which catches up from the primary",
                )  # fmt: skip
                if opened is not None:
                    opened.close()
                shutil.rmtree(self.directory / _DB_DIR, ignore_errors=True)
                opened = self._open_store()
                self._undo = None
                self._fingerprints.clear()
                self._lineages.clear()
            self._opened = opened
            self._announced = None
            return opened

    @_store.setter
    def _store(self, store: VersionedStore) -> None:
        self._opened = store
        self._announced = None

    @property
    def version(self) -> int:
        """The version held."""
        # `_opened` before `_announced`: `park` sets the second before clearing the first, and `_store` sets the
        # first before clearing the second, so a reader without the lock sees one of them.
        opened = self._opened
        if opened is not None:
            return opened.version
        announced = self._announced
        if announced is not None:
            return announced[0]
        return self._store.version

    @property
    def lineage(self) -> bytes | None:
        """The lineage of the version held (docs/formats.md section 3.4), None when not known."""
        opened = self._opened
        if opened is not None:
            return opened.lineage
        announced = self._announced
        if announced is not None:
            return announced[1]
        return self._store.lineage

    @property
    def is_open(self) -> bool:
        """Whether the replica's store is open (it holds RocksDB's files and memory)."""
        return self._opened is not None

    @property
    def last_used(self) -> float:
        """When (time.monotonic) an increment last reached the replica, or it was made."""
        return self._last_used

    def park(self) -> bool:
        """Close the store, to be opened again on its next use, keeping the version, lineage and undo record it
        holds (the undo record's prior values are read into memory first); False, leaving it open, when another
        thread holds the replica (a receive, catch-up or checkpoint under way) or it is closed already."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            opened = self._opened
            if opened is None or self._retired:
                return False
            if self._undo is not None:
                try:
                    self._undo.keep_in_memory()
                except StateStoreError as exc:
                    log_event(_log, "undo_record_dropped", logging.INFO, store=self.store_id, error=str(exc))
                    self._undo = None
            self._announced = (opened.version, opened.lineage)
            self._opened = None
            opened.close()
            return True
        finally:
            self._lock.release()

    def size_bytes(self) -> int:
        """Bytes of the replica's store on disk, measured at most every few seconds (for placement)."""
        now = time.monotonic()
        if now - self._size_measured_at > _SIZE_REFRESH_SECONDS:
            self._size = coarse_size(_directory_bytes(self.directory / _DB_DIR))
            self._size_measured_at = now
        return self._size

    def held_report(self) -> common_pb2.VersionHeld:
        """The version held and size, as heartbeats report them (built again only when either changed: a node
        reports hundreds of replicas twice a second). Callers copy it, never change it."""
        key = (self.version, self.size_bytes())
        cached = self._held_report
        if cached is None or cached[0] != key:
            cached = (key, common_pb2.VersionHeld(store=self.ref, version=key[0], size_bytes=key[1]))
            self._held_report = cached
        return cached[1]

    # ----------------------------------------------------------------- receiving increments

    def receive(self, blob: common_pb2.IncrementBlob, primary_address: str) -> Receipt:
        """Handle one shipped increment: apply, buffer, or reject it, filling gaps as needed."""
        with self._lock:
            self._last_used = time.monotonic()
            if self._retired:
                return Receipt(Outcome.FAILED, 0, f"the replica of {self.store_id} was dropped meanwhile")
            try:
                increment = decode_increment(
                    blob.data, f"increment {blob.version} of {self.store_id} from {primary_address}"
                )
            except CorruptFileError as exc:
                log_event(
                    _log,
                    "increment_rejected",
                    logging.WARNING,
                    store=self.store_id,
                    version=blob.version,
                    primary=primary_address,
                    error=exc.problem,
                )
                try:
                    self._fill_on_kept_history(blob.version, primary_address)  # fetch it again from a sound source
                except StateStoreError as fill_exc:
                    log_event(_log, "catch_up_failed", logging.WARNING, store=self.store_id, error=str(fill_exc))
                return Receipt(Outcome.REJECTED_CORRUPT, self.version, exc.problem)
            try:
                fault_point("apply", self.store_id)
                receipt = self._receive_verified(
                    increment, increment_checksum(blob.data), primary_address, blob.rewrites_history
                )
                if receipt.outcome is Outcome.APPLIED:
                    fault_point("applied", self.store_id)
                return receipt
            except StateStoreError as exc:
                log_event(
                    _log, "apply_failed", logging.ERROR, store=self.store_id, version=increment.version, error=str(exc)
                )
                return Receipt(Outcome.FAILED, self.version, str(exc))

    def _receive_verified(
        self, increment: Increment, checksum: int, primary_address: str, rewrites_history: bool
    ) -> Receipt:
        if increment.store_id != self.store_id:
            return Receipt(Outcome.FAILED, self.version, f"increment of store {increment.store_id!r}")
        version = increment.version
        if rewrites_history or self._contradicts(version, checksum):
            self._drop_buffered_from(version)
            # Holding exactly `version` with these very bytes: the rewrite was already handled (or changed
            # nothing), and nothing of an abandoned history lies beyond it.
            handled = self._runs_through(increment, checksum)
            if self.version >= version and not handled:
                self._rewind(increment.base_version, primary_address, "flagged" if rewrites_history else "bytes")
        if version <= self.version:
            return Receipt(Outcome.DUPLICATE, self.version)
        if increment.base_version == self.version:
            try:
                self._apply(increment, checksum)
            except LineageMismatchError as exc:
                # This replica holds a history Spark abandoned (its parent is not the increment's): rebuild it on
                # the checkpoint location's history, then apply. Fails again only if that disagrees too.
                log_event(_log, "lineage_mismatch", logging.WARNING, store=self.store_id, error=str(exc))
                self._rewind(increment.base_version, primary_address, "lineage")
                self._fill(increment.base_version, primary_address)
                self._apply(increment, checksum)
            self._drain_buffer()
            return Receipt(Outcome.APPLIED, self.version)
        self._keep_in_buffer(increment, checksum)
        if self.version == 0 and increment.base_version >= self._settings.bootstrap_min_gap:
            self._bootstrap(primary_address)
        self._fill_on_kept_history(increment.base_version, primary_address, (increment, checksum))
        if self.version >= increment.version:
            return Receipt(Outcome.APPLIED, self.version)
        return Receipt(Outcome.BUFFERED, self.version, f"gap: holding {self.version}, lacks {self.version + 1}")

    def _runs_through(self, increment: Increment, checksum: int) -> bool:
        """Whether the history this replica holds runs through these very bytes of `increment.version`: a rewrite
        it already took. The shipper retries refused increments independently, so a rewritten version re-sent
        may arrive after the one that followed it; rewinding then would take a caught-up replica back."""
        version = increment.version
        if version > self.version:
            return False
        if self._fingerprints.get(version) == checksum:
            return True
        return increment.lineage is not None and self._lineages.get(version) == increment.lineage

    def _remember_lineage(self) -> None:
        """Note the lineage of the version the store holds now, when it is known."""
        lineage = self._store.lineage
        if lineage is None:
            return
        self._lineages.pop(self.version, None)
        self._lineages[self.version] = lineage
        while len(self._lineages) > _LINEAGES:
            self._lineages.popitem(last=False)

    def _contradicts(self, version: int, checksum: int) -> bool:
        """Whether this replica applied (or buffered) other bytes for `version`: a rewritten history."""
        if version <= self.version:
            known = self._fingerprints.get(version)
        else:
            known = self._buffer[version][1] if version in self._buffer else None
        return known is not None and known != checksum

    def _apply(self, increment: Increment, checksum: int) -> None:
        undo = self._store.undo_record(increment) if increment.base_version == self._store.version else None
        if self._store.apply(increment):
            self._undo = undo
            self._fingerprints.pop(increment.version, None)
            self._fingerprints[increment.version] = checksum
            while len(self._fingerprints) > _FINGERPRINTS:
                self._fingerprints.popitem(last=False)
            self._remember_lineage()

    def _keep_in_buffer(self, increment: Increment, checksum: int) -> None:
        size = sum(len(k) + len(v) for k, v in zip(increment.keys, increment.values, strict=True))
        if sum(self._buffer_bytes.values()) + size > self._settings.reorder_buffer_bytes:
            # The newest can be pulled again later; keeping the oldest fills the gap soonest.
            log_event(_log, "reorder_buffer_full", logging.WARNING, store=self.store_id, dropped=increment.version)
            return
        self._buffer[increment.version] = (increment, checksum)
        self._buffer_bytes[increment.version] = size

    def _drop_buffered_from(self, version: int) -> None:
        for buffered in [v for v in self._buffer if v >= version]:
            del self._buffer[buffered]
            del self._buffer_bytes[buffered]

    def _drain_buffer(self) -> None:
        for version in sorted(self._buffer):
            if version > self.version + 1:
                return
            buffered = self._buffer.pop(version)
            self._buffer_bytes.pop(version)  # before applying: an apply that fails must not keep its bytes counted
            if version != self.version + 1:
                continue
            try:
                self._apply(*buffered)
            except LineageMismatchError as exc:
                # Buffered from a history Spark abandoned (the version below it was rewritten since): dropped with
                # whatever was buffered past it; the replica fills the gap from the kept history when it next can.
                self._drop_buffered_from(version)
                log_event(_log, "buffered_increments_dropped", logging.WARNING, store=self.store_id,
                          from_version=version, error=str(exc))  # fmt: skip
                return

    # ----------------------------------------------------------------- catch-up

    def _fill_on_kept_history(
        self, target: int, primary_address: str, waiting: tuple[Increment, int] | None = None
    ) -> None:
        """`_fill`, and if what it pulls continues another history than the one this replica holds (it holds a
        version Spark abandoned and re-ran, and the first increment of the kept history it got lies beyond the
        next version), rebuild it on the kept history and fill again; `waiting` (an increment past the gap, which
        the rebuild drops from the buffer) is buffered again. Without this the replica stayed on the abandoned
        version for good: every later increment's catch-up met the same mismatch."""
        try:
            self._fill(target, primary_address)
        except LineageMismatchError as exc:
            log_event(_log, "lineage_mismatch", logging.WARNING, store=self.store_id, error=str(exc))
            self._rewind(exc.version, primary_address, "lineage")
            if waiting is not None:
                self._keep_in_buffer(*waiting)
            self._fill(target, primary_address)

    def _fill(self, target: int, primary_address: str) -> None:
        """Apply the increments up to `target` that this replica lacks, from the primary, else the checkpoint;
        then the buffered ones that follow."""
        if self.version >= target:
            # A bootstrap may have landed right below a buffered increment: nothing to pull, but it applies now
            # (left in the buffer, it waited for the next commit, the replica a version behind until then).
            self._drain_buffer()
            return
        start = self.version
        used: list[str] = []
        for name in ("primary", "checkpoint_location"):
            if self.version >= target:
                break
            used.append(name)
            if name == "primary":
                increments = pull_from_node(
                    primary_address, self.ref, self.version + 1, target, self._settings.peer_timeout
                )
            else:
                increments = read_from_checkpoint_location(self.ref, self.version + 1, target)
            with contextlib.closing(increments):
                for increment, checksum in increments:
                    if self._retired:
                        break  # dropped meanwhile: nobody wants this catch-up any more
                    self._apply(increment, checksum)
                    self._drain_buffer()
                    if self.version >= target:
                        break
        log_event(
            _log,
            "catch_up",
            store=self.store_id,
            from_version=start,
            to_version=self.version,
            target=target,
            sources=used,
            complete=self.version >= target,
        )
        self._drain_buffer()

    def _rewind(self, target: int, primary_address: str, reason: str) -> None:
        """Discard this replica's store and rebuild it at version `target`, below a rewritten version: from
        the checkpoint location if it restores `target`, else from a snapshot of the primary's node (the
        caller then pulls what lies between). Ends at `target` or below, never in the abandoned history."""
        held = self.version
        self._buffer.clear()
        self._buffer_bytes.clear()
        for version in [v for v in self._fingerprints if v > target]:
            del self._fingerprints[version]
        for version in [v for v in self._lineages if v > target]:
            del self._lineages[version]
        source = "undo_record" if self._revert_one(target) else self._rebuild(target, primary_address)
        log_event(
            _log,
            "history_rewound",
            logging.WARNING,
            store=self.store_id,
            reason=reason,
            held=held,
            target=target,
            version=self.version,
            source=source,
        )

    def _rebuild(self, target: int, primary_address: str) -> str:
        """Replace the store by one at `target` (or below, or empty): restored from the checkpoint location, else
        a snapshot of the primary's node. Returns where it came from."""
        restored = self._restore_from_checkpoint_location(target)
        self._replace_store(restored)
        source = "checkpoint_location" if restored is not None else "none"
        if self.version != target and target > 0:
            self._bootstrap(primary_address)
            source = "primary_snapshot" if self.version > 0 else source
        if self.version > target:  # a snapshot past the rewritten version cannot be used
            self._replace_store(None)
            source = "none"
        return source

    def _revert_one(self, target: int) -> bool:
        """Take the store back to `target` with the undo record of the version it holds, if that is one version
        above `target`; False (the store unchanged) otherwise."""
        undo, self._undo = self._undo, None
        if undo is None or undo.version != self.version or undo.base_version != target or target <= 0:
            return False
        try:
            self._store.revert(undo)
        except StateStoreError as exc:
            log_event(_log, "revert_failed", logging.WARNING, store=self.store_id, version=undo.version, error=str(exc))
            return False
        return True

    def _restore_from_checkpoint_location(self, version: int) -> Path | None:
        """A directory holding the store restored at `version` from the checkpoint location, or None."""
        if not self.ref.checkpoint_dir:
            return None
        staging = self.directory / f".rewind-{uuid.uuid4().hex}.tmp"
        try:
            location = CheckpointLocation(self.ref.checkpoint_dir, self.store_id)
            location.restore(staging, version, self._settings.store_options(self.store_id)).close()
        except (StateStoreError, OSError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            log_event(
                _log, "checkpoint_restore_failed", logging.INFO, store=self.store_id, version=version, error=str(exc)
            )
            return None
        return staging

    def _replace_store(self, directory: Path | None) -> None:
        """Swap the store for the one in `directory` (renamed into place), or an empty one if None. If the swap
        fails (a full disk, a damaged directory), the replica is left empty, never on the store it was replacing
        (closed, and perhaps of an abandoned history); if even an empty store cannot be made, it reports version 0
        and tries again when next used."""
        self._undo = None
        # What was known of the versions applied described the store being replaced (a restored or bootstrapped
        # version may differ from the one applied under its number).
        self._fingerprints.clear()
        self._lineages.clear()
        db = self.directory / _DB_DIR
        with contextlib.suppress(StateStoreError):  # it is discarded either way
            self._store.close()
        self._opened, self._announced = None, (0, EMPTY_LINEAGE)
        try:
            shutil.rmtree(db, ignore_errors=True)
            if directory is not None:
                directory.rename(db)
            self._store = self._open_store()
        except (StateStoreError, OSError) as exc:
            log_event(_log, "replica_rebuild_failed", logging.WARNING, store=self.store_id, error=str(exc),
                      detail="left empty: it catches up as a new replica does")  # fmt: skip
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
            shutil.rmtree(db, ignore_errors=True)
            self._store = self._open_store()
        self._remember_lineage()

    def _bootstrap(self, primary_address: str) -> None:
        """Replace this (empty) replica by a snapshot streamed from the primary's node."""
        if not primary_address:
            return
        staging = self.directory / f".bootstrap-{uuid.uuid4().hex}.tmp"
        request = replication_pb2.BootstrapRequest(
            store=self.ref,
            bytes_per_second=self._settings.bootstrap_bytes_per_second,
            chunk_bytes=self._settings.bootstrap_chunk_bytes,
        )
        log_event(_log, "bootstrap_started", store=self.store_id, peer=primary_address)
        try:
            with auth.channel(primary_address, GRPC_MESSAGE_OPTIONS) as channel:
                stub = replication_pb2_grpc.ReplicationStub(channel)
                chunks = stub.Bootstrap(request, timeout=self._settings.peer_timeout * 30)
                manifest = receive_snapshot(
                    self._unless_retired(chunks), staging, f"snapshot of {self.store_id} from {primary_address}"
                )
            if manifest.store_id != self.store_id:
                raise CorruptFileError(primary_address, f"snapshot of store {manifest.store_id!r}")
            candidate = VersionedStore.open(staging, self.store_id, self._settings.store_options(self.store_id))
            if candidate.version != manifest.version:
                candidate.close()
                raise CorruptFileError(
                    primary_address, f"snapshot at version {candidate.version}, manifest says {manifest.version}"
                )
            candidate.close()
        except grpc.RpcError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            level = logging.INFO if exc.code() == grpc.StatusCode.NOT_FOUND else logging.WARNING
            log_event(
                _log,
                "bootstrap_unavailable",
                level,
                store=self.store_id,
                peer=primary_address,
                code=exc.code().name,
                detail=exc.details(),
            )
            return
        except StateStoreError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            log_event(
                _log, "bootstrap_failed", logging.WARNING, store=self.store_id, peer=primary_address, error=str(exc)
            )
            return
        self._replace_store(staging)
        log_event(
            _log,
            "bootstrap_done",
            store=self.store_id,
            version=self.version,
            bytes=manifest.total_bytes,
            peer=primary_address,
        )

    # ----------------------------------------------------------------- serving and closing

    def checkpoint_into(self, target: Path, at_most: int, wait_seconds: float | None = None) -> tuple[int, bytes] | str:
        """A RocksDB checkpoint of this replica (hard links where the file system allows) written to `target`,
        if it holds `at_most` or an older version of a known lineage: returns (version, lineage); else why not.
        A replica one version past `at_most` (Spark re-runs the batch it applied) writes its checkpoint taken
        back by its undo record. Under the replica's lock, so no increment is applied meanwhile; waited for at most
        `wait_seconds` (None: as long as it takes)."""
        if not self._lock.acquire(timeout=-1 if wait_seconds is None else max(wait_seconds, 0.0)):
            return "the replica is busy (a catch-up or a bootstrap under way) past the load's deadline"
        try:
            return self._checkpoint_locked(target, at_most)
        finally:
            self._lock.release()

    def _checkpoint_locked(self, target: Path, at_most: int) -> tuple[int, bytes] | str:
        if self._retired:
            return "the replica was dropped"
        # Open an adopted directory first: one that does not hold what was announced is replaced by an empty
        # store, which must not be handed out as the announced version's.
        self._store  # noqa: B018
        if self.version == at_most + 1 and at_most > 0:
            return self._checkpoint_before_last(target)
        if self.version > at_most:
            return f"the replica holds version {self.version}, past {at_most}"
        if self.lineage is None:
            return f"the lineage of the replica's version {self.version} is not known"
        if self.version == 0:
            return "the replica is empty"
        self._store.checkpoint(target)
        return self.version, self.lineage

    def _checkpoint_before_last(self, target: Path) -> tuple[int, bytes] | str:
        """A checkpoint of the version before the one held, written to `target` (the checkpoint taken back by
        the undo record there: the replica itself stays), or why not."""
        undo = self._undo
        if undo is None or undo.version != self.version:
            return f"the replica holds version {self.version}, past {self.version - 1}, and has no undo record of it"
        if undo.base_lineage is None:
            return f"the lineage of the replica's version {undo.base_version} is not known"
        self._store.checkpoint(target)
        try:
            with VersionedStore.open(target, self.store_id, self._settings.store_options(self.store_id)) as copy:
                copy.revert(undo)
        except StateStoreError as exc:
            shutil.rmtree(target, ignore_errors=True)
            return f"taking the replica's copy back to version {undo.base_version} failed: {exc}"
        return undo.base_version, undo.base_lineage

    def locked(self) -> threading.RLock:
        """The replica's lock: hold it to read `store` while no increment is applied."""
        return self._lock

    @property
    def store(self) -> VersionedStore:
        """The engine store (read it only under `locked()`)."""
        return self._store

    def close(self) -> None:
        """Close the store (an adopted one never opened has nothing to close)."""
        with self._lock:
            if self._opened is not None:
                self._opened.close()

    def mark_retired(self) -> None:
        """Flag the replica dropped, without waiting for its lock: a catch-up or bootstrap under way stops at
        its next step, and increments still arriving are refused."""
        self._retired = True

    @property
    def retired(self) -> bool:
        """Whether the replica was dropped."""
        return self._retired

    def _unless_retired(
        self, chunks: Iterator[replication_pb2.SnapshotChunk]
    ) -> Iterator[replication_pb2.SnapshotChunk]:
        for chunk in chunks:
            if self._retired:
                chunks.cancel()  # type: ignore[attr-defined]  # a gRPC response stream
                raise StateStoreError(f"the replica of {self.store_id} was dropped during its bootstrap")
            yield chunk


def _last_used(replica: Replica) -> float:
    return replica.last_used


def replica_directory_name(ref: common_pb2.StoreRef) -> str:
    """A new directory for a replica under `<data dir>/replicas/`: the url-quoted store id, a digest of the
    checkpoint location (two queries share store ids), and a random suffix (a replica being deleted may
    still occupy the previous one); docs/node.md. `store.json` inside names the partition."""
    digest = hashlib.sha256(ref.checkpoint_dir.encode("utf-8")).hexdigest()[:16]
    return f"{quote(ref.store_id, safe='')}-{digest}-{uuid.uuid4().hex[:8]}"


def _delete_replica(replica: Replica) -> None:
    """Close a dropped replica once no receive or catch-up holds it, then delete its directory."""
    with replica.locked():
        with contextlib.suppress(StateStoreError):
            replica.close()
        # store.json first: a crash midway must not leave a half-deleted replica that reopens.
        (replica.directory / _REF_FILE).unlink(missing_ok=True)
        shutil.rmtree(replica.directory, ignore_errors=True)


def _write_ref(directory: Path, ref: common_pb2.StoreRef) -> None:
    staging = directory / f".{_REF_FILE}.tmp"
    staging.write_text(json.dumps({"store_id": ref.store_id, "checkpoint_dir": ref.checkpoint_dir}))
    staging.replace(directory / _REF_FILE)


class ReplicaSet:
    """Every replica a node holds, one directory each under `<data dir>/replicas/`, keyed by partition key
    (`statestore.partition_key`: store id and checkpoint location)."""

    def __init__(self, root: Path, settings: NodeSettings) -> None:
        self.root = root
        self._settings = settings
        self._replicas: dict[str, Replica] = {}
        self._lock = threading.Lock()

    def open_existing(self) -> None:
        """Reopen the replicas a previous run of this node left in its data dir."""
        self.root.mkdir(parents=True, exist_ok=True)
        for directory in sorted(self.root.iterdir()):
            ref_file = directory / _REF_FILE
            if not ref_file.is_file():
                continue
            document = json.loads(ref_file.read_text())
            ref = common_pb2.StoreRef(store_id=document["store_id"], checkpoint_dir=document["checkpoint_dir"])
            replica = Replica(directory, ref, self._settings)
            self._replicas[partition_key(ref)] = replica
            log_event(
                _log, "replica_reopened", store=ref.store_id, checkpoint=ref.checkpoint_dir, version=replica.version
            )

    def get(self, ref: common_pb2.StoreRef) -> Replica | None:
        """The replica of the partition `ref` names, if held."""
        with self._lock:
            return self._replicas.get(partition_key(ref))

    def get_or_create(self, ref: common_pb2.StoreRef) -> Replica:
        """The replica of `ref`, created empty (version 0) on first use."""
        key = partition_key(ref)
        with self._lock:
            replica = self._replicas.get(key)
            if replica is None:
                directory = self.root / replica_directory_name(ref)
                directory.mkdir(parents=True, exist_ok=True)
                _write_ref(directory, ref)
                replica = self._replicas[key] = Replica(directory, ref, self._settings)
                log_event(_log, "replica_created", store=ref.store_id, checkpoint=ref.checkpoint_dir)
        return replica

    def adopt(self, ref: common_pb2.StoreRef, db_dir: Path, version: int, lineage: bytes | None) -> str:
        """Take `db_dir`, a closed store of partition `ref` at `version` with `lineage` (a provider's unloaded
        local directory, docs/formats.md section 6 DEMOTE), as this node's replica of it: moved, not copied
        (it must be on the data dir's file system). Refused when a replica is held already (`db_dir` is then
        left where it is, for its owner to delete) or no store is there (it is then deleted). The store is opened,
        and its version and lineage checked against the announced ones, when the replica is first used (a
        directory that differs is replaced by an empty replica then, logged). Returns a note saying which."""
        key = partition_key(ref)
        with self._lock:
            if key in self._replicas:
                return f"kept the replica held (version {self._replicas[key].version}); the directory is not needed"
            directory = self.root / replica_directory_name(ref)
            directory.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(db_dir, directory / _DB_DIR)
            except OSError as exc:
                shutil.rmtree(directory, ignore_errors=True)
                return f"cannot move {db_dir} into {directory}: {exc.strerror or exc}"
            if lineage is None or version < 1 or not (directory / _DB_DIR / "CURRENT").is_file():
                shutil.rmtree(directory, ignore_errors=True)
                return f"not adopted: no store at version {version} of known lineage in {db_dir}"
            # Opened, and its version and lineage checked, when first used (Replica._store).
            replica = Replica(directory, ref, self._settings, announced=(version, lineage))
            _write_ref(directory, ref)
            self._replicas[key] = replica
        log_event(_log, "replica_adopted", store=ref.store_id, checkpoint=ref.checkpoint_dir, version=version)
        return f"adopted as a replica at version {version}"

    def drop(self, ref: common_pb2.StoreRef, reason: str) -> bool:
        """Delete the replica of `ref` if held; returns whether one was. Called when this node became the
        partition's primary (the primary's own store supersedes the replica, which may hold a history the
        primary abandoned) and when the controller retires it (docs/node.md).

        Returns at once (callers are the heartbeat and shipping threads): the replica is flagged so that
        work under way on it stops, and a background thread closes and deletes it once its lock is free. A
        new replica of the partition gets a directory of its own meanwhile.
        """
        with self._lock:
            replica = self._replicas.pop(partition_key(ref), None)
            if replica is None:
                return False
            replica.mark_retired()
        log_event(
            _log,
            "replica_dropped",
            store=ref.store_id,
            checkpoint=ref.checkpoint_dir,
            version=replica.version,
            reason=reason,
        )
        threading.Thread(target=_delete_replica, args=(replica,), name="replica-delete", daemon=True).start()
        return True

    def settle(self, used: Replica) -> None:
        """Keep at most `max_open_replicas` replicas' stores open, after `used` received an increment: each open
        store holds about 7 files (its lock, info log, manifest, WAL, directory handles and SSTs), so a node holding
        hundreds of replicas would pass a common limit of 1,024 open files. Past the budget, replicas not written
        to for `IDLE_REPLICA_SECONDS` are closed first (oldest first), then `used` itself: replicas receive an
        increment each micro-batch in turn, and closing the one just written keeps the others open, where closing
        the least recently used would close each replica before its next increment. A closed replica opens again
        on its next use (about 5 ms, and its memtable becomes a small SST). 0: no budget."""
        budget = self._settings.max_open_replicas
        if budget <= 0:
            return
        with self._lock:
            open_replicas = [r for r in self._replicas.values() if r.is_open]
        excess = len(open_replicas) - budget
        if excess <= 0:
            return
        idle_before = time.monotonic() - IDLE_REPLICA_SECONDS
        idle = sorted((r for r in open_replicas if r is not used and r.last_used < idle_before), key=_last_used)
        for replica in [*idle[:excess], used][:excess]:
            replica.park()

    def open_count(self) -> int:
        """How many replicas' stores are open."""
        with self._lock:
            return sum(1 for r in self._replicas.values() if r.is_open)

    def held(self) -> list[common_pb2.VersionHeld]:
        """The version held of every replica."""
        with self._lock:
            replicas = list(self._replicas.values())
        return [r.held_report() for r in replicas]

    def close(self) -> None:
        """Close every replica's store."""
        with self._lock:
            replicas = list(self._replicas.values())
            self._replicas.clear()
        for replica in replicas:
            try:
                replica.close()
            except StateStoreError as exc:
                log_event(_log, "close_failed", logging.WARNING, store=replica.store_id, error=str(exc))
