"""Snapshots: a RocksDB checkpoint of one version plus a manifest of its files (docs/formats.md section 4).

Snapshots in a checkpoint location are written and read through statestore.checkpoint_fs (`fs`, the local
file system by default).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

from statestore.checkpoint_fs import LOCAL, CheckpointFS
from statestore.errors import (
    CorruptFileError,
    MissingCheckpointFileError,
    StoreWriteError,
    UnsupportedFormatError,
)
from statestore.increment import LINEAGE_BYTES
from statestore.store import VersionedStore

MANIFEST_NAME = "MANIFEST.json"
SNAPSHOT_FORMAT = "statestore-snapshot"
SNAPSHOT_FORMAT_VERSION = 1
_COPY_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True)
class SnapshotFile:
    """One file of a snapshot with its size and CRC-32."""

    name: str
    size: int
    crc32: int


@dataclass(frozen=True)
class SnapshotManifest:
    """What a snapshot holds: which store, which version, which files."""

    store_id: str
    version: int
    files: tuple[SnapshotFile, ...]
    # The lineage of the snapshot's version (docs/formats.md section 3.4); None when not known or not recorded
    # (snapshots written before it was).
    lineage: bytes | None = None

    @property
    def total_bytes(self) -> int:
        """Bytes of all the snapshot's files."""
        return sum(f.size for f in self.files)

    def to_json(self) -> str:
        """The manifest as the JSON document of docs/formats.md."""
        document: dict[str, object] = {
            "format": SNAPSHOT_FORMAT,
            "format_version": SNAPSHOT_FORMAT_VERSION,
            "store_id": self.store_id,
            "version": self.version,
        }
        if self.lineage is not None:
            document["lineage"] = self.lineage.hex()
        document["files"] = [{"name": f.name, "size": f.size, "crc32": f.crc32} for f in self.files]
        return json.dumps(document, indent=1)


def fsync_directory(path: Path) -> None:
    """Make a directory's entries (created or renamed files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _download_with_crc(fs: CheckpointFS, source: str, destination: Path) -> SnapshotFile:
    """Stream a file of `fs` into a local file durably, computing its CRC-32 on the way."""
    crc = 0
    size = 0
    with fs.open_input(source) as src, open(destination, "wb") as dst:
        while chunk := src.read(_COPY_CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    return SnapshotFile(destination.name, size, crc)


def copy_with_crc(source: Path, destination: Path) -> SnapshotFile:
    """Copy a file durably, computing its CRC-32 on the way."""
    crc = 0
    size = 0
    with open(source, "rb") as src, open(destination, "wb") as dst:
        while chunk := src.read(_COPY_CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    return SnapshotFile(source.name, size, crc)


def write_snapshot(store: VersionedStore, destination: str | Path, fs: CheckpointFS = LOCAL) -> SnapshotManifest:
    """Snapshot the store's committed version into the directory `destination` of `fs` (must not exist).

    On a file system that renames directories atomically it is built in a temporary sibling directory and
    renamed into place once complete, manifest included; on an object store its files are uploaded in place and
    the manifest last (a snapshot counts only once its manifest is there). Either way a crash leaves no
    snapshot or a complete one.
    """
    if not fs.is_local:
        return _upload_snapshot(store, str(destination), fs)
    destination = Path(destination)
    staging = destination.parent / f".{destination.name}.{uuid.uuid4().hex}.tmp"
    # The RocksDB checkpoint goes next to the store so that its files are hard links, not copies.
    local = Path(tempfile.mkdtemp(prefix=".snapshot-", dir=store.path.parent)) / "checkpoint"
    try:
        store.checkpoint(local)
        staging.mkdir(parents=True)
        files = tuple(copy_with_crc(f, staging / f.name) for f in snapshot_files(local))
        manifest = SnapshotManifest(store.store_id, store.version, files, store.lineage)
        with open(staging / MANIFEST_NAME, "w", encoding="utf-8") as out:
            out.write(manifest.to_json())
            out.flush()
            os.fsync(out.fileno())
        fsync_directory(staging)
        staging.rename(destination)
        fsync_directory(destination.parent)
        return manifest
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if not isinstance(exc, OSError):
            raise  # the store's own errors already name it; an interrupt stays one
        raise StoreWriteError(
            f"store {store.store_id!r}: writing snapshot of version {store.version} to {destination} "
            f"failed: {exc.strerror or exc}"
        ) from exc
    finally:
        shutil.rmtree(local.parent, ignore_errors=True)


def _upload_snapshot(store: VersionedStore, destination: str, fs: CheckpointFS) -> SnapshotManifest:
    """`write_snapshot` to a remote file system: the RocksDB checkpoint made locally, then streamed up."""
    local = Path(tempfile.mkdtemp(prefix=".snapshot-", dir=store.path.parent)) / "checkpoint"
    target = f"{destination.rstrip('/')}.{uuid.uuid4().hex}.tmp" if fs.atomic_rename else destination
    try:
        store.checkpoint(local)
        files = []
        for source in snapshot_files(local):
            crc = 0
            size = 0
            with open(source, "rb") as src, fs.open_output(fs.join(target, source.name)) as out:
                while chunk := src.read(_COPY_CHUNK):
                    crc = zlib.crc32(chunk, crc)
                    size += len(chunk)
                    out.write(chunk)
            files.append(SnapshotFile(source.name, size, crc))
        manifest = SnapshotManifest(store.store_id, store.version, tuple(files), store.lineage)
        fs.write_atomically(fs.join(target, MANIFEST_NAME), manifest.to_json().encode("utf-8"))
        if target != destination:
            fs.rename(target, destination)
        return manifest
    except BaseException as exc:
        if target != destination:
            with contextlib.suppress(OSError):
                fs.delete(target)
        if not isinstance(exc, OSError):
            raise
        raise StoreWriteError(
            f"store {store.store_id!r}: writing snapshot of version {store.version} to {fs.uri(destination)} "
            f"failed: {exc.strerror or exc}"
        ) from exc
    finally:
        shutil.rmtree(local.parent, ignore_errors=True)


def file_entry(path: Path) -> SnapshotFile:
    """Size and CRC-32 of a file, read once."""
    crc = 0
    size = 0
    with open(path, "rb") as source:
        while chunk := source.read(_COPY_CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return SnapshotFile(path.name, size, crc)


def snapshot_files(checkpoint_dir: Path) -> list[Path]:
    """The files of a RocksDB checkpoint a snapshot keeps, by name: all but RocksDB's `OPTIONS-*` file, which only
    records the options it was opened with (RocksDB writes a new one at every open, and a restore opens with the
    engine's own options). At Spark's 200 partitions a partition's state is small and that file (about 12 KB) was
    half of each snapshot's bytes."""
    return [f for f in sorted(checkpoint_dir.iterdir()) if f.is_file() and not f.name.startswith("OPTIONS-")]


def manifest_of(checkpoint_dir: Path, store_id: str, version: int) -> SnapshotManifest:
    """The manifest of a RocksDB checkpoint's files, read once for their checksums (nothing is copied): what a
    node streams to a peer from a checkpoint of its replica."""
    files = tuple(file_entry(f) for f in snapshot_files(checkpoint_dir))
    return SnapshotManifest(store_id, version, files)


def read_manifest(snapshot_dir: str | Path, fs: CheckpointFS = LOCAL) -> SnapshotManifest:
    """Read and check a snapshot's manifest (in the directory `snapshot_dir` of `fs`)."""
    path = fs.uri(fs.join(str(snapshot_dir), MANIFEST_NAME))
    try:
        document = json.loads(fs.read_bytes(fs.join(str(snapshot_dir), MANIFEST_NAME)).decode("utf-8"))
    except FileNotFoundError as exc:
        raise MissingCheckpointFileError(str(path), "to read the snapshot") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptFileError(str(path), f"manifest is not valid JSON: {exc}") from exc
    try:
        if document["format"] != SNAPSHOT_FORMAT:
            raise CorruptFileError(str(path), f"not a snapshot manifest: format {document['format']!r}")
        if document["format_version"] != SNAPSHOT_FORMAT_VERSION:
            raise UnsupportedFormatError(
                str(path),
                f"unknown snapshot format version {document['format_version']} "
                f"(this code reads {SNAPSHOT_FORMAT_VERSION})",
            )
        files = tuple(SnapshotFile(str(f["name"]), int(f["size"]), int(f["crc32"])) for f in document["files"])
        for file in files:
            # A snapshot is one flat RocksDB directory: a name that leaves it (or replaces the manifest) is a
            # damaged or hostile manifest, and its restore would write outside the store's directory.
            if not file.name or "/" in file.name or "\\" in file.name or file.name in (".", "..", MANIFEST_NAME):
                raise CorruptFileError(str(path), f"manifest names {file.name!r}, not a file of the snapshot")
        lineage = _lineage_field(document.get("lineage"), str(path))
        return SnapshotManifest(str(document["store_id"]), int(document["version"]), files, lineage)
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptFileError(str(path), f"manifest lacks or mangles a field: {exc!r}") from exc


def _lineage_field(value: object, path: str) -> bytes | None:
    """A manifest's optional `lineage`: 32 hex digits, or absent."""
    if value is None:
        return None
    try:
        lineage = bytes.fromhex(str(value))
    except ValueError:
        lineage = b""
    if len(lineage) != LINEAGE_BYTES:
        raise CorruptFileError(path, f"manifest lineage {value!r} is not {2 * LINEAGE_BYTES} hex digits")
    return lineage


def copy_snapshot_files(
    snapshot_dir: str | Path, manifest: SnapshotManifest, local_dir: Path, fs: CheckpointFS = LOCAL
) -> None:
    """Copy a snapshot's files (in the directory `snapshot_dir` of `fs`) into `local_dir`, streamed, checking
    each size and checksum against the manifest."""
    local_dir.mkdir(parents=True)
    for expected in manifest.files:
        path = fs.join(str(snapshot_dir), expected.name)
        source = fs.uri(path)
        try:
            copied = _download_with_crc(fs, path, local_dir / expected.name)
        except FileNotFoundError as exc:
            raise MissingCheckpointFileError(str(source), f"by snapshot {manifest.version}") from exc
        if copied.size != expected.size:
            raise CorruptFileError(str(source), f"size {copied.size} bytes, manifest says {expected.size}")
        if copied.crc32 != expected.crc32:
            raise CorruptFileError(
                str(source), f"checksum mismatch: manifest {expected.crc32:#010x}, file {copied.crc32:#010x}"
            )
