"""A store partition's checkpoint location: durable increments and snapshots, restore and retention.

The directory stands for Spark's checkpoint location of one store partition (docs/formats.md
section 5): `<v>.increment` files and `<v>.snapshot/` directories. It is a local path or a URI of a remote
file system (`s3a://`, `abfss://`, `gs://`, `hdfs://`); every access goes through statestore.checkpoint_fs.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from statestore.checkpoint_fs import CheckpointFS, CheckpointFSError, resolve
from statestore.errors import (
    CorruptFileError,
    MissingCheckpointFileError,
    StateStoreError,
    StoreIdentityError,
    StoreWriteError,
    VersionMismatchError,
)
from statestore.increment import Increment, decode_increment, encode_increment, read_increment_header
from statestore.options import StoreOptions
from statestore.snapshot import (
    MANIFEST_NAME,
    SnapshotManifest,
    copy_snapshot_files,
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


def _abandoned(lineage: bytes, version: int, kept: bytes) -> str:
    return (
        f"lineage {lineage.hex()}, increment {version} has {kept.hex()} (a snapshot of a history a re-run batch "
        "abandoned)"
    )


class CheckpointLocation:
    """The durable home of one store partition's increments and snapshots.

    `location` is a local path (or `file:` URI) or a remote URI (statestore.checkpoint_fs); an unsupported
    scheme raises UnsupportedLocationError here. Remote file systems are contacted on first use.
    """

    def __init__(self, location: str | Path, store_id: str, compress: bool = False) -> None:
        self.fs: CheckpointFS
        self.fs, self.root = resolve(location)
        self.store_id = store_id
        self.compress = compress

    # ----------------------------------------------------------------- names and listings

    @property
    def is_local(self) -> bool:
        """Whether the location is on the local file system."""
        return self.fs.is_local

    @property
    def uri(self) -> str:
        """The location as messages name it (a local path, or the remote URI)."""
        return self.fs.uri(self.root)

    @property
    def path(self) -> Path:
        """The local directory of the location (local locations only: use `uri` and `fs` for any)."""
        return Path(self._local_root())

    def _local_root(self) -> str:
        if not self.fs.is_local:
            raise CheckpointFSError(self.uri, "not a local directory")
        return self.root

    def increment_file(self, version: int) -> str:
        """Where increment `version` lives, as a path of `fs`."""
        return self.fs.join(self.root, f"{version}{INCREMENT_SUFFIX}")

    def snapshot_dir(self, version: int) -> str:
        """Where the snapshot of `version` lives, as a path of `fs`."""
        return self.fs.join(self.root, f"{version}{SNAPSHOT_SUFFIX}")

    def increment_path(self, version: int) -> Path:
        """Where increment `version` lives (local locations only)."""
        self._local_root()
        return Path(self.increment_file(version))

    def snapshot_path(self, version: int) -> Path:
        """Where the snapshot of `version` lives (local locations only)."""
        self._local_root()
        return Path(self.snapshot_dir(version))

    def _listing(self, suffix: str) -> list[int]:
        versions = []
        for entry in self.fs.list_dir(self.root):
            match = _VERSIONED_NAME.match(entry.name)
            if match and match.group(2) == suffix:
                versions.append(int(match.group(1)))
        return sorted(versions)

    def increment_versions(self) -> list[int]:
        """Versions whose increment file is present, ascending."""
        return self._listing(INCREMENT_SUFFIX)

    def snapshot_versions(self) -> list[int]:
        """Versions with a complete snapshot (manifest present), ascending."""
        return [
            v
            for v in self._listing(SNAPSHOT_SUFFIX)
            if self.fs.exists(self.fs.join(self.snapshot_dir(v), MANIFEST_NAME))
        ]

    def latest_version(self) -> int:
        """The newest version this location can restore (0 when empty)."""
        return max([0, *self.increment_versions(), *self.snapshot_versions()])

    def increment_sizes(self, versions: list[int]) -> dict[int, int]:
        """The sizes in bytes of those of increments `versions` that are present: a stat of each on a local
        location, one listing of a remote one."""
        if self.fs.is_local:
            sizes = {}
            for v in versions:
                try:
                    sizes[v] = self.fs.size(self.increment_file(v))
                except FileNotFoundError:
                    continue
            return sizes
        wanted = set(versions)
        listed = {entry.name: entry.size for entry in self.fs.list_dir(self.root) if not entry.is_dir}
        return {v: listed[f"{v}{INCREMENT_SUFFIX}"] for v in sorted(wanted) if f"{v}{INCREMENT_SUFFIX}" in listed}

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
        target = self.increment_file(increment.version)
        try:
            self.fs.write_atomically(target, data)
        except OSError as exc:
            raise StoreWriteError(f"{self.fs.uri(target)}: writing failed: {exc.strerror or exc}") from exc
        return len(data)

    def _supersede_history_from(self, version: int) -> None:
        """Delete the files of an abandoned history at or above `version` before it is rewritten.

        After a store was rolled back to `version - 1`, increments above `version` and snapshots at or
        above it describe states that no longer follow; restoring through them would be wrong. Newest
        first, so a crash midway leaves a consistent prefix.
        """
        if not (self.fs.exists(self.increment_file(version + 1)) or self.fs.exists(self.snapshot_dir(version))):
            return
        stale = [(v, self.snapshot_dir(v)) for v in self._listing(SNAPSHOT_SUFFIX) if v >= version]
        stale += [(v, self.increment_file(v)) for v in self.increment_versions() if v > version]
        self._delete([path for _v, path in sorted(stale, reverse=True)], "superseding history")

    def _delete(self, paths: list[str], why: str) -> None:
        for path in paths:
            try:
                self.fs.delete(path)
            except OSError as exc:
                raise StoreWriteError(f"{self.fs.uri(path)}: deleting ({why}) failed: {exc.strerror or exc}") from exc

    def commit(self, store: VersionedStore, version: int | None = None) -> Increment:
        """Commit the store's open transaction, writing its increment here before the store changes."""
        return store.commit(version, before_local_write=self.write_increment)

    def write_snapshot(self, store: VersionedStore) -> SnapshotManifest:
        """Snapshot the store's committed version here (a no-op returning the manifest if one exists)."""
        if store.store_id != self.store_id:
            raise StoreIdentityError(self.store_id, store.store_id, f"snapshot of version {store.version}")
        destination = self.snapshot_dir(store.version)
        if self.fs.exists(self.fs.join(destination, MANIFEST_NAME)):
            return read_manifest(destination, self.fs)
        if self.fs.exists(destination):  # an incomplete snapshot from a crash: rebuild it
            self._delete([destination], "rebuilding an incomplete snapshot")
        self.fs.make_dirs(self.root)
        return write_snapshot(store, destination, self.fs)

    # ----------------------------------------------------------------- reading and restoring

    def read_increment(self, version: int) -> Increment:
        """Read and verify increment `version`, checking it belongs to this store and version."""
        return self.read_increment_and_bytes(version)[0]

    def read_increment_and_bytes(self, version: int) -> tuple[Increment, bytes]:
        """Increment `version`, read and verified as `read_increment` does, with the file's exact bytes."""
        path = self.increment_file(version)
        name = self.fs.uri(path)
        try:
            data = self.fs.read_bytes(path)
        except FileNotFoundError as exc:
            raise MissingCheckpointFileError(name, f"to reach version {version}") from exc
        increment = decode_increment(data, name)
        if increment.store_id != self.store_id:
            raise StoreIdentityError(self.store_id, increment.store_id, f"increment file {name}")
        if increment.version != version:
            raise CorruptFileError(name, f"holds version {increment.version}, its name says {version}")
        return increment, data

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
                    self.fs.uri(self.snapshot_dir(base)),
                    target,
                    exc,
                )
        if store is None:
            first = next((v for v in range(1, target + 1) if v not in present), None)
            gap = gap or (None if first is None else (first, "the empty store (no usable snapshot at or below it)"))
            if gap is not None:
                raise MissingCheckpointFileError(
                    self.fs.uri(self.increment_file(gap[0])),
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
        snapshot_dir = self.snapshot_dir(base)
        name = self.fs.uri(snapshot_dir)
        try:
            manifest = read_manifest(snapshot_dir, self.fs)
            if manifest.store_id != self.store_id:
                raise StoreIdentityError(self.store_id, manifest.store_id, f"snapshot {name}")
            if manifest.version != base:
                raise CorruptFileError(
                    self.fs.uri(self.fs.join(snapshot_dir, MANIFEST_NAME)),
                    f"holds version {manifest.version}, expected {base}",
                )
            kept = self._lineage_of(base)
            if kept is not None and manifest.lineage is not None and kept != manifest.lineage:
                raise CorruptFileError(name, _abandoned(manifest.lineage, base, kept))
            progress(f"store {self.store_id}: copying snapshot {base} ({manifest.total_bytes} bytes)")
            copy_snapshot_files(snapshot_dir, manifest, local_dir, self.fs)
            store = VersionedStore.open(local_dir, self.store_id, options)
        except BaseException:
            shutil.rmtree(local_dir, ignore_errors=True)
            raise
        try:
            if store.version != base:
                raise CorruptFileError(name, f"database is at version {store.version}, expected {base}")
            kept = self._lineage_of(base)
            if kept is not None and store.lineage is not None and kept != store.lineage:
                raise CorruptFileError(name, _abandoned(store.lineage, base, kept))
            return store
        except BaseException:
            store.close()
            shutil.rmtree(local_dir, ignore_errors=True)
            raise

    def _lineage_of(self, version: int) -> bytes | None:
        """The lineage increment `version` records, or None when it is not here or records none."""
        path = self.increment_file(version)
        try:
            prefix = self.fs.read_prefix(path, 64 + len(self.store_id.encode()))
        except FileNotFoundError:
            return None
        return read_increment_header(prefix, self.fs.uri(path)).lineage

    # ----------------------------------------------------------------- retention

    def retain(self, keep_versions: int) -> list[Path] | list[str]:
        """Delete what restoring the last `keep_versions` versions does not need; returns the deleted paths
        (`Path`s on a local location, URIs on a remote one)."""
        if keep_versions < 1:
            raise ValueError(f"keep_versions must be at least 1, got {keep_versions}")
        oldest_kept = self.latest_version() - keep_versions + 1
        abandoned: list[str] = []
        base = None
        for candidate in sorted((v for v in self.snapshot_versions() if v <= oldest_kept), reverse=True):
            try:
                recorded = read_manifest(self.snapshot_dir(candidate), self.fs).lineage
            except StateStoreError:
                continue  # a restore passes it over and needs what lies below it
            kept = self._lineage_of(candidate)
            if recorded is None or kept is None or recorded == kept:
                base = candidate
                break
            # Of a history a re-run batch abandoned. As a base, the increments below it would go, increment
            # `candidate` (the kept history's lineage at that version) with them, and nothing could then tell the
            # snapshot from the state a restore needs.
            abandoned.append(self.snapshot_dir(candidate))
        if base is None:
            self._delete(abandoned, "retention: snapshot of an abandoned history")
            return [Path(p) for p in abandoned] if self.fs.is_local else [self.fs.uri(p) for p in abandoned]
        doomed = [self.snapshot_dir(v) for v in self._listing(SNAPSHOT_SUFFIX) if v < base]
        doomed += abandoned
        doomed += [self.increment_file(v) for v in self.increment_versions() if v <= base]
        self._delete(doomed, "retention")
        if self.fs.is_local:
            return [Path(p) for p in doomed]
        return [self.fs.uri(p) for p in doomed]
