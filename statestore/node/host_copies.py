"""This host's copies of Spark's RocksDB provider's state files, in the directory format the Java checkpoint file
layer keeps and serves (docs/formats.md section 7): a node writes there the files a peer's host shipped, so that a
load on this host reads them from local disk.

The Java side (`ReplicaFiles.java`) writes the copies of what this host's executors write; a node only adds the
copies it received. A copy the host's own JVM wrote is replaced by a shipped one only when the shipment is of a
later write of the checkpoint's file (its modification time is later: a batch re-run on another host rewrote the
name); otherwise the JVM's write is taken as the newer (a batch re-run here rewrites the file), and a late shipment
from the partition's old host must not win over it. Entries a node wrote carry an index line `node <its id>`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import threading
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

INDEX_SUFFIX = ".index"
HOST_LOCK_NAME = ".host-copies.lock"  # ReplicaFiles.HOST_LOCK
COPIES_DIR_NAME = "statestore-replica-files"
# A state file's name under its partition's directory (StateFilePath.java): an SST, a snapshot, a changelog.
_STATE_FILE_NAME = re.compile(r"^(?:SSTs/[^/]+\.sst|(?P<version>\d+)(?:_[0-9a-fA-F-]+)?\.(?:zip|changelog))$")
_NODE_MARK = "node "
_STORE_MARK = "store "
_MODIFIED_MARK = "modified "
_COPY_NAME = re.compile(r"^[0-9a-f]{16}-")  # copy_name's shape
_LEFTOVER_SECONDS = 3600.0  # a write of the host's processes still under way is younger than this


class FileCopyError(Exception):
    """A shipped file was not kept; the message says why."""


@dataclass(frozen=True)
class Entry:
    """An index entry: the checkpoint path a copy is of, the file's size and CRC32, the node that kept it from a
    peer's shipment ("" when this host's JVM wrote it), for such a copy the partition it is a file of (store id,
    checkpoint location), so that the node finds what it holds again after a restart, and the checkpoint file's
    modification time in ms when it was kept (0: not known)."""

    checkpoint_path: str
    size: int
    crc32: int
    kept_by_node: str
    store: tuple[str, str] | None = None
    modified_ms: int = 0


def index_entry(lines: list[str]) -> Entry | None:
    """The entry an index file's lines hold (None when it has fewer than three): three lines, then marked ones in
    any order."""
    if len(lines) < 3:
        return None
    kept_by_node, store, modified_ms = "", None, 0
    for line in lines[3:]:
        if line.startswith(_NODE_MARK):
            kept_by_node = line[len(_NODE_MARK) :]
        elif line.startswith(_STORE_MARK) and " " in line[len(_STORE_MARK) :]:
            store_id, checkpoint_dir = line[len(_STORE_MARK) :].split(" ", 1)
            store = (store_id, checkpoint_dir)
        elif line.startswith(_MODIFIED_MARK):
            modified_ms = int(line[len(_MODIFIED_MARK) :])
    return Entry(lines[0], int(lines[1]), int(lines[2]), kept_by_node, store, modified_ms)


def state_file_version(name: str) -> int | None:
    """The version state file `name` belongs to (0 for an SST), or None when `name` is no state file name."""
    match = _STATE_FILE_NAME.match(name)
    if match is None:
        return None
    return int(match.group("version") or 0)


def copy_name(checkpoint_path: str, name: str) -> str:
    """The copy's file name (`<digest>-<name>`): the first 16 hex digits of the name-based (MD5) UUID of the
    checkpoint path, as Java's `UUID.nameUUIDFromBytes` makes it, then the name with `/` as `_`."""
    digest = bytearray(hashlib.md5(checkpoint_path.encode("utf-8")).digest())
    digest[6] = (digest[6] & 0x0F) | 0x30  # version 3
    digest[8] = (digest[8] & 0x3F) | 0x80  # IETF variant
    return digest.hex()[:16] + "-" + name.replace("/", "_")


class HostCopies:
    """The host's copies directory (`<base>/statestore-replica-files`), shared with its executors' JVMs."""

    def __init__(self, directory: Path, node_id: str) -> None:
        self.directory = directory
        self._node_id = node_id
        self._threads_lock = threading.Lock()

    def sweep_leftovers(self, older_than_seconds: float = _LEFTOVER_SECONDS) -> int:
        """Deletes what writers killed mid-write left behind, last touched over `older_than_seconds` ago: staging
        files (`.<name>.<uuid>.tmp`) and copies without an index entry (found by nothing, kept by no one). Younger
        ones may be writes still under way in another process of the host. Returns how many were deleted."""
        cutoff = time.time() - older_than_seconds
        names: set[str] = set()
        found = []
        with contextlib.suppress(OSError):
            for item in os.scandir(self.directory):
                names.add(item.name)
                found.append(item)
        deleted = 0
        for item in found:
            staging = item.name.startswith(".") and item.name.endswith(".tmp")
            orphan = (
                _COPY_NAME.match(item.name) is not None
                and not item.name.endswith(INDEX_SUFFIX)
                and item.name + INDEX_SUFFIX not in names
            )
            if not (staging or orphan):
                continue
            try:
                if not item.is_file(follow_symlinks=False) or item.stat(follow_symlinks=False).st_mtime > cutoff:
                    continue
                os.unlink(item.path)
                deleted += 1
            except OSError:
                continue
        return deleted

    def holds_path(self, path: Path) -> bool:
        """Whether `path` names a file directly in this directory (no link leads it elsewhere)."""
        if path.is_symlink():
            return False
        return Path(os.path.realpath(path.parent)) == Path(os.path.realpath(self.directory)) and path.name not in (
            "", ".", "..")

    def copy_path(self, checkpoint_path: str, name: str) -> Path:
        """Where the copy of `checkpoint_path` (whose name under its partition is `name`) lives."""
        return self.directory / copy_name(checkpoint_path, name)

    def entry(self, checkpoint_path: str, name: str) -> Entry | None:
        """The index entry of `checkpoint_path`'s copy, None when there is none (or it is of another path)."""
        index = Path(str(self.copy_path(checkpoint_path, name)) + INDEX_SUFFIX)
        try:
            lines = index.read_text("utf-8").splitlines()
            if len(lines) < 3 or lines[0] != checkpoint_path:
                return None
            return index_entry(lines)
        except (OSError, ValueError, UnicodeDecodeError):
            return None

    def kept_by_this_node(self) -> Iterator[tuple[Entry, str]]:
        """(entry, name under its partition) of every copy this node kept from peers' shipments and that names its
        partition: what it held before a restart."""
        with contextlib.suppress(OSError):
            for found in os.scandir(self.directory):
                if not found.name.endswith(INDEX_SUFFIX) or found.name.startswith("."):
                    continue
                try:
                    entry = index_entry(Path(found.path).read_text("utf-8").splitlines())
                except (OSError, ValueError, UnicodeDecodeError):
                    continue
                if entry is None or entry.kept_by_node != self._node_id or entry.store is None:
                    continue
                parent, _, base = entry.checkpoint_path.rpartition("/")
                name = f"SSTs/{base}" if parent.endswith("/SSTs") else base
                if self.copy_path(entry.checkpoint_path, name).name + INDEX_SUFFIX == found.name:
                    yield entry, name

    def holds(self, checkpoint_path: str, name: str, size: int, crc32: int, modified_ms: int = 0) -> bool:
        """Whether the host has a copy of `checkpoint_path` with that size and checksum (and, when `modified_ms` is
        known, of the write at that modification time)."""
        entry = self.entry(checkpoint_path, name)
        if entry is None or (entry.size, entry.crc32) != (size, crc32):
            return False
        if modified_ms and entry.modified_ms != modified_ms:
            return False
        try:
            return self.copy_path(checkpoint_path, name).stat().st_size == size
        except OSError:
            return False

    def write(
        self, checkpoint_path: str, name: str, size: int, crc32: int, chunks: Iterable[bytes],
        store: tuple[str, str] | None = None, modified_ms: int = 0,
    ) -> str:
        """Keep `chunks` (the file's bytes in order) as the copy of `checkpoint_path`, a file of partition `store`
        (store id, checkpoint location) when given, of the checkpoint file's write at `modified_ms` (0: not known);
        returns what was done.
        Raises FileCopyError when the bytes are not `size` long with CRC32 `crc32`, when the name is no state
        file's, when this host's JVM wrote its own copy of the path and the shipment is not known to be of a
        later write of it, or when the copy held is known to be of a later write than the shipment's."""
        _check_names(checkpoint_path, name)
        if self.holds(checkpoint_path, name, size, crc32, modified_ms):
            # Not read: the answer ends the call, and the sender stops streaming (a peer on the same host shares
            # this directory, so everything it ships is here already).
            return "already held"
        self._check_replaceable(checkpoint_path, name, modified_ms)
        self.directory.mkdir(parents=True, exist_ok=True)
        copy = self.copy_path(checkpoint_path, name)
        staging = self.directory / f".{copy.name}.{uuid.uuid4()}.tmp"
        crc = 0
        written = 0
        try:
            with open(staging, "wb") as out:
                for chunk in chunks:
                    out.write(chunk)
                    crc = zlib.crc32(chunk, crc)
                    written += len(chunk)
                    if written > size:
                        raise FileCopyError(f"{checkpoint_path}: more than the {size} bytes announced arrived")
            if (written, crc) != (size, crc32):
                raise FileCopyError(
                    f"{checkpoint_path}: {written} bytes with CRC32 {crc} arrived, not {size} with {crc32}"
                )
            partition = f"{_STORE_MARK}{store[0]} {store[1]}\n" if store else ""
            modified = f"{_MODIFIED_MARK}{modified_ms}\n" if modified_ms > 0 else ""
            with self._host_lock():
                # Checked again: the host's JVM may have kept its own write of the name while the bytes arrived.
                self._check_replaceable(checkpoint_path, name, modified_ms)
                os.replace(staging, copy)
                self._write_index(
                    copy, f"{checkpoint_path}\n{size}\n{crc32}\n{_NODE_MARK}{self._node_id}\n{partition}{modified}"
                )
        finally:
            staging.unlink(missing_ok=True)
        return f"kept {size} bytes"

    def _check_replaceable(self, checkpoint_path: str, name: str, modified_ms: int) -> None:
        existing = self.entry(checkpoint_path, name)
        if existing is not None and not existing.kept_by_node and not (0 < existing.modified_ms < modified_ms):
            raise FileCopyError(f"this host's executor wrote its own copy of {checkpoint_path}: kept, not replaced")
        if existing is not None and 0 < modified_ms < existing.modified_ms:
            # A late shipment from the partition's earlier primary, after its re-run's rewrite arrived.
            raise FileCopyError(f"a later write of {checkpoint_path} is held here: kept, not replaced")

    @contextlib.contextmanager
    def _host_lock(self) -> Iterator[None]:
        """Held while a copy and its index entry are replaced, by every process of the host that does it (the
        executors' JVMs too, `ReplicaFiles.underHostLock`): two writers of one name could otherwise leave one's
        bytes under the other's index entry. `lockf` is the POSIX record lock Java's `FileChannel.lock` takes; it
        is per process, so this node's threads queue on a lock of their own first."""
        with self._threads_lock:
            fd = os.open(self.directory / HOST_LOCK_NAME, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the lock

    def delete_shipped(self, checkpoint_path: str, name: str) -> bool:
        """Remove the copy of `checkpoint_path` if a peer shipped it (never one this host's JVM wrote)."""
        entry = self.entry(checkpoint_path, name)
        if entry is None or not entry.kept_by_node:
            return False
        copy = self.copy_path(checkpoint_path, name)
        with contextlib.suppress(OSError):
            Path(str(copy) + INDEX_SUFFIX).unlink()
        with contextlib.suppress(OSError):
            copy.unlink()
        return True

    def _write_index(self, copy: Path, text: str) -> None:
        index = Path(str(copy) + INDEX_SUFFIX)
        staging = self.directory / f".{index.name}.{uuid.uuid4()}.tmp"
        try:
            staging.write_text(text, "utf-8")
            os.replace(staging, index)
        finally:
            staging.unlink(missing_ok=True)


def _check_names(checkpoint_path: str, name: str) -> None:
    if state_file_version(name) is None:
        raise FileCopyError(f"{name!r} is not the name of a state file of Spark's RocksDB provider")
    if not checkpoint_path.endswith("/" + name) or "/state/" not in checkpoint_path or "\x00" in checkpoint_path:
        raise FileCopyError(f"{checkpoint_path!r} is not a state file's checkpoint path ending in {name!r}")
