"""Bootstrapping a new replica: a snapshot streamed in chunks, throttled to a bytes/s budget.

The serving side streams a SnapshotStart (the manifest) then every file's chunks in order; the
receiving side writes them to a directory, checking every size and CRC-32 against the manifest.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

from statestore.checkpoint_fs import LOCAL, CheckpointFS
from statestore.errors import CorruptFileError
from statestore.logs import log_event
from statestore.rpc import replication_pb2
from statestore.snapshot import SnapshotFile, SnapshotManifest

_log = logging.getLogger("statestore.node.bootstrap")
_PROGRESS_EVERY_SECONDS = 1.0


class Throttle:
    """Sleeps just enough to keep a byte stream under `bytes_per_second` (0: unthrottled)."""

    def __init__(self, bytes_per_second: int) -> None:
        self._rate = bytes_per_second
        self._start = time.monotonic()
        self._sent = 0

    def account(self, size: int) -> None:
        """Count `size` bytes sent, sleeping if the stream is ahead of its budget."""
        self._sent += size
        if self._rate > 0:
            ahead = self._sent / self._rate - (time.monotonic() - self._start)
            if ahead > 0:
                time.sleep(ahead)


def stream_snapshot(
    snapshot_dir: str | Path,
    manifest: SnapshotManifest,
    bytes_per_second: int,
    chunk_bytes: int,
    fs: CheckpointFS = LOCAL,
) -> Iterator[replication_pb2.SnapshotChunk]:
    """The chunks of a snapshot's files (in the directory `snapshot_dir` of `fs`), throttled, with progress
    logged."""
    yield replication_pb2.SnapshotChunk(
        start=replication_pb2.SnapshotStart(
            store_id=manifest.store_id,
            version=manifest.version,
            total_bytes=manifest.total_bytes,
            files=[replication_pb2.SnapshotFileInfo(name=f.name, size=f.size, crc32=f.crc32) for f in manifest.files],
        )
    )
    throttle = Throttle(bytes_per_second)
    sent = 0
    last_progress = time.monotonic()
    for info in manifest.files:
        with fs.open_input(fs.join(str(snapshot_dir), info.name)) as source:
            offset = 0
            while chunk := source.read(chunk_bytes):
                yield replication_pb2.SnapshotChunk(
                    file=replication_pb2.FileChunk(name=info.name, offset=offset, data=chunk)
                )
                offset += len(chunk)
                sent += len(chunk)
                throttle.account(len(chunk))
                if time.monotonic() - last_progress >= _PROGRESS_EVERY_SECONDS:
                    last_progress = time.monotonic()
                    log_event(
                        _log,
                        "bootstrap_sending",
                        store=manifest.store_id,
                        version=manifest.version,
                        sent_bytes=sent,
                        total_bytes=manifest.total_bytes,
                    )
    log_event(_log, "bootstrap_sent", store=manifest.store_id, version=manifest.version, total_bytes=sent)


def receive_snapshot(
    chunks: Iterator[replication_pb2.SnapshotChunk], destination: Path, source: str
) -> SnapshotManifest:
    """Write a streamed snapshot into `destination` (created), checking sizes and checksums.

    Raises CorruptFileError naming `source` when the stream is out of order, short, or damaged.
    """
    iterator = iter(chunks)
    first = next(iterator, None)
    if first is None or first.WhichOneof("part") != "start":
        raise CorruptFileError(source, "snapshot stream does not begin with its manifest")
    start = first.start
    manifest = SnapshotManifest(
        start.store_id, start.version, tuple(SnapshotFile(f.name, f.size, f.crc32) for f in start.files)
    )
    expected = {f.name: f for f in manifest.files}
    for name in expected:
        # A snapshot is one flat RocksDB directory: a name that leaves it is a damaged (or hostile) manifest.
        if not name or "/" in name or name in (".", ".."):
            raise CorruptFileError(source, f"snapshot manifest names {name!r}, not a file of one directory")
    destination.mkdir(parents=True)
    progress = {name: (0, 0) for name in expected}  # name -> (bytes written, running crc)
    handles = {}
    received = 0
    last_progress = time.monotonic()
    try:
        for chunk in iterator:
            part = chunk.file
            if part.name not in expected or part.offset != progress[part.name][0]:
                raise CorruptFileError(source, f"unexpected chunk {part.name!r} at offset {part.offset}")
            handle = handles.get(part.name)
            if handle is None:
                handle = handles[part.name] = open(destination / part.name, "wb")  # noqa: SIM115
            handle.write(part.data)
            written, crc = progress[part.name]
            progress[part.name] = (written + len(part.data), zlib.crc32(part.data, crc))
            received += len(part.data)
            if time.monotonic() - last_progress >= _PROGRESS_EVERY_SECONDS:
                last_progress = time.monotonic()
                log_event(
                    _log,
                    "bootstrap_receiving",
                    store=manifest.store_id,
                    version=manifest.version,
                    received_bytes=received,
                    total_bytes=manifest.total_bytes,
                )
    finally:
        for handle in handles.values():
            handle.close()
    for name, info in expected.items():
        written, crc = progress[name]
        if written != info.size or crc != info.crc32:
            raise CorruptFileError(
                source,
                f"snapshot file {name}: {written} bytes crc {crc:#010x}, "
                f"manifest says {info.size} bytes crc {info.crc32:#010x}",
            )
        if info.size == 0:
            (destination / name).touch()
    return manifest
