"""A store partition's checkpoint location: durable increments and snapshots, restore and retention.

The directory stands for Spark's checkpoint location of one store partition (docs/formats.md
section 5): `<v>.increment` files and `<v>.snapshot/` directories.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from statestore.errors import (
    CorruptFileError,
    MissingCheckpointFileError,
    StateStoreError,
    StoreIdentityError,
    StoreWriteError,
    VersionMismatchError,
)
from statestore.increment import Increment, encode_increment, read_increment, read_increment_header
from statestore.options import StoreOptions
from statestore.snapshot import (
    MANIFEST_NAME,
    SnapshotManifest,
    copy_snapshot_files,
    fsync_directory,
    read_manifest,
    write_snapshot,
)
from statestore.store import VersionedStore

INCREMENT_SUFFIX = ".increment"
SNAPSHOT_SUFFIX = ".snapshot"
_VERSIONED_NAME = re.compile(r"^(\d+)(\.increment|\.snapshot)$")

Progress = Callable[[str], None]
_log = logging.getLogger("statestore.checkpoint_location")


def _quiet(_message: str) -> None:
    pass


class CheckpointLocation:
    """The durable home of one store partition's increments and snapshots."""

    def __init__(self, path: str | Path, store_id: str, compress: bool = False) -> None:
        self.path = Path(path)
        self.store_id = store_id
        self.compress = compress

    # ----------------------------------------------------------------- names and listings

    def increment_path(self, version: int) -> Path:
        """Where increment `version` lives."""
        return self.path / f"{version}{INCREMENT_SUFFIX}"

    def snapshot_path(self, version: int) -> Path:
        """Where the snapshot of `version` lives."""
        return self.path / f"{version}{SNAPSHOT_SUFFIX}"

    def _listing(self, suffix: str) -> list[int]:
        if not self.path.is_dir():
            return []
        versions = []
        for entry in self.path.iterdir():
            match = _VERSIONED_NAME.match(entry.name)
            if match and match.group(2) == suffix:
                versions.append(int(match.group(1)))
        return sorted(versions)

    def increment_versions(self) -> list[int]:
        """Versions whose increment file is present, ascending."""
        return self._listing(INCREMENT_SUFFIX)

    def snapshot_versions(self) -> list[int]:
        """Versions with a complete snapshot (manifest present), ascending."""
        return [v for v in self._listing(SNAPSHOT_SUFFIX) if (self.snapshot_path(v) / MANIFEST_NAME).exists()]

    def latest_version(self) -> int:
        """The newest version this location can restore (0 when empty)."""
        return max([0, *self.increment_versions(), *self.snapshot_versions()])

    # ----------------------------------------------------------------- writing

    def write_increment(self, increment: Increment) -> int:
        """Write an increment durably and atomically; returns its size in bytes.

        Raises StoreWriteError (naming the file) when the write fails, e.g. on a full disk; no partial
        file is left behind.
        """
        if increment.store_id != self.store_id:
            raise StoreIdentityError(self.store_id, increment.store_id, f"increment {increment.version}")
        data = encode_increment(increment, compress=self.compress)
        self._supersede_history_from(increment.version)
        target = self.increment_path(increment.version)
        self._write_atomically(target, data)
        return len(data)

    def _supersede_history_from(self, version: int) -> None:
        """Delete the files of an abandoned history at or above `version` before it is rewritten.

        After a store was rolled back to `version - 1`, increments above `version` and snapshots at or
        above it describe states that no longer follow; restoring through them would be wrong. Newest
        first, so a crash midway leaves a consistent prefix.
        """
        if not (self.increment_path(version + 1).exists() or self.snapshot_path(version).exists()):
            return
        stale = [self.snapshot_path(v) for v in self._listing(SNAPSHOT_SUFFIX) if v >= version]
        stale += [self.increment_path(v) for v in self.increment_versions() if v > version]
        self._delete(sorted(stale, key=lambda p: int(p.name.split(".")[0]), reverse=True), "superseding history")

    def _delete(self, paths: list[Path], why: str) -> None:
        for path in paths:
            try:
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
            except OSError as exc:
                raise StoreWriteError(f"{path}: deleting ({why}) failed: {exc.strerror or exc}") from exc

    def _write_atomically(self, target: Path, data: bytes) -> None:
        staging = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(staging, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            staging.replace(target)
            fsync_directory(target.parent)
        except OSError as exc:
            staging.unlink(missing_ok=True)
            raise StoreWriteError(f"{target}: writing failed: {exc.strerror or exc}") from exc

    def commit(self, store: VersionedStore, version: int | None = None) -> Increment:
        """Commit the store's open transaction, writing its increment here before the store changes."""
        return store.commit(version, before_local_write=self.write_increment)

    def write_snapshot(self, store: VersionedStore) -> SnapshotManifest:
        """Snapshot the store's committed version here (a no-op returning the manifest if one exists)."""
        if store.store_id != self.store_id:
            raise StoreIdentityError(self.store_id, store.store_id, f"snapshot of version {store.version}")
        destination = self.snapshot_path(store.version)
        if (destination / MANIFEST_NAME).exists():
            return read_manifest(destination)
        if destination.exists():  # an incomplete snapshot from a crash: rebuild it
            shutil.rmtree(destination)
        self.path.mkdir(parents=True, exist_ok=True)
        return write_snapshot(store, destination)

    # ----------------------------------------------------------------- reading and restoring

    def read_increment(self, version: int) -> Increment:
        """Read and verify increment `version`, checking it belongs to this store and version."""
        path = self.increment_path(version)
        try:
            increment = read_increment(path)
        except FileNotFoundError as exc:
            raise MissingCheckpointFileError(str(path), f"to reach version {version}") from exc
        if increment.store_id != self.store_id:
            raise StoreIdentityError(self.store_id, increment.store_id, f"increment file {path}")
        if increment.version != version:
            raise CorruptFileError(str(path), f"holds version {increment.version}, its name says {version}")
        return increment

    def catch_up(self, store: VersionedStore, version: int, progress: Progress = _quiet) -> VersionedStore:
        """Apply this location's increments to `store` until it is at `version`."""
        if store.version > version:
            raise VersionMismatchError(self.store_id, version, store.version, "catching up")
        total = version - store.version
        for step, v in enumerate(range(store.version + 1, version + 1), start=1):
            store.apply(self.read_increment(v))
            if step == total or step % 100 == 0:
                progress(f"store {self.store_id}: applied increment {v} ({step}/{total})")
        return store

    def restore(
        self,
        local_dir: str | Path,
        version: int | None = None,
        options: StoreOptions | None = None,
        progress: Progress = _quiet,
    ) -> VersionedStore:
        """Build the store at `version` (default: the latest) in `local_dir`, replacing what is there.

        Starts from the newest usable snapshot at or below `version` (or the empty store), then applies
        increments. A snapshot is passed over (logged, and the next older one tried) when it cannot be read
        whole, is of another store or version, or has another lineage than the increment of its version: the
        late upload of a snapshot of a history a re-run batch abandoned. A missing or damaged increment raises
        an error naming it; `local_dir` is then left empty rather than holding a store at a wrong version.
        """
        local_dir = Path(local_dir)
        target = self.latest_version() if version is None else version
        if target < 0:
            raise VersionMismatchError(self.store_id, target, 0, "restore (versions start at 0)")
        present = set(self.increment_versions())
        store = None
        gap: tuple[int, str] | None = None  # the first increment missing above the newest snapshot, named
        passed_over: list[str] = []
        for base in sorted((v for v in self.snapshot_versions() if v <= target), reverse=True):
            missing = next((v for v in range(base + 1, target + 1) if v not in present), None)
            if missing is not None:
                gap = gap or (missing, f"snapshot {base}")
                continue  # an older snapshot needs that increment too
            try:
                store = self._open_snapshot(base, local_dir, options, progress)
                break
            except (StateStoreError, OSError) as exc:
                passed_over.append(f"snapshot {base} passed over: {exc}")
                _log.warning(
                    "store %s: snapshot %s passed over to restore version %s: %s",
                    self.store_id,
                    self.snapshot_path(base),
                    target,
                    exc,
                )
        if store is None:
            first = next((v for v in range(1, target + 1) if v not in present), None)
            gap = gap or (None if first is None else (first, "the empty store (no usable snapshot at or below it)"))
            if gap is not None:
                raise MissingCheckpointFileError(
                    str(self.increment_path(gap[0])),
                    "; ".join([f"to restore version {target} from {gap[1]}", *passed_over]),
                )
            if local_dir.exists():
                shutil.rmtree(local_dir)
            store = VersionedStore.open(local_dir, self.store_id, options)
        try:
            return self.catch_up(store, target, progress)
        except BaseException:
            store.close()
            shutil.rmtree(local_dir, ignore_errors=True)
            raise

    def _open_snapshot(
        self, base: int, local_dir: Path, options: StoreOptions | None, progress: Progress
    ) -> VersionedStore:
        """Snapshot `base` opened in `local_dir` (replacing what is there), checked whole and on this location's
        history. Raises the error that makes it unusable, leaving `local_dir` absent."""
        if local_dir.exists():
            shutil.rmtree(local_dir)
        snapshot_dir = self.snapshot_path(base)
        try:
            manifest = read_manifest(snapshot_dir)
            if manifest.store_id != self.store_id:
                raise StoreIdentityError(self.store_id, manifest.store_id, f"snapshot {snapshot_dir}")
            if manifest.version != base:
                raise CorruptFileError(
                    str(snapshot_dir / MANIFEST_NAME), f"holds version {manifest.version}, expected {base}"
                )
            progress(f"store {self.store_id}: copying snapshot {base} ({manifest.total_bytes} bytes)")
            copy_snapshot_files(snapshot_dir, manifest, local_dir)
            store = VersionedStore.open(local_dir, self.store_id, options)
        except BaseException:
            shutil.rmtree(local_dir, ignore_errors=True)
            raise
        try:
            if store.version != base:
                raise CorruptFileError(str(snapshot_dir), f"database is at version {store.version}, expected {base}")
            kept = self._lineage_of(base)
            if kept is not None and store.lineage is not None and kept != store.lineage:
                raise CorruptFileError(
                    str(snapshot_dir),
                    f"lineage {store.lineage.hex()}, increment {base} has {kept.hex()} (a snapshot of a history a "
                    "re-run batch abandoned)",
                )
            return store
        except BaseException:
            store.close()
            shutil.rmtree(local_dir, ignore_errors=True)
            raise

    def _lineage_of(self, version: int) -> bytes | None:
        """The lineage increment `version` records, or None when it is not here or records none."""
        path = self.increment_path(version)
        try:
            with open(path, "rb") as f:
                prefix = f.read(64 + len(self.store_id.encode()))
        except FileNotFoundError:
            return None
        return read_increment_header(prefix, str(path)).lineage

    # ----------------------------------------------------------------- retention

    def retain(self, keep_versions: int) -> list[Path]:
        """Delete what restoring the last `keep_versions` versions does not need; returns deleted paths."""
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be at least 1, got {keep_versions}")
        oldest_kept = self.latest_version() - keep_versions + 1
        base = max((v for v in self.snapshot_versions() if v <= oldest_kept), default=None)
        if base is None:
            return []
        doomed = [self.snapshot_path(v) for v in self._listing(SNAPSHOT_SUFFIX) if v < base]
        doomed += [self.increment_path(v) for v in self.increment_versions() if v <= base]
        self._delete(doomed, "retention")
        return doomed
